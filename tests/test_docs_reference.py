"""The manual's reference, generated from the code: the command-line pages (``docs/cli_reference.py``, added to the
site by the docs hook) list every verb and every option, and the rendered API pages show no raw reST markup."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import pytest

from avey_b.cli import COMMANDS, Verb

ROOT = Path(__file__).resolve().parents[1]
RAW_ROLE = re.compile(r":(?:class|func|mod|meth|data|attr|exc|obj):`")

sys.path.insert(0, str(ROOT / "docs"))
try:
    import cli_reference
    import griffe_docstrings
finally:
    sys.path.remove(str(ROOT / "docs"))


@pytest.fixture(scope="module")
def pages() -> dict[str, str]:
    return cli_reference.pages()


def option_strings(parser: argparse.ArgumentParser) -> list[str]:
    """Every option string ``--help`` shows of ``parser``, of its sub-commands and of its parts (``avey-b
    finetune``'s families)."""
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found += option_strings(sub)
        elif not isinstance(action, argparse._HelpAction) and action.help != argparse.SUPPRESS:
            found += action.option_strings
    for _, part in getattr(parser, "parts", list)():
        found += option_strings(part)
    return found


def test_every_verb_has_a_page_and_the_index_lists_it(pages):
    assert set(pages) == {"reference/cli/index.md", *(f"reference/cli/{verb}.md" for verb in COMMANDS)}
    for verb in COMMANDS:
        assert f"[`{verb}`]({verb}.md)" in pages["reference/cli/index.md"]
        assert pages[f"reference/cli/{verb}.md"].startswith(f"# avey-b {verb}\n")


@pytest.mark.parametrize("verb", list(COMMANDS))
def test_every_option_of_a_verb_is_on_its_page(verb, pages):
    page = pages[f"reference/cli/{verb}.md"]
    strings = option_strings(cli_reference.build(verb))
    assert strings, verb
    assert [s for s in strings if f"`{s}`" not in page] == []


def test_pretrain_lists_its_config_keys_with_defaults():
    from avey_b import configs
    from avey_b.training.config import PretrainConfig

    page = cli_reference.page("pretrain")
    for key, default, _ in configs.keys(PretrainConfig()):
        assert f"| `{key}` | `{default!r}` |" in page


def test_every_public_name_has_an_api_entry():
    """Every name of ``from avey_b import ...`` is documented on one of the API pages (``docs/api/*.md``)."""
    import avey_b

    entries = {line.split()[1].rpartition(".")[2] for page in (ROOT / "docs" / "api").glob("*.md")
               for line in page.read_text(encoding="utf-8").splitlines() if line.startswith("::: ")}
    assert [name for name in avey_b.__all__ if name not in entries] == []


def test_no_generated_page_shows_raw_rest_markup(pages):
    for uri, page in pages.items():
        prose = re.sub(r"^```.*?^```", "", page, flags=re.M | re.S)
        assert not RAW_ROLE.search(prose), uri
        assert "``" not in prose, uri


def test_rest_roles_become_code():
    text = "see :class:`avey_b.x.Y`, :func:`~avey_b.z.f` and ``key=value`` | a <b> *c* [d][e]"
    assert cli_reference.markdown_text(text) == r"see `avey_b.x.Y`, `f` and `key=value` \| a &lt;b> \*c\* \[d]\[e]"


def test_the_griffe_extension_rewrites_roles_and_transformers_args():
    """The API pages' docstrings: roles become optional cross-references (code where the target is not documented),
    transformers' ``name (`type`, defaults to x):`` entries Google's ``name (type):``."""
    text = griffe_docstrings.markdown("see :class:`~avey_b.x.Y` and :func:`f`, ``k=v``", "avey_b.m")
    assert text == ('see <autoref identifier="avey_b.x.Y" optional><code>Y</code></autoref> and '
                    '<autoref identifier="avey_b.m.f" optional><code>f</code></autoref>, `k=v`')
    doc = ("Summary.\n\nArgs:\n    size (`int`, defaults to 3): the size; see\n        x (`a`): not an entry.\n"
           "    names (`list[str]`, *optional*): names.\n    flag: a flag.\n\nReturns:\n    x (`int`): kept.")
    assert griffe_docstrings.google_args(doc) == (
        "Summary.\n\nArgs:\n    size (int): the size; see\n        x (`a`): not an entry.\n"
        "    names (list[str]): names.\n    flag: a flag.\n\nReturns:\n    x (`int`): kept.")


def test_a_verb_whose_parser_cannot_be_built_is_refused(monkeypatch):
    monkeypatch.setitem(COMMANDS, "broken", Verb("avey_b.cli:no_such_parser", "avey_b.cli:main", "broken"))
    with pytest.raises(cli_reference.ReferenceError, match="avey-b broken: its parser 'avey_b.cli:no_such_parser' "
                       "cannot be built"):
        cli_reference.pages()
    monkeypatch.setitem(COMMANDS, "broken", Verb("avey_b.cli:main", "avey_b.cli:main", "broken"))
    with pytest.raises(cli_reference.ReferenceError, match="not an argparse.ArgumentParser"):
        cli_reference.build("broken")


@pytest.mark.slow
def test_the_api_pages_render_no_raw_markup_and_the_config_as_a_table(built_site):
    pages = sorted((built_site / "api").glob("*/index.html"))
    assert pages
    for page in pages:
        html = page.read_text(encoding="utf-8")
        assert not RAW_ROLE.search(html), page
        assert "``" not in html, page
    html = (built_site / "api" / "model" / "index.html").read_text(encoding="utf-8")
    config = html[html.index('id="avey_b.model.configuration.AveyBConfig"'):]
    table = config[config.index("<table"):config.index("</table>")]
    for name, default in (("vocab_size", "50368"), ("hidden_size", "768"), ("padding", "&#39;masked&#39;")):
        assert f"<code>{name}</code>" in table and default in table, name
    assert 'href="#avey_b.model.execution.ExecutionSettings"' in config  # a role became a cross-reference


@pytest.mark.slow
def test_the_command_line_pages_are_in_the_site(built_site):
    for verb in COMMANDS:
        html = (built_site / "reference" / "cli" / verb / "index.html").read_text(encoding="utf-8")
        assert f'<h1 id="avey-b-{verb}">avey-b {verb}' in html and "<table>" in html, verb
