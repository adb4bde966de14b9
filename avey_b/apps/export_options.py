"""The options of ``avey-b export`` (:mod:`avey_b.apps.export`; ``--quantize``: :mod:`avey_b.apps.quantize`),
declared once: :class:`ExportOptions`. Standard library only, so that ``avey-b export --help`` imports no torch.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from avey_b import configs

#: ``--head``: which model and output(s) to export (avey_b.apps.export.EXPORT_HEADS maps each to its class)
EXPORT_HEADS = ("base", "masked-lm", "sequence-classification", "token-classification", "embedding")


@dataclass
class ExportOptions:
    """What ``avey-b export`` writes (:func:`avey_b.apps.export.export`)."""

    head: str = "base"
    """which model and output to export: base (last_hidden_state), masked-lm or sequence-/token-classification
    (logits), embedding (a directory for ONNX-based servers: last_hidden_state and sentence_embedding)"""
    format: str = "onnx"
    """onnx, or torch (a torch.export program)"""
    verify: bool = True
    """run the ONNX model with onnxruntime at a few lengths and compare it with the eager model"""
    quantize: str | None = None
    """int8: also write the int8 model beside the ONNX model (model.int8.onnx: onnxruntime dynamic quantization of
    the weight MatMuls, avey_b.apps.quantize)"""

    def __post_init__(self):
        if self.quantize and self.format == "torch":
            raise ValueError("--quantize int8 quantizes the ONNX model: use it with --format onnx")


def export_parser() -> argparse.ArgumentParser:
    p = configs.guide_parser("avey-b export", "avey_b.apps.export")
    p.add_argument("model", help="an Avey-B checkpoint (local directory or Hub id; release checkpoints too)")
    p.add_argument("out", help="output file (.onnx, or .pt2 with --format torch); a directory with --head embedding")
    configs.add_arguments(p, ExportOptions, choices={"head": EXPORT_HEADS, "format": ("onnx", "torch"),
                                                     "quantize": ("int8",)})
    return p
