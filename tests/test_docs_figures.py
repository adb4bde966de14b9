"""Figures live in their records: no page and no help text states a measurement outside a quoted record block.

**What is checked**: ``README.md``, every ``docs/**/*.md`` (tutorials and reference pages included), the top-level
``avey-b --help``, every verb's ``avey-b VERB --help`` and every sub-command's (``avey-b niah generate --help``),
the parsers built in this process from :data:`avey_b.cli.COMMANDS`, without torch.

**What is an offence** (one pattern each, case-insensitive, on one line):

* a speed ratio: a number written against ``×`` or ``x`` (``2.3×``, ``1.44x``, ``×2.0``), or "N times faster /
  slower / ..." (a product written with spaces, ``16 × 2``, is arithmetic, not a ratio);
* a throughput: a number, then at most two words, then ``WORD/s`` (``7,906 tokens/s``, ``137 short requests/s``,
  ``12 GFLOP/s``, ``3 it/s``) or "per second" (a unit named without a number, "throughput (tokens/s)", states
  nothing);
* a timing: a number with a unit of time (``47 s``, ``0.84 s``, ``5-7 minutes``, ``120 ms``, ``2 hours``);
* a memory figure: a number with a unit of bytes (``0.7 GB``, ``512 MiB``);
* a date: ``2026-11-01`` or a month and a year (``November 2026``).

**The one place a figure may stand**: a *quoted record block*, a run of consecutive Markdown blockquote lines
(``>`` first on the line) of which one links a file under ``benchmarks/``: the record is the figure's home, the
quote says where it comes from. Nothing else is exempt: code blocks are checked like prose (a command's comment
or an output sample that shows a timing is a measurement too; quote it from its record or leave it out).

**Rough durations of a command the reader runs** ("5-7 minutes on 2 cores") are measurements too (of one machine,
on one day): a page says it in words ("a few minutes on a laptop's CPU") and links the record that timed it. So
no rule exempts them.

**The allowlist** (:data:`ALLOWED`) holds only text that matches a pattern and is not a measurement, each entry a
narrow regular expression removed from the line before the patterns run: an option whose name carries its unit
with its value (``--keep-alive-s 5``); an option's default (``default 256 MiB``); a period the program keeps (``a
line every 30 s``); a rule of memory (``24·d bytes per token``); the server's start line stating its cache limit.
Version numbers ("PyTorch 2.13"), core counts ("2 cores"), sizes in tokens ("16K tokens"), a hyphenated setting
("a 15-minute cap"), arithmetic written with spaces ("16 × 2") and paper citations ("ICLR 2026") match no pattern,
so they need no entry.

An offence is reported as ``file:line: the text``, every one of them at once.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

from avey_b import cli

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]

_NUMBER = r"(?<![\w.-])\d+(?:[.,]\d+)*(?:\s*[-–]\s*\d+(?:[.,]\d+)*)?"
_MONTHS = "january|february|march|april|may|june|july|august|september|october|november|december"

#: What a figure looks like, by kind.
FIGURES = {
    "speed ratio": re.compile(rf"{_NUMBER}[×x](?![\w×])|(?<![\w.])×\d|\b\d+(?:\.\d+)?\s+times\s+"
                              r"(?:faster|slower|smaller|larger|bigger|quicker|less|more|fewer)\b", re.I),
    "throughput": re.compile(rf"{_NUMBER}\s?[kmg]?\s?(?:[\w-]+\s){{0,2}}[\w-]*/s\b|{_NUMBER}\s?[kmg]?\s"
                             r"(?:[\w-]+\s){0,2}per\s+second\b", re.I),
    "timing": re.compile(rf"{_NUMBER}\s?(?:ms|µs|us|ns|s|sec|secs|seconds?|min|mins|minutes?|h|hrs?|hours?|days?)"
                         r"\b(?!-)", re.I),
    "memory": re.compile(rf"{_NUMBER}\s?(?:[kmgt]i?b|bytes)\b", re.I),
    "date": re.compile(rf"\b20\d\d-\d\d-\d\d\b|\b(?:{_MONTHS})\s+(?:\d{{1,2}},\s+)?20\d\d\b", re.I),
}

#: Text that matches a pattern but is not a measurement (removed from the line before the patterns run).
ALLOWED = [
    re.compile(r"--[\w-]+-(?:s|ms|mb|gb|bytes|seconds)[ =]\S+"),  # an option named with its unit: --keep-alive-s 5
    re.compile(r"\bdefault:?\s+[\d.,]+\s?\w+"),  # an option's default: "default 256 MiB"
    re.compile(r"\bevery\s+[\d.]+\s?(?:s|seconds|minutes)\b"),  # a period the program keeps: "a line every 30 s"
    re.compile(r"\b\d+(?:·d)?\s+bytes\s+per\b"),  # a rule of memory: "24 bytes per token"
    re.compile(r"\bprefix cache up to [\d,]+ bytes \(--prefix-cache-bytes\)"),  # the server's start line: a setting
]

_LINK_TO_RECORD = re.compile(r"\]\([^)]*benchmarks/[^)]*\)|\bbenchmarks/[\w./-]+")


def offences(text: str, name: str) -> list[str]:
    """``name:line: text`` for every line of ``text`` that states a figure outside a quoted record block."""
    lines = text.splitlines()
    quoted = _quoted_record_lines(lines)
    found = []
    for number, line in enumerate(lines, 1):
        if number in quoted:
            continue
        rest = line
        for allowed in ALLOWED:
            rest = allowed.sub(" ", rest)
        if any(pattern.search(rest) for pattern in FIGURES.values()):
            found.append(f"{name}:{number}: {line.strip()}")
    return found


def _quoted_record_lines(lines: list[str]) -> set[int]:
    """The (1-based) numbers of the lines in a blockquote that links a record under ``benchmarks/``."""
    quoted, block = set(), []
    for number, line in enumerate([*lines, ""], 1):
        if line.lstrip().startswith(">"):
            block.append(number)
            continue
        if block and any(_LINK_TO_RECORD.search(lines[n - 1]) for n in block):
            quoted.update(block)
        block = []
    return quoted


def help_texts() -> dict[str, str]:
    """``avey-b --help``, every verb's and every sub-command's ``--help``, as the user sees them (no torch)."""
    texts = {"avey-b --help": cli._usage()}
    for name, verb in cli.COMMANDS.items():
        for module in verb.registers:
            importlib.import_module(module)
        module, _, function = verb.parser.partition(":")
        parser = getattr(importlib.import_module(module), function)()
        texts[f"avey-b {name} --help"] = parser.format_help()
        for action in parser._subparsers._group_actions if parser._subparsers else ():  # niah generate, ...
            for sub, subparser in action.choices.items():
                texts[f"avey-b {name} {sub} --help"] = subparser.format_help()
    return texts


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_no_page_states_a_figure_outside_a_quoted_record(page):
    found = offences(page.read_text(encoding="utf-8"), str(page.relative_to(ROOT)))
    assert not found, "figures belong in benchmarks/ (link the record, or quote it in a '>' block that links " \
                      "it):\n" + "\n".join(found)


def test_no_help_text_states_a_figure():
    found = [hit for name, text in help_texts().items() for hit in offences(text, name)]
    assert not found, "help texts link the benchmark folder instead of stating figures:\n" + "\n".join(found)


def test_the_check_catches_a_planted_figure_and_accepts_it_quoted_from_its_record():
    """The check can fail: each kind of figure, planted in prose, in a code block or in a quote that links no
    record, is caught; the same figures in a quote that links their record pass, as do the allowed non-figures."""
    planted = ["Avey-B base is 2.31× faster at 2K tokens.", "It is 3 times faster.", "7,906 tokens/s with 8 clients.",
               "The job takes 5-7 minutes.", "Done in 47 s.", "0.84 s with a 0.7 GB peak.", "Measured 2026-11-01.",
               "Measured in November 2026.", "```text\nstep 10  12.5 it/s\n```", "> 1.44x on 2 CPU cores.",
               "int8 took 155 ms (×2.0)", "137 short requests/s for one client"]
    for text in planted:
        assert offences(text, "page.md"), text
    assert offences("intro\n\n" + planted[0], "page.md") == [f"page.md:3: {planted[0]}"]
    record = "> 2.31× at 2K tokens, 0.84 s with a 0.7 GB peak, measured 2026-11-01\n> " \
             "([the record](../benchmarks/efficiency_gpu/README.md))"
    assert offences(record, "page.md") == []
    assert offences(record + "\n\nAnd in prose: 2.31× at 2K tokens.", "page.md") == \
        ["page.md:4: And in prose: 2.31× at 2K tokens."]
    fine = ["Avey-B (Acharya & Hammoud, ICLR 2026) on PyTorch 2.13, 2 cores, batch 8, 4,096 tokens.",
            "avey-b serve MODEL --keep-alive-s 5", "a 3x3 grid", "the lr x seed protocol", "split size 256",
            "QA runs 32 as 16 × 2", "latency and throughput (tokens/s)", "a 15-minute cap", "a line every 30 s",
            "the cache (default 256 MiB)"]
    assert [text for text in fine if offences(text, "page.md")] == []
