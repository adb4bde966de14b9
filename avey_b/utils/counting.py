"""Counting a model: its parameters (any module, and an Avey-B per component, as the paper's tables count them) and
the FLOPs of a call."""

from __future__ import annotations

from collections import OrderedDict

from torch import nn
from torch.utils.flop_counter import FlopCounterMode


def count_flops(fn) -> int:
    """FLOPs of one call of ``fn`` (a forward, a forward + backward...), counted by PyTorch's FlopCounterMode:
    the matrix products actually run (2 per multiply-add), not elementwise work."""
    with FlopCounterMode(display=False) as counter:
        fn()
    return int(counter.get_total_flops())


def count_parameters(model: nn.Module) -> int:
    """Parameters of any ``nn.Module``, a tied tensor counted once."""
    return sum(p.numel() for p in model.parameters())


def parameter_counts(model: nn.Module) -> dict[str, int]:
    """Parameters per component of an Avey-B model (any head), counting tied tensors once.

    Components: ``embedding``, ``compressor``, ``norm`` (RMSNorms), ``enricher``, ``fuser``, ``static_matrices``
    (``V`` of static/coupled layers), ``mixing_bias``, ``residual_scale``, ``head`` (everything outside the
    backbone), and ``total``.
    """
    counts: OrderedDict[str, int] = OrderedDict(
        (k, 0) for k in ("embedding", "compressor", "norm", "enricher", "fuser", "static_matrices", "mixing_bias",
                         "residual_scale", "head")
    )
    for name, p in model.named_parameters():  # named_parameters() yields a tied tensor once
        parts = name.split(".")
        if "embed_tokens" in parts:
            key = "embedding"
        elif "compressor" in parts or "compressors" in parts:  # compressors.ℓ: ranker_placement="every_layer"
            key = "compressor"
        elif "layers" in parts:
            if "norm" in parts:
                key = "norm"
            elif "enricher" in parts:
                key = "enricher"
            elif "fuser" in parts:
                key = "fuser"
            elif "mixer" in parts:
                key = "static_matrices" if parts[-1] == "weight" else "mixing_bias"
            elif parts[-1] == "alpha":
                key = "residual_scale"
            else:
                raise ValueError(f"unclassified parameter {name}")
        elif parts[-2:] == ["norm", "weight"]:  # the final norm of the backbone
            key = "norm"
        else:
            key = "head"
        counts[key] += p.numel()
    counts["total"] = sum(counts.values())
    return dict(counts)
