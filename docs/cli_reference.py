"""The command-line reference of the manual, written from the parsers themselves so that it never drifts.

``pages()`` returns ``{uri: markdown}``: ``reference/cli/index.md`` (the verbs, one line each, from
:data:`avey_b.cli.COMMANDS`) and ``reference/cli/VERB.md`` for every verb: its usage line, description, every
option (flags, type or choices, default, help) grouped as the parser groups them, its sub-commands, and the epilog.
Three shapes of parser are read beside plain ``argparse``: sub-commands (``add_subparsers``), a parser with
``parts()`` (``avey-b finetune``: one parser per task family) and a parser with ``config_keys()`` (``avey-b
pretrain``: the keys of its YAML config, with their defaults and documentation, which its epilog lists as text).

Help texts are written for a terminal and for Python docstrings: their reST roles (``:class:`X```, double
backticks) become Markdown code here. Building a parser imports no torch (``tests/test_layout.py``); the package
``avey_b`` itself imports the model on import except in the ``avey-b`` command line, so in a process that has not
imported it yet (``mkdocs build``) it is imported the way the command line imports it (:func:`commands`). The docs
hook (``docs/hooks.py``) adds the pages to the site.
"""

from __future__ import annotations

import argparse
import importlib
import re
import sys
import textwrap

from griffe_docstrings import ROLE  # the reST roles, as the API pages read them (beside this file)

PREFIX = "reference/cli"
#: Double backticks (the roles: ROLE, ``~`` keeping the last name only).
DOUBLE = re.compile(r"``(.+?)``")
#: The first words of lines that make an indented block shell commands (else plain text).
SHELL_WORDS = ("avey-b", "curl", "python", "pip", "torchrun", "#")
DEFAULT = re.compile(r"\s*\(default: ([^()]*(?:\([^()]*\)[^()]*)*)\)\s*$")


def commands() -> dict:
    """``avey_b.cli.COMMANDS``. Where ``avey_b`` is not imported yet, it is imported as the ``avey-b`` command line
    imports it (``avey_b._imported_by_the_command_line``: the model, torch and transformers on first use only), so
    that the pages are written as fast as ``avey-b VERB --help`` answers."""
    if "avey_b" not in sys.modules:
        argv0, sys.argv[0:1] = sys.argv[:1], ["avey-b"]
        try:
            import avey_b  # noqa: F401
        finally:
            sys.argv[0:1] = argv0
    from avey_b.cli import COMMANDS

    return COMMANDS


class ReferenceError(RuntimeError):
    """A verb whose parser cannot be built (its page would be missing or wrong)."""


def markdown_text(text: str) -> str:
    """A help text as Markdown: reST roles and double backticks become code; ``<``, ``*`` and ``|`` outside code
    are escaped (a table cell, not HTML or emphasis)."""
    text = ROLE.sub(lambda m: f"`{m.group(2).rpartition('.')[2] if m.group(1) else m.group(2)}`", text)
    text = DOUBLE.sub(lambda m: f"`{m.group(1)}`", text)
    parts = re.split(r"(`[^`]+`)", text)
    escape = {"<": "&lt;", "*": r"\*", "|": r"\|", "[": r"\["}
    return "".join(part if part.startswith("`") else "".join(escape.get(c, c) for c in part) for part in parts)


def prose(text: str | None) -> str:
    """A description or epilog as Markdown: prose paragraphs, bullets (``- x``) as lists, and indented lines that
    do not continue a bullet (commands, tables of routes) as code blocks."""
    out: list[str] = []
    for paragraph in re.split(r"\n[ \t]*\n", (text or "").strip("\n")):
        kind, block = None, []
        last = next((line for line in reversed(out) if line), "")
        lines = paragraph.splitlines()
        if paragraph.startswith(" ") and last.lstrip("\n").startswith("- "):  # a bullet's second paragraph
            lines = textwrap.dedent(paragraph).splitlines()
            more = next((i for i, line in enumerate(lines) if line.startswith(("- ", "* "))), len(lines))
            out[out.index(last, len(out) - 3)] = last + " " + markdown_text(" ".join(" ".join(lines[:more]).split()))
            lines = lines[more:]
        for line in lines:
            indented = line.startswith(" ")
            if line.lstrip().startswith(("- ", "* ")):
                new = "item"
            elif indented and kind in ("item", "code"):
                block.append(line)
                continue
            else:
                new = "code" if indented else "prose"
            if new != kind or new == "item":
                _flush(out, kind, block)
                kind, block = new, []
            block.append(line)
        _flush(out, kind, block)
        out.append("")
    return re.sub(r"\n{3,}", "\n\n", "\n".join(out)).strip()


def _flush(out: list[str], kind: str | None, block: list[str]) -> None:
    """Add a block of lines (``kind``: prose, item or code) to the Markdown lines ``out``."""
    if not block:
        return
    if kind == "code":
        width = min(len(line) - len(line.lstrip()) for line in block)
        code = "\n".join(line[width:] for line in block)
        shell = all(line.split()[0] in SHELL_WORDS for line in code.splitlines() if line.strip())
        language = "bash" if shell else "text"
        last = max((i for i, line in enumerate(out) if line), default=None)
        if last is not None and out[last].startswith(f"```{language}\n") and out[last].endswith("```"):
            out[last] = out[last].removesuffix("\n```") + "\n\n" + code + "\n```"  # one block across blank lines
        else:
            out += ["", f"```{language}\n" + code + "\n```", ""]
        return
    text = markdown_text(" ".join(line.strip() for line in block))
    if kind == "item":
        out.append(("" if out and out[-1].startswith("- ") else "\n") + "- " + text[2:].lstrip())
    else:
        out += ["", text]


