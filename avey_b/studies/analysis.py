"""``avey-b analyze weights``: the static-matrix statistics of the paper's appendix ("Coupled vs. Decoupled Layers:
A Statistical Analysis") and heat maps of the static matrices ``V`` (parameter counts per component are
:func:`avey_b.utils.counting.parameter_counts`).

The appendix's study is also a command, for any saved Avey-B (a local directory first, else a Hub id)::

    avey-b analyze weights runs/ablation/pretrain/coupled/model --output runs/analysis/coupled
    avey-b analyze weights runs/ablation/pretrain/avey-b/model --output runs/analysis/decoupled

It writes the per-static-layer statistics table (``static_layers.md``, ``.json``, ``.csv``) and the heat maps of
every static layer's ``V`` (``static_matrices.png``; matplotlib, the ``analysis`` extra). ``--paper-table`` lays the
table out as the appendix's table "Layer statistics for coupled vs. decoupled settings": 15 static layers,
uniformly subsampled (every one of a 15-static-layer decoupled model; every second of the coupled model's 30, static
layers 2, 4, ..., 30, a choice that holds the layers 14, 22, 24 and 26 the paper's figure names), numbered 1-15,
with "Avg." over those 15. The table records the model layer of each row.
"""

from __future__ import annotations

import argparse
import csv
import io
import os

import torch
from torch import nn

from avey_b import configs
from avey_b.inference.encoder import Encoder
from avey_b.inference.options import LoadOptions
from avey_b.model.layers import StaticMixer
from avey_b.studies.options import AnalyzeOptions
from avey_b.utils.records import slug, write_json_atomic, write_text_atomic


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


def subsample(items: list, n: int | None) -> list:
    """At most ``n`` of ``items``, one every ``len(items) / n`` ending at the last (rounded): 15 of 30 static layers
    are layers 2, 4, ..., 30. The paper's figure and table show "15 matrices uniformly subsampled from 30 static
    layers" of the coupled model, and its caption names coupled layers 14, 22, 24 and 26 among them: every second
    layer fits, a spread from the first to the last (1, 3, ..., 15, 18, ..., 30) does not. ``None`` or 0: all."""
    if not n or len(items) <= n:
        return list(items)
    return [items[round((i + 1) * len(items) / n) - 1] for i in range(n)]


def _import_pyplot():
    try:
        import matplotlib
    except ImportError as e:
        raise ImportError("the heat maps need matplotlib: pip install 'avey-b[analysis]'") from e
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_static_matrices(model: nn.Module, path: str, max_layers: int | None = 16, cmap: str = "RdBu_r") -> str:
    """Heatmaps of the static matrices (rows: target token, columns: source token), saved to ``path``; with more
    static layers than ``max_layers`` (``None``: no limit), that many spread uniformly over the depth.

    Colors are symmetric around 0 per layer, so inhibitory (negative) weights read as blue, excitatory as red.
    """
    plt = _import_pyplot()
    mats = subsample(list(static_matrices(model).items()), max_layers)
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


# ------------------------------------------------------------------------------------------ avey-b analyze
#: The columns of the appendix's table "Layer statistics for coupled vs. decoupled settings", in its order:
#: key of :func:`static_matrix_stats` -> the table's heading.
STAT_COLUMNS = {"mean": "Mean", "std": "Std", "min": "Min", "median": "Median", "max": "Max", "mean_abs": "Abs. Mean",
                "l1": "L1 Norm", "l2": "L2 Norm", "frac_positive": "Frac. Pos.", "frac_negative": "Frac. Neg."}


#: The paper's table shows this many static layers per model ("we uniformly subsampled 15 layers from 30 static
#: layers" for the coupled model; all 15 of the decoupled one).
PAPER_TABLE_LAYERS = 15


def static_layer_table(model: nn.Module, max_layers: int | None = None) -> tuple[list[dict[str, float]],
                                                                                  dict[str, float]]:
    """The appendix's table for ``model``: one row per static layer (:func:`static_matrix_stats`, plus
    ``static_layer``, its 1-based rank among the static layers, which is how the paper numbers them; ``layer`` is
    its 0-based index in the model), and the "Avg." row (the mean of each column over the rows). With
    ``max_layers``, at most that many static layers uniformly subsampled (:func:`subsample`, the rule of the heat
    maps: every second of 30), each with ``table_row``, its 1-based row in the table, and the average over those
    rows only (the paper's table: 15 of the coupled model's 30, "Avg." over the 15)."""
    rows = [{"static_layer": i + 1, **row} for i, row in enumerate(static_matrix_stats(model))]
    if not rows:
        raise ValueError("the model has no static layers (every layer is dynamic): nothing to analyze")
    if max_layers is not None:
        rows = [{"table_row": i + 1, **row} for i, row in enumerate(subsample(rows, max_layers))]
    average = {key: sum(r[key] for r in rows) / len(rows) for key in STAT_COLUMNS}
    return rows, average


