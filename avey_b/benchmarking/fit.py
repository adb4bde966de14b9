"""Power-law fits of benchmark curves over a long-context range (paper §5.4 and Appendix "Latency").

Throughput ``T(N) ∝ N^-α`` and latency ``ℓ(N) ∝ N^β`` are fitted by ordinary least squares on
``log T`` / ``log ℓ`` against ``log N``, over the points of one series with ``min_length ≤ N ≤ max_length``
and ``status == "ok"`` (OOM / max-length points are excluded, never imputed). Smaller α and β are better.

For one series with a fixed batch ``B``, ``T = B·N/ℓ``, so over the *same* range ``α = β - 1`` exactly.
The paper's pairs (Avey-B compiled α 0.44 / β 0.68) do not satisfy that identity, so its α and β fits
must have used different ranges or settings; we fit both over the one range the caller chooses and print
it with the table, next to the paper's numbers for the matching setting.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from .results import latency_of, read_records, series_key, throughput_of

#: Paper values (Fig. "throughput" / "latency", B200, bf16, batch 8): (alpha, beta) per model family and
#: setting. "optimized" = FlashAttention for the Transformers / torch.compile for Avey-B; "unoptimized" =
#: eager attention / eager PyTorch.
PAPER = {
    ("avey-b", "compile"): (0.44, 0.68),
    ("avey-b", "eager"): (0.33, 0.58),
    ("modernbert", "flash_attention_2"): (0.77, 1.17),
    ("modernbert", "eager"): (1.03, 1.42),
    ("neobert", "flash_attention_2"): (0.81, 1.20),
    ("neobert", "eager"): (1.30, 1.63),
}


@dataclass
class PowerLaw:
    """``y = c · N^slope`` fitted in log-log space; ``r2`` is the coefficient of determination there."""

    slope: float
    log_c: float
    r2: float
    n_points: int
    min_length: int
    max_length: int

    def __call__(self, n):
        return np.exp(self.log_c) * np.asarray(n, dtype=float) ** self.slope


def fit_power_law(lengths, values) -> PowerLaw:
    """Least-squares fit of ``log values = log_c + slope · log lengths``. Needs >= 2 distinct lengths."""
    lengths = np.asarray(lengths, dtype=float)
    values = np.asarray(values, dtype=float)
    if lengths.shape != values.shape or lengths.ndim != 1:
        raise ValueError("lengths and values must be 1-D sequences of the same size")
    if not (np.all(values > 0) and np.all(np.isfinite(values)) and np.all(lengths > 0)):
        raise ValueError("lengths and values must be positive and finite")
    x, y = np.log(lengths), np.log(values)
    if len(np.unique(x)) < 2:
        raise ValueError(f"a power-law fit needs at least 2 distinct lengths, got {len(np.unique(x))}")
    slope, log_c = np.polyfit(x, y, 1)
    resid = y - (log_c + slope * x)
    ss_tot = float(((y - y.mean()) ** 2).sum())
    r2 = 1.0 - float((resid**2).sum()) / ss_tot if ss_tot > 0 else 1.0
    return PowerLaw(
        float(slope), float(log_c), r2, len(x), int(round(math.exp(x.min()))), int(round(math.exp(x.max())))
    )


def paper_value(rec: dict[str, Any]) -> tuple[str, float | None, float | None]:
    """(paper setting name, α, β) matching a series' model family and mode / attention, or blanks."""
    model = rec["model"].lower()
    family = next((f for f in ("avey-b", "modernbert", "neobert") if model.startswith(f)), None)
    if family is None or "compressor=false" in model.replace(" ", ""):
        return "", None, None
    setting = rec["mode"] if family == "avey-b" else (rec.get("attn") or "")
    if family != "avey-b" and setting == "sdpa":
        a, b = PAPER[(family, "flash_attention_2")]
        return "FA2 (we ran SDPA)", a, b
    if (family, setting) in PAPER:
        a, b = PAPER[(family, setting)]
        return setting, a, b
    return "", None, None


def fit_series(
    records: list[dict[str, Any]],
    *,
    min_length: int = 8192,
    max_length: int | None = None,
    stat: str = "median",
):
    """Per series (see ``efficiency.series_key``): dict with α, β fits (None when < 2 usable points)."""

    groups: dict[str, list[dict]] = {}
    for r in records:
        groups.setdefault(series_key(r), []).append(r)
    out = {}
    for key, pts in groups.items():
        ok = [
            r
            for r in pts
            if r["status"] == "ok"
            and r["seq_len"] >= min_length
            and (max_length is None or r["seq_len"] <= max_length)
        ]
        entry: dict[str, Any] = {"series": key, "first": pts[0], "alpha": None, "beta": None}
        if len({r["seq_len"] for r in ok}) >= 2:
            n = [r["seq_len"] for r in ok]
            t = fit_power_law(n, [throughput_of(r, stat) for r in ok])
            lat = fit_power_law(n, [latency_of(r, stat) for r in ok])
            entry.update(
                alpha=-t.slope,
                beta=lat.slope,
                r2_alpha=t.r2,
                r2_beta=lat.r2,
                n_points=t.n_points,
                range=(t.min_length, t.max_length),
            )
        out[key] = entry
    return out


def fit_table(
    records: list[dict[str, Any]],
    *,
    min_length: int = 8192,
    max_length: int | None = None,
    stat: str = "median",
) -> str:
    """Markdown table of fitted α / β per series next to the paper's values."""
    fits = fit_series(records, min_length=min_length, max_length=max_length, stat=stat)
    rng = f"N in [{min_length}, {max_length}]" if max_length else f"N >= {min_length}"
    lines = [
        f"Power-law fits over {rng}, {stat} latency of each point (status ok points only); "
        "T ∝ N^-α, latency ∝ N^β.",
        "",
        "| series | points | range | α (ours) | α (paper) | β (ours) | β (paper) | paper setting |",
        "|---|---|---|---|---|---|---|---|",
    ]
    short = []  # series with fewer than two lengths in the range: the longest --min-length that would fit them
    for key, e in fits.items():
        setting, pa, pb = paper_value(e["first"])
        if e["alpha"] is None:
            lines.append(f"| {key} | <2 | — | — | {_f(pa)} | — | {_f(pb)} | {setting} |")
            lengths = sorted({r["seq_len"] for r in records if series_key(r) == key and r["status"] == "ok"
                              and (max_length is None or r["seq_len"] <= max_length)})
            short.append((key, lengths))
            continue
        lo, hi = e["range"]
        lines.append(
            f"| {key} | {e['n_points']} | {lo}–{hi} | {e['alpha']:.2f} | {_f(pa)} | "
            f"{e['beta']:.2f} | {_f(pb)} | {setting} |"
        )
    for key, lengths in short:
        hint = (f"pass --min-length {lengths[-2]} (or smaller) to fit it" if len(lengths) >= 2
                else "it needs ok points at two lengths or more")
        lines.append(f"\n{key}: fewer than 2 lengths in the fit range (ok lengths recorded: "
                     f"{', '.join(map(str, lengths)) or 'none'}); {hint}.")
    return "\n".join(lines)


def _f(v: float | None) -> str:
    return "" if v is None else f"{v:.2f}"


def fit_table_from_file(
    path: str, *, min_length: int = 8192, max_length: int | None = None, stat: str = "median"
) -> str:

    return fit_table(read_records(path), min_length=min_length, max_length=max_length, stat=stat)
