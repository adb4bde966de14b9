"""Progress for long runs, the same everywhere (pretraining, fine-tuning, sweeps, NIAH, benchmarks).

On a terminal it is a tqdm bar with rate and ETA; when the output goes to a file or a pipe (logs, CI, a cluster
job) it is one plain line every ``every`` seconds and one at the end — ``finetune sst2: 120/400 steps (30%),
2.1 steps/s, ETA 2m13s`` — instead of a stream of carriage returns. This module imports nothing else from the
package.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


class Progress:
    """``with Progress(total, "finetune sst2", unit="step") as p: ... p.update(loss=0.3)``."""

    def __init__(self, total: int | None, desc: str, *, unit: str = "step", initial: int = 0, every: float = 30.0,
                 file: TextIO | None = None, enabled: bool = True):
        self.total, self.desc, self.unit, self.n, self.every = total, desc, unit, initial, every
        self.file = file or sys.stderr
        self.enabled = enabled
        self.start = self.last = time.monotonic()
        self.start_n = initial
        self.postfix: dict[str, str] = {}
        self.bar = None
        if enabled and self.file.isatty():
            from tqdm.auto import tqdm

            self.bar = tqdm(total=total, initial=initial, desc=desc, unit=unit, dynamic_ncols=True, file=self.file)

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def update(self, n: int = 1, **postfix) -> None:
        self.n += n
        if postfix:
            self.postfix = {k: (f"{v:.4g}" if isinstance(v, float) else str(v)) for k, v in postfix.items()}
        if self.bar is not None:
            self.bar.update(n)
            if postfix:
                self.bar.set_postfix(self.postfix, refresh=False)
        elif self.enabled and time.monotonic() - self.last >= self.every:
            self._line()

    def line(self) -> str:
        """The plain progress line (what a log shows)."""
        elapsed = time.monotonic() - self.start
        rate = (self.n - self.start_n) / elapsed if elapsed > 0 else 0.0
        unit = self.unit + ("s" if self.total != 1 else "")
        done = f"{self.n}/{self.total} {unit} ({100 * self.n / self.total:.0f}%)" if self.total else f"{self.n} {unit}"
        eta = (f", ETA {_duration((self.total - self.n) / rate)}"
               if self.total and rate > 0 and self.n < self.total else "")
        extra = "".join(f", {k} {v}" for k, v in self.postfix.items())
        return f"{self.desc}: {done}, {rate:.3g} {self.unit}s/s{eta}{extra}, {_duration(elapsed)} elapsed"

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