def markdown_table(rows: list[dict[str, float]], average: dict[str, float], title: str) -> str:
    """The table laid out as the paper's: 4 decimals, the norms with 2, an "Avg." row last (and the paper's
    "Layer" numbering first when the rows are a subsample)."""
    def cells(r):
        return [f"{r[k]:.2f}" if k in ("l1", "l2") else f"{r[k]:.4f}" for k in STAT_COLUMNS]

    numbered = "table_row" in rows[0]
    lead = ["Layer"] if numbered else []
    lines = [f"## {title}", "", "| " + " | ".join([*lead, "Static layer", "Model layer", *STAT_COLUMNS.values()])
             + " |", "|" + "---|" * (len(STAT_COLUMNS) + 2 + len(lead))]
    for r in rows:
        first = [str(r["table_row"])] if numbered else []
        lines.append("| " + " | ".join([*first, str(r["static_layer"]), str(r["layer"]), *cells(r)]) + " |")
    lines.append("| **Avg.** | " + "| " * (1 + len(lead)) + " | ".join(cells(average)) + " |")
    return "\n".join(lines) + "\n"


def csv_table(rows: list[dict[str, float]]) -> str:
    """One line per static layer (no average line: every line is a layer)."""
    buffer = io.StringIO()
    lead = ["table_row"] if rows and "table_row" in rows[0] else []
    writer = csv.DictWriter(buffer, fieldnames=[*lead, "static_layer", "layer", *STAT_COLUMNS], lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()


def analyze_weights(name_or_path: str, options: AnalyzeOptions) -> dict:
    """Write the statistics table and heat maps of every static layer's ``V`` of a saved model (any head's
    directory, or a Hub id) to ``options.output`` (default: ``analysis/<the model, as one name>``); returns the paths
    written."""
    if options.heatmaps:
        _import_pyplot()  # before loading a large model: a missing extra is an error at once
    model = Encoder(name_or_path, LoadOptions(device="cpu", precision="fp32"), architecture="AveyBModel").model
    shown = PAPER_TABLE_LAYERS if options.paper_table else None
    rows, average = static_layer_table(model, shown)
    n_static = len(static_matrices(model))
    output = options.output or os.path.join("analysis", slug(os.path.normpath(name_or_path)))
    os.makedirs(output, exist_ok=True)
    paths = {"markdown": os.path.join(output, "static_layers.md"), "json": os.path.join(output, "static_layers.json"),
             "csv": os.path.join(output, "static_layers.csv")}
    kind = model.config.parameterization
    title = f"Static-layer statistics of {name_or_path} ({kind}, {n_static} static layers of " \
            f"{model.config.num_hidden_layers})"
    if options.paper_table:
        title += (f"; the paper's table: {len(rows)} of them, uniformly subsampled, and their average"
                  if len(rows) < n_static else f"; the paper's table: all {len(rows)} and their average")
    write_text_atomic(paths["markdown"], markdown_table(rows, average, title))
    write_json_atomic(paths["json"], {"model": name_or_path, "parameterization": kind,
                                      "static_weights": model.config.static_weights,
                                      "num_hidden_layers": model.config.num_hidden_layers,
                                      "static_layers": n_static, "paper_table": options.paper_table,
                                      "rows": rows, "average": average})
    write_text_atomic(paths["csv"], csv_table(rows))
    if options.heatmaps:
        paths["heatmaps"] = plot_static_matrices(model, os.path.join(output, "static_matrices.png"),
                                                 shown if options.max_layers is None else options.max_layers)
    return paths


def run(args: argparse.Namespace) -> int:
    """``avey-b analyze weights MODEL [--output DIR]``."""
    paths = analyze_weights(args.model, configs.from_args(AnalyzeOptions, args))
    with open(paths["markdown"], encoding="utf-8") as f:
        print(f.read())
    for what, path in paths.items():
        print(f"{what}: {path}")
    return 0
