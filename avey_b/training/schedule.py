"""Learning-rate schedules as multipliers of the peak LR (for ``torch.optim.lr_scheduler.LambdaLR``).

All three start with a linear warmup from 0 (step 0 trains at ``lr/warmup``, reaching the peak at the
end of warmup), then:

* ``cosine``   — cosine decay from the peak to ``min_ratio * peak`` at ``total`` steps (the paper: 10% warmup,
  decay to 0);
* ``linear``   — linear decay to ``min_ratio * peak`` at ``total`` steps;
* ``constant`` — the peak until the end (the paper's 10B-token ablations: constant 1e-3).
"""

from __future__ import annotations

import math

import torch


def warmup_steps(warmup: float, total: int) -> int:
    """``warmup`` is a fraction of ``total`` when < 1, else a number of steps."""
    if warmup < 0:
        raise ValueError(f"warmup must be >= 0, got {warmup}")
    return int(round(warmup * total)) if warmup < 1 else int(warmup)


def lr_multiplier(step: int, *, schedule: str, total: int, warmup: int, min_ratio: float = 0.0) -> float:
    """Multiplier of the peak LR used by optimizer step ``step`` (0-based)."""
    if warmup > 0 and step < warmup:
        return (step + 1) / warmup
    if schedule == "constant":
        return 1.0
    decay = max(1, total - warmup)
    progress = min(1.0, (step - warmup) / decay)
    if schedule == "cosine":
        return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))
    if schedule == "linear":
        return min_ratio + (1 - min_ratio) * (1 - progress)
    raise ValueError(f"unknown schedule {schedule!r}; choose cosine, linear or constant")


def build_scheduler(optimizer, *, schedule: str, total: int, warmup: float, min_ratio: float = 0.0):
    w = warmup_steps(warmup, total)
    lr_multiplier(0, schedule=schedule, total=total, warmup=w, min_ratio=min_ratio)  # validates the name early
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: lr_multiplier(s, schedule=schedule, total=total, warmup=w, min_ratio=min_ratio)
    )
