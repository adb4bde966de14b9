"""The single ``avey-b`` command line.

Every user-facing action is a verb here. Each lives in its own module and exposes
``main(argv: list[str] | None) -> int``; this file only dispatches. Modules are imported lazily: ``avey-b
convert`` does not pay for importing the training or evaluation stacks. (Under ``torchrun``, pretraining is
``torchrun ... -m avey_b.training.pretrain``, the same program as ``avey-b pretrain``.)
"""

from __future__ import annotations

import importlib
import sys

# subcommand -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "demo": ("avey_b.apps.demo", "build a small Avey-B and encode text (no download)"),
    "pretrain": ("avey_b.training.pretrain", "masked-LM pretraining (local files or HF datasets)"),
    "finetune": ("avey_b.evaluation.finetune", "fine-tune and score one model on one task"),
    "evaluate": ("avey_b.evaluation.sweep", "the paper's lr x seed protocol over benchmarks"),
    "report": ("avey_b.evaluation.report", "the Table-3 report of an evaluation directory"),
    "ablation": ("avey_b.apps.ablation", "pretrain and evaluate the paper's architecture variants"),
    "analyze": ("avey_b.apps.analysis", "weights MODEL: statistics and heat maps of the static layers' V"),
    "niah": ("avey_b.evaluation.niah.cli", "generate / evaluate needle-in-a-haystack sets"),
    "bench": ("avey_b.benchmarking.efficiency", "latency / throughput vs sequence length"),
    "convert": ("avey_b.apps.convert", "convert an authors' release checkpoint to this library's format"),
    "export": ("avey_b.apps.export", "an Avey-B checkpoint as ONNX / torch.export, for every length"),
    "serve": ("avey_b.apps.serve", "an HTTP server: OpenAI-compatible embeddings, fill-mask, classification"),
    "embed": ("avey_b.apps.embed", "embed a corpus into Parquet shards, resumably (whole documents or late chunks)"),
}


def _usage() -> str:
    lines = ["usage: avey-b <command> [options]", "", "commands:"]
    for name, (_, text) in COMMANDS.items():
        lines.append(f"  {name:<10} {text}")
    lines.append("")
    lines.append("Run 'avey-b <command> --help' for the options of one command; add --debug to see the traceback")
    lines.append("of an error instead of its one-line message.")
    return "\n".join(lines)


def _message(error: BaseException) -> str:
    text = error.args[0] if isinstance(error, KeyError) and len(error.args) == 1 else str(error)
    return f"{type(error).__name__}: {text}" if not isinstance(error, (ValueError, KeyError, OSError)) else str(text)


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
    module = importlib.import_module(COMMANDS[name][0])
    if debug:
        return int(module.main(rest) or 0)
    try:
        return int(module.main(rest) or 0)
    except Exception as error:  # noqa: BLE001 -- one clear line for the user; --debug shows the traceback
        print(f"avey-b {name}: error: {_message(error)}\n(run with --debug for the traceback)", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
