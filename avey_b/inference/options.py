"""How a saved Avey-B is loaded for inference: :class:`LoadOptions`, one declaration for the Python API
(:class:`avey_b.inference.encoder.Encoder`) and the command-line flags of the verbs that load a model
(:func:`add_load_arguments`). Standard library only, so that ``avey-b VERB --help`` imports no torch.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from avey_b import configs

#: Padded tokens per batch by default: of :meth:`avey_b.Encoder.encode`, ``avey-b serve`` and ``avey-b embed``.
MAX_BATCH_TOKENS = 32_768
#: The vectors an encoder gives, any subset from one forward (:meth:`avey_b.Encoder.vectors`), in this order:
#: ``dense`` (one per input: every checkpoint), ``sparse`` (SPLADE's vocabulary weights: a masked-LM head),
#: ``multivector`` (token vectors: the multi-vector head). ``avey-b embed --outputs`` and ``serve``'s ``/info`` name
#: the same.
OUTPUTS = ("dense", "sparse", "multivector")


@dataclass(frozen=True)
class LoadOptions:
    """How a saved Avey-B is loaded for inference (:class:`avey_b.Encoder`): where and how it runs."""

    device: str = "auto"
    """where the eager model runs: auto (CUDA when available, else the CPU), cpu, cuda, cuda:1, ..."""
    precision: str = "auto"
    """auto (bf16 autocast where the device multiplies bf16 natively: CUDA and CPUs with AMX or AVX512-BF16; float32
    elsewhere), bf16 or fp32. bf16 keeps about three significant digits: vectors and scores then differ from a
    float32 run (sentence-transformers' encode, CrossEncoder.predict) in about the third decimal; fp32 for equal
    ones"""
    threads: int | None = None
    """CPU threads of the model, eager (PyTorch's) or ONNX (onnxruntime's). auto (None in Python, the default): one
    per CPU this process may use (its affinity mask and cgroup CPU quota), or OMP_NUM_THREADS for the eager model;
    then, for the eager model, fewer when fewer run faster on this machine (a CPU that other busy processes share),
    said in one line (docs/threads.md). N: that count, never changed; a note says when the rate falls"""
    onnx: str | None = None
    """run an exported ONNX model with onnxruntime (CPU) instead of the eager model: FILE (e.g.
    MODEL/onnx/model.int8.onnx from `avey-b export --quantize int8`), or MODEL/onnx/model.onnx when FILE is left out
    (the empty string in Python); MODEL gives the config and tokenizer. int8 gains most on short inputs, its gain
    shrinks as inputs grow while its extra memory stays, and under a mixed load the eager model can be faster: time
    both on your inputs (benchmarks/serve/)"""

    def __post_init__(self):
        if self.precision not in configs.PRECISIONS:
            raise ValueError(f"precision must be one of {configs.PRECISIONS}, got {self.precision!r}")
        if self.threads is not None and self.threads < 1:
            raise ValueError(f"threads must be at least 1, got {self.threads}")


def add_load_arguments(parser: argparse.ArgumentParser, exclude: tuple[str, ...] = ()) -> None:
    """The :class:`LoadOptions` flags on ``parser`` (a parser or an argument group): one per field but those in
    ``exclude``; ``--onnx`` takes its FILE optionally."""
    configs.add_arguments(parser, LoadOptions, exclude=("onnx", *exclude), choices={"precision": configs.PRECISIONS})
    if "onnx" not in exclude:
        parser.add_argument("--onnx", nargs="?", const="", default=None, metavar="FILE",
                            help=configs.field_docs(LoadOptions)["onnx"])
