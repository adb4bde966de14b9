"""Progress for long runs, the same everywhere (pretraining, fine-tuning, sweeps, NIAH, benchmarks).

On a terminal it is a tqdm bar; when the output goes to a file or a pipe (logs, CI, a cluster job) it is one plain
line every ``every`` seconds and one at the end — ``finetune sst2: 120/400 steps (30%), 2.1 steps/s, ETA 2m13s`` —
instead of a stream of carriage returns. This module imports nothing else from the package.

The ETA (:func:`eta`, both forms) is the remaining units at the measured rate: the slower of the rate since
warm-up and the rate over the last ``RECENT_S`` seconds. The first unit (memory allocation, kernel choice,
first-call costs) is the warm-up and is not counted; every later second is, so the time a run spends between units
(evaluations, checkpoints) is in the rate, and a machine that slows down (another process starts) shows within
``RECENT_S`` seconds. A run with a time cap (``cap``: pretraining's ``train.max_minutes``) stops at the cap when that
comes first: the ETA is then the time left to the cap, and says so. tqdm's own estimate (a smoothed rate of the
latest units, blind to the pauses between them) is not shown.
"""

from __future__ import annotations

import sys
import time
from collections import deque
from typing import TextIO

#: tqdm's bar with the ETA of :func:`eta` in the postfix in place of tqdm's own "remaining".
BAR_FORMAT = "{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}, {rate_fmt}{postfix}]"
#: The span of the recent rate (seconds); it counts once it spans half of this.
RECENT_S = 60.0


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


def eta(rate: float, remaining: int, cap_left: float | None = None) -> tuple[float, bool] | None:
    """``(seconds, capped)``: the time ``remaining`` units take at ``rate`` units per second, or the ``cap_left``
    seconds to a time cap when that is sooner (``capped`` True); None before there is a rate."""
    if rate <= 0:
        return None
    by_units = remaining / rate
    if cap_left is not None and cap_left < by_units:
        return max(cap_left, 0.0), True
    return by_units, False


class Progress:
    """``with Progress(total, "finetune sst2", unit="step") as p: ... p.update(loss=0.3)``. ``cap``: ``(seconds
    left, name)`` of a time limit that stops the run (``(540.0, "train.max_minutes=15")``), for the ETA."""

    def __init__(self, total: int | None, desc: str, *, unit: str = "step", initial: int = 0, every: float = 30.0,
                 file: TextIO | None = None, enabled: bool = True, cap: tuple[float, str] | None = None):
        self.total, self.desc, self.unit, self.n, self.every = total, desc, unit, initial, every
        self.file = file or sys.stderr
        self.enabled = enabled
        self.start = self.last = time.monotonic()
        self.start_n = initial
        self.warm: tuple[float, int] | None = None  # (time, units) when the first unit (the warm-up) ended
        self.marks: deque[tuple[float, int]] = deque()  # (time, units) about once a second, the last RECENT_S
        self.deadline, self.cap_name = (self.start + cap[0], cap[1]) if cap else (None, None)
        self.postfix: dict[str, str] = {}
        self.bar = None
        if enabled and self.file.isatty():
            from tqdm.auto import tqdm

            self.bar = tqdm(total=total, initial=initial, desc=desc, unit=unit, dynamic_ncols=True, file=self.file,
                            bar_format=BAR_FORMAT if total else None)

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def rate(self, now: float | None = None) -> float:
        """Units per second: the slower of the rate since the warm-up and the recent one (0 until a unit after the
        warm-up is done)."""
        if self.warm is None:
            return 0.0
        now = now or time.monotonic()
        rates = [(self.n - t0_n) / (now - t0) for t0, t0_n in (self.warm, self.marks[0]) if now - t0 > 0]
        if now - self.marks[0][0] < RECENT_S / 2:
            rates = rates[:1]  # too short a span to say more than the average
        return min(rates, default=0.0)

    def eta_text(self, now: float | None = None) -> str:
        """``ETA 3m10s``; ``ETA 4m00s (train.max_minutes=15 stops the run at about step 1900 of 2400)`` when the
        cap comes first; empty without a total or a rate."""
        if not self.total or self.n >= self.total:
            return ""
        now = now or time.monotonic()
        rate = self.rate(now)
        found = eta(rate, self.total - self.n, None if self.deadline is None else self.deadline - now)
        if found is None:
            return ""
        seconds, capped = found
        if not capped:
            return f"ETA {_duration(seconds)}"
        at = min(self.total, self.n + int(rate * seconds))
        return f"ETA {_duration(seconds)} ({self.cap_name} stops the run at about {self.unit} {at} of {self.total})"

    def update(self, n: int = 1, **postfix) -> None:
        self.n += n
        now = time.monotonic()
        if self.warm is None:
            self.warm = (now, self.n)
        if not self.marks or now - self.marks[-1][0] >= 1.0:
            self.marks.append((now, self.n))
        while len(self.marks) > 1 and self.marks[1][0] <= now - RECENT_S:
            self.marks.popleft()
        if postfix:
            self.postfix = {k: (f"{v:.4g}" if isinstance(v, float) else str(v)) for k, v in postfix.items()}
        if self.bar is not None:
            self.bar.update(n)
            shown = [self.eta_text(), *(f"{k}={v}" for k, v in self.postfix.items())]
            self.bar.set_postfix_str(", ".join(s for s in shown if s), refresh=False)
        elif self.enabled and time.monotonic() - self.last >= self.every:
            self._line()

    def line(self) -> str:
        """The plain progress line (what a log shows)."""
        now = time.monotonic()
        elapsed = now - self.start
        rate = self.rate(now) or ((self.n - self.start_n) / elapsed if elapsed > 0 else 0.0)
        unit = self.unit + ("s" if self.total != 1 else "")
        done = f"{self.n}/{self.total} {unit} ({100 * self.n / self.total:.0f}%)" if self.total else f"{self.n} {unit}"
        eta_part = f", {text}" if (text := self.eta_text(now)) else ""
        extra = "".join(f", {k} {v}" for k, v in self.postfix.items())
        return f"{self.desc}: {done}, {rate:.3g} {self.unit}s/s{eta_part}{extra}, {_duration(elapsed)} elapsed"

    def _line(self) -> None:
        self.last = time.monotonic()
        print(self.line(), file=self.file, flush=True)

    def write(self, message: str) -> None:
        """A message to standard output that does not break the bar (progress itself goes to ``file``)."""
        if self.bar is not None:
            self.bar.write(message, file=sys.stdout)
        else:
            print(message, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
        elif self.enabled and self.n > self.start_n:
            self._line()
        self.enabled = False
