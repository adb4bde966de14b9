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


def test_no_generated_page_shows_raw_rest_markup(pages):
    for uri, page in pages.items():
        prose = re.sub(r"^```.*?^```", "", page, flags=re.M | re.S)
        assert not RAW_ROLE.search(prose), uri
        assert "``" not in prose, uri


def test_rest_roles_become_code():
    text = "see :class:`avey_b.x.Y`, :func:`~avey_b.z.f` and ``key=value`` | a <b> *c* [d][e]"
    assert cli_reference.markdown_text(text) == r"see `avey_b.x.Y`, `f` and `key=value` \| a &lt;b> \*c\* \[d]\[e]"


def test_a_verb_whose_parser_cannot_be_built_is_refused(monkeypatch):
    monkeypatch.setitem(COMMANDS, "broken", Verb("avey_b.cli:no_such_parser", "avey_b.cli:main", "broken"))
    with pytest.raises(cli_reference.ReferenceError, match="avey-b broken: its parser 'avey_b.cli:no_such_parser' "
                       "cannot be built"):
        cli_reference.pages()
    monkeypatch.setitem(COMMANDS, "broken", Verb("avey_b.cli:main", "avey_b.cli:main", "broken"))
    with pytest.raises(cli_reference.ReferenceError, match="not an argparse.ArgumentParser"):
        cli_reference.build("broken")
