"""Analysis helpers used in the paper: parameter counts per component, static-matrix statistics (App.
"Coupled vs. Decoupled Layers: A Statistical Analysis") and heatmaps of the static matrices ``V``.
"""

from __future__ import annotations

from collections import OrderedDict

import torch
from torch import nn

from .layers import StaticMixer


def count_flops(fn) -> int:
    """FLOPs of one call of ``fn`` (a forward, a forward + backward...), counted by PyTorch's FlopCounterMode:
    the matrix products actually run (2 per multiply-add), not elementwise work."""
    from torch.utils.flop_counter import FlopCounterMode

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


def static_matrices(model: nn.Module) -> dict[int, torch.Tensor]:
    """The effective static matrix ``V`` (``|V|`` for the unsigned variant) of every static/coupled layer."""
    out = {}
    for name, module in model.named_modules():
        if isinstance(module, StaticMixer):
            layer = int(name.split("layers.")[1].split(".")[0])
            out[layer] = module.matrix().detach().float().cpu()
    return out


def static_matrix_stats(model: nn.Module) -> list[dict[str, float]]:
    """Per static layer: mean, std, min, median, max, mean |w|, L1, L2, fraction positive, fraction negative."""
    rows = []
    for layer, v in static_matrices(model).items():
        w = v.flatten().double()
        rows.append({
            "layer": layer,
            "mean": w.mean().item(),
            "std": w.std().item(),
            "min": w.min().item(),
            "median": w.quantile(0.5).item(),  # the usual median (mean of the two middles)
            "max": w.max().item(),
            "mean_abs": w.abs().mean().item(),
            "l1": w.abs().sum().item(),
            "l2": w.norm().item(),
            "frac_positive": (w > 0).double().mean().item(),
            "frac_negative": (w < 0).double().mean().item(),
        })
    return rows


def plot_static_matrices(model: nn.Module, path: str, max_layers: int = 16, cmap: str = "RdBu_r") -> str:
    """Heatmaps of the static matrices (rows: target token, columns: source token), saved to ``path``.

    Colors are symmetric around 0 per layer, so inhibitory (negative) weights read as blue, excitatory as red.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    mats = list(static_matrices(model).items())[:max_layers]
    if not mats:
        raise ValueError("the model has no static layers to plot")
    cols = min(4, len(mats))
    rows = (len(mats) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 3.0 * rows), squeeze=False)
    for ax in axes.flat[len(mats):]:
        ax.axis("off")
    for ax, (layer, v) in zip(axes.flat, mats, strict=False):  # more axes than matrices
        lim = float(v.abs().max()) or 1.0
        im = ax.imshow(v.numpy(), cmap=cmap, vmin=-lim, vmax=lim)
        ax.set_title(f"layer {layer}")
        ax.set_xlabel("source position")
        ax.set_ylabel("target position")
        fig.colorbar(im, ax=ax, fraction=0.046)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
