"""The single ``avey-b`` command line.

Every user-facing action is a verb here, declared in two parts so that ``avey-b --help`` and ``avey-b VERB --help``
answer without importing torch:

* its **parser**: ``"module:function"``, a function that returns the verb's ``argparse.ArgumentParser``, built from
  its option declarations (documented dataclass fields, :func:`avey_b.configs.add_arguments`), in a module that
  imports only the standard library and other such modules (``tests/test_layout.py`` checks that no ``--help``
  imports torch);
* its **runner**: ``"module:function"``, the function that takes the parsed ``argparse.Namespace`` and returns the
  exit code, imported only when the verb runs;
* what it **registers**: modules of a higher room that add to the verb's tables before it parses (the paper's
  benchmark cells join ``finetune``'s task table, :mod:`avey_b.finetuning.registry`, which imports nothing of
  them).

(Under ``torchrun``, pretraining is ``torchrun ... -m avey_b.training.pretrain``, the same program as ``avey-b
pretrain``.)
"""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass


@dataclass(frozen=True)
class Verb:
    parser: str  # "module:function" returning the verb's argparse parser; its module imports no torch
    runner: str  # "module:function", called with the parsed arguments
    help: str  # one line for `avey-b --help`
    registers: tuple[str, ...] = ()  # modules imported first (no torch): they add to the verb's tables


COMMANDS: dict[str, Verb] = {
    "demo": Verb("avey_b.apps.demo_options:demo_parser", "avey_b.apps.demo:run",
                 "build a small Avey-B and encode text (no download)"),
    "pretrain": Verb("avey_b.training.config:build_parser", "avey_b.training.pretrain:run",
                     "masked-LM pretraining (local files or HF datasets)"),
    "finetune": Verb("avey_b.finetuning.options:finetune_parser", "avey_b.finetuning.run:run",
                     "fine-tune on your data (classifier, tagger, ...) or one benchmark cell",
                     registers=("avey_b.evaluation.settings",)),  # the paper's benchmark cells, in the task table
    "evaluate": Verb("avey_b.evaluation.suites:evaluate_parser", "avey_b.evaluation.sweep:run",
                     "the paper's lr x seed protocol over benchmarks"),
    "report": Verb("avey_b.evaluation.suites:report_parser", "avey_b.evaluation.report:run",
                   "the Table-3 report of an evaluation directory"),
    "ablation": Verb("avey_b.studies.options:ablation_parser", "avey_b.studies.ablation:run",
                     "pretrain and evaluate the paper's architecture variants"),
    "analyze": Verb("avey_b.studies.options:analyze_parser", "avey_b.studies.analysis:run",
                    "weights MODEL: statistics and heat maps of the static layers' V"),
    "niah": Verb("avey_b.evaluation.niah.options:niah_parser", "avey_b.evaluation.niah.cli:run",
                 "generate / evaluate needle-in-a-haystack sets"),
    "bench": Verb("avey_b.benchmarking.options:build_parser", "avey_b.benchmarking.efficiency:run",
                  "latency / throughput vs sequence length"),
    "convert": Verb("avey_b.apps.convert_options:convert_parser", "avey_b.apps.convert:run",
                    "convert an authors' release checkpoint to this library's format"),
    "export": Verb("avey_b.apps.export_options:export_parser", "avey_b.apps.export:run",
                   "an Avey-B checkpoint as ONNX / torch.export, for every length"),
    "serve": Verb("avey_b.apps.serve.options:serve_parser", "avey_b.apps.serve:run",
                  "an HTTP server: OpenAI, TEI and Cohere-style routes (embeddings, rerank, classify, ...)"),
    "embed": Verb("avey_b.apps.embed.options:embed_parser", "avey_b.apps.embed.job:run",
                  "embed a corpus into Parquet shards, resumably (whole documents or late chunks)"),
}


def _usage() -> str:
    lines = ["usage: avey-b <command> [options]", "", "commands:"]
    for name, verb in COMMANDS.items():
        lines.append(f"  {name:<10} {verb.help}")
    lines.append("")
    lines.append("Run 'avey-b <command> --help' for the options of one command; add --debug to see the traceback")
    lines.append("of an error instead of its one-line message.")
    return "\n".join(lines)


def _message(error: BaseException) -> str:
    text = error.args[0] if isinstance(error, KeyError) and len(error.args) == 1 else str(error)
    return f"{type(error).__name__}: {text}" if not isinstance(error, (ValueError, KeyError, OSError)) else str(text)


def parse(name: str, argv: list[str]):
    """The parsed arguments of verb ``name`` (``--help`` prints and exits here, before torch is imported)."""
    for module in COMMANDS[name].registers:
        importlib.import_module(module)
    module, _, function = COMMANDS[name].parser.partition(":")
    return getattr(importlib.import_module(module), function)().parse_args(argv)


def runner(name: str):
    """The function that runs verb ``name``. Importing it imports the model, which registers Avey-B with the
    transformers Auto classes."""
    importlib.import_module("avey_b.model.auto")
    module, _, function = COMMANDS[name].runner.partition(":")
    return getattr(importlib.import_module(module), function)


def main(argv: list[str] | None = None) -> int:
    """Dispatch to a verb. An error ends in one line on stderr and exit code 1; ``--debug`` (anywhere in the
    arguments) shows the traceback instead."""
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    argv = [a for a in argv if a != "--debug"]
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage())
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"avey-b: unknown command {name!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    try:
        args = parse(name, rest)  # before the runner is imported (torch), so that --help answers without it
        return int(runner(name)(args) or 0)
    except Exception as error:  # noqa: BLE001 -- one clear line for the user; --debug shows the traceback
        if debug:
            raise
        print(f"avey-b {name}: error: {_message(error)}\n(run with --debug for the traceback)", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
