"""`configs.add_arguments`: one flag per documented dataclass field, for every field type a verb declares
(scalars, lists and tuples of them, required fields, `no_x` switches), and `configs.from_args` back to the dataclass."""

import argparse
from dataclasses import dataclass, field

import pytest

from avey_b import configs


@dataclass
class Options:
    out: str
    "where it goes"
    lengths: list[int] = field(default_factory=lambda: [128, 256])
    "sequence lengths"
    names: tuple[str, ...] = ("a",)
    "some names"
    scales: list[float] | None = None
    "optional scales"
    modes: list[str] = field(default_factory=lambda: ["eager"])
    "eager and/or compile"
    no_cache: bool = False
    "switch the cache off"
    resume: bool = False
    "continue"


def parser(**kw) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="t")
    configs.add_arguments(p, Options, choices={"modes": ("eager", "compile")}, **kw)
    return p


def test_list_tuple_required_and_switch_fields_have_their_flags():
    args = parser().parse_args(["--out", "o", "--lengths", "16", "40", "--names", "x", "y", "--scales", "0.5",
                                "--modes", "eager", "compile", "--no-cache", "--resume"])
    assert configs.from_args(Options, args) == Options(out="o", lengths=[16, 40], names=("x", "y"), scales=[0.5],
                                                       modes=["eager", "compile"], no_cache=True, resume=True)
    assert configs.from_args(Options, parser().parse_args(["--out", "o"])) == Options(out="o")
    assert configs.from_args(Options, parser().parse_args(["--out", "o", "--no-resume"]), out="p") == Options("p")


def test_bad_values_and_a_missing_required_flag_are_argparse_errors(capsys):
    for argv, message in ((["--lengths", "1"], "the following arguments are required: --out"),
                          (["--out", "o", "--lengths", "x"], "invalid int value: 'x'"),
                          (["--out", "o", "--modes", "jit"], "invalid choice: 'jit'"),
                          (["--out", "o", "--lengths"], "expected at least one argument"),
                          (["--out", "o", "--no-no-cache"], "unrecognized arguments: --no-no-cache")):
        with pytest.raises(SystemExit):
            parser().parse_args(argv)
        assert message in capsys.readouterr().err


def test_help_shows_list_defaults_and_docs():
    text = parser().format_help()
    assert "--lengths LENGTHS [LENGTHS ...]" in text and "sequence lengths (default: 128 256)" in text
    assert "--no-cache " in text and "--no-no-cache" not in text and "--resume, --no-resume" in text


def test_without_defaults_a_flag_not_given_is_absent():
    args = parser(defaults=False).parse_args(["--out", "o", "--names", "z"])
    assert vars(args) == {"out": "o", "names": ("z",)}


def test_a_field_without_a_command_line_form_is_named():
    @dataclass
    class Bad:
        table: dict = field(default_factory=dict)

    with pytest.raises(TypeError, match="Bad.table"):
        configs.add_arguments(argparse.ArgumentParser(), Bad)