def build(verb: str):
    """The parser of ``verb`` (``avey_b.cli.COMMANDS``), after importing what the verb registers, as the command
    line does; a parser that cannot be built is a :class:`ReferenceError` naming the verb."""
    verbs = commands()
    if verb not in verbs:
        raise ReferenceError(f"no verb {verb!r} in avey_b.cli.COMMANDS")
    spec = verbs[verb]
    try:
        for module in spec.registers:
            importlib.import_module(module)
        module, _, function = spec.parser.partition(":")
        parser = getattr(importlib.import_module(module), function)()
    except Exception as error:
        raise ReferenceError(f"avey-b {verb}: its parser {spec.parser!r} cannot be built for the command-line "
                             f"reference: {type(error).__name__}: {error}") from error
    if not isinstance(parser, argparse.ArgumentParser):
        raise ReferenceError(f"avey-b {verb}: {spec.parser!r} returned {type(parser).__name__}, not an "
                             "argparse.ArgumentParser")
    return parser


def _kind(action: argparse.Action) -> str:
    if action.choices is not None and not isinstance(action, argparse._SubParsersAction):
        return ("one or more of " if action.nargs == "+" else "one of ") + ", ".join(f"`{c}`" for c in action.choices)
    if isinstance(action, argparse.BooleanOptionalAction):
        return "switch (`--x` / `--no-x`)"
    if action.nargs == 0:
        return "switch"
    name = action.metavar or getattr(action.type, "__name__", None) or "str"
    if isinstance(name, tuple):
        name = " ".join(name)
    many = {"+": "one or more ", "*": "any number of ", "?": "optional "}.get(action.nargs, "")
    return f"{many}`{name}`"


def _row(action: argparse.Action, formatter: argparse.HelpFormatter) -> str:
    flags = ", ".join(f"`{s}`" for s in action.option_strings) or f"`{action.metavar or action.dest}`"
    text = formatter._expand_help(action) if action.help else ""
    match = DEFAULT.search(text)
    if match:
        text, default = text[:match.start()], f"`{match.group(1)}`"
    elif action.required and action.nargs not in ("*", "?"):
        default = "required"
    elif action.default not in (None, argparse.SUPPRESS, False, []) and action.option_strings:
        default = f"`{action.default}`"
    else:
        default = ""
    return f"| {flags} | {_kind(action)} | {default} | {markdown_text(' '.join(text.split()))} |"


def options(parser: argparse.ArgumentParser, level: int) -> list[str]:
    """The option tables of ``parser``, one per argument group, then a section per sub-command."""
    formatter = parser._get_formatter()
    out, subcommands = [], []
    for group in parser._action_groups:
        rows = []
        for action in group._group_actions:
            if isinstance(action, argparse._SubParsersAction):
                subcommands.append(action)
            elif action.help != argparse.SUPPRESS and not isinstance(action, argparse._HelpAction):
                rows.append(_row(action, formatter))
        if rows:
            out += [f"{'#' * level} {group.title[:1].upper() + group.title[1:]}", "",
                    "| Option | Takes | Default | Meaning |", "|---|---|---|---|", *rows, ""]
    for action in subcommands:
        helps = {choice.dest: choice.help for choice in action._choices_actions}
        for name, sub in action.choices.items():
            out += [f"{'#' * level} `{sub.prog}`", "", markdown_text(helps.get(name) or ""), "",
                    _usage(sub), "", prose(sub.description), "", *options(sub, level + 1), prose(sub.epilog), ""]
    return out


def _usage(parser: argparse.ArgumentParser) -> str:
    lines = parser.format_usage().removeprefix("usage: ").rstrip().splitlines()
    return "```text\n" + "\n".join([lines[0], *(line[len("usage: "):] for line in lines[1:])]) + "\n```"


def page(verb: str) -> str:
    """The Markdown page of ``verb``."""
    parser = build(verb)
    summary = commands()[verb].help
    out = [f"# avey-b {verb}", "", markdown_text(summary[:1].upper() + summary[1:]) + ".",
           "", "Generated from the command's parser; `avey-b " + verb + " --help` prints the same.", "",
           _usage(parser), "", prose(parser.description), "", *options(parser, 2)]
    for title, part in getattr(parser, "parts", list)():
        out += [f"## {markdown_text(title)}", "", _usage(part), "", prose(part.description), "", *options(part, 3),
                prose(part.epilog), ""]
    keys = getattr(parser, "config_keys", None)
    if keys is not None:  # its epilog lists them as text: a table here
        out += ["## Config keys", "", "Set in the YAML file given to `--config`, or as `key=value` after the "
                "options.", "", "| Key | Default | Meaning |", "|---|---|---|"]
        out += [f"| `{key}` | `{default!r}` | {markdown_text(doc)} |" for key, default, doc in keys()]
        out.append("")
    else:
        out += [prose(parser.epilog), ""]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(out)).strip() + "\n"


def index() -> str:
    rows = [f"| [`{name}`]({name}.md) | {markdown_text(verb.help)} |" for name, verb in commands().items()]
    return "\n".join(["# Command line", "", "Every action of the library is a verb of one command, `avey-b VERB`. "
                      "These pages are generated from the verbs' parsers, so they list exactly what `avey-b VERB "
                      "--help` accepts.", "", "```bash", "avey-b --help", "avey-b finetune --help", "```", "",
                      "| Verb | What it does |", "|---|---|", *rows, ""])


def pages() -> dict[str, str]:
    """``{uri: markdown}`` of the whole command-line reference."""
    return {f"{PREFIX}/index.md": index(), **{f"{PREFIX}/{verb}.md": page(verb) for verb in commands()}}
