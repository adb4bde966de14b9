"""Noticing a CPU shared with other busy processes, early: :class:`SharedCpuWatch` is fed the time of each unit of
work (a training step, a batch of a server or of a corpus job) and says once when the work has run far slower than
the same work ran earlier in this process, for long enough not to be noise; :func:`shared_cpu_message` says what
that means and what to do.

Why it matters: PyTorch (and onnxruntime) split each operation over their threads and wait for the last one, so a
run with one thread per core is as slow as its slowest thread, and a core that another process also uses runs our
thread at half speed or worse. On a 2-core machine with one busy neighbour, two threads can be several times slower
than one (measured: ``benchmarks/serve/README.md``). Nothing in the program fails:
only the rate says so.

The rule, in seconds of work rather than in log lines, so that it answers within about ``patience_s`` seconds of a
slowdown whatever the step time or the logging interval:

* samples are grouped by ``shape`` (the caller's key for work of one cost per token: a batch's rows and padded
  length, in powers of two; one key for a training run's fixed steps); a shape's first sample is its warm-up
  (allocation, kernel choice) and counts for nothing;
* a shape's samples close a *window* every ``window_s`` seconds of work; a window's rate is its work over its
  seconds; the shape's reference is the best of its earlier windows;
* the watch fires when the windows of the last ``patience_s`` seconds of work (those with a reference) each ran
  under ``threshold`` times their shape's reference: a single slow window is noise, a recovery in between resets
  it. It fires once.

A CPU already shared when the work starts has no fast reference, and this rule cannot see it: the start line of
each verb (:func:`avey_b.utils.device.runtime_line`) names the thread count and how busy other processes keep the
CPUs (:func:`avey_b.utils.device.others_busy`) for that case.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass


@dataclass
class _Window:
    shape: Hashable
    work: float
    seconds: float
    reference: float | None  # the shape's best earlier window rate when this one closed

    @property
    def rate(self) -> float:
        return self.work / self.seconds


class SharedCpuWatch:
    """Feed it ``add(work, seconds, shape)`` after each unit of work; it returns ``(reference, now)`` rates the
    one time the rule of the module docstring finds a sustained slowdown, else None."""

    def __init__(self, *, window_s: float = 5.0, patience_s: float = 30.0, threshold: float = 0.5):
        if not (0 < window_s <= patience_s and 0 < threshold < 1):
            raise ValueError(f"need 0 < window_s <= patience_s and 0 < threshold < 1, got {window_s}, {patience_s}, "
                             f"{threshold}")
        self.window_s, self.patience_s, self.threshold = window_s, patience_s, threshold
        self.fired = False
        self._open: dict[Hashable, list[float]] = {}  # shape -> [work, seconds] of its open window
        self._best: dict[Hashable, float] = {}  # shape -> best closed window rate
        self._closed: list[_Window] = []  # recent closed windows, oldest first

    def add(self, work: float, seconds: float, shape: Hashable = None) -> tuple[float, float] | None:
        """Record ``work`` (tokens, say) done in ``seconds`` of computing on work of kind ``shape``; ``(reference,
        now)``, the shape's best rate and the recent one, when the CPU looks shared (once), else None."""
        if self.fired or seconds <= 0 or work <= 0:
            return None
        if shape not in self._open:
            self._open[shape] = [0.0, 0.0]  # the shape's first sample: warm-up, not counted
            return None
        window = self._open[shape]
        window[0] += work
        window[1] += seconds
        if window[1] < self.window_s:
            return None
        closed = _Window(shape, window[0], window[1], self._best.get(shape))
        self._open[shape] = [0.0, 0.0]
        self._best[shape] = max(self._best.get(shape, 0.0), closed.rate)
        self._closed.append(closed)
        return self._verdict()

    def _verdict(self) -> tuple[float, float] | None:
        span, recent, walked = 0.0, [], 0
        for w in reversed(self._closed):
            walked += 1
            if w.reference is None:  # nothing to compare it with: neither slow nor fast
                continue
            recent.append(w)
            span += w.seconds
            if span >= self.patience_s:
                break
        else:
            return None
        del self._closed[: len(self._closed) - walked]  # older windows can never be in a verdict again
        if all(w.rate < self.threshold * w.reference for w in recent):
            self.fired = True  # the references and the rate of the same work, weighted by its seconds
            return sum(w.reference * w.seconds for w in recent) / span, sum(w.work for w in recent) / span
        return None


def shared_cpu_message(reference: float, now: float, threads: int, what: str, advice: str) -> str:
    """What :class:`SharedCpuWatch`'s finding means for ``what`` (``"training"``, ``"the model"``) running on
    ``threads`` CPU threads, and what to do: ``advice``, how this verb changes its threads (``"restart with
    --threads 1"``)."""
    from avey_b.utils.device import others_busy, usable_cpus

    cpus = usable_cpus()
    busy, running_now = others_busy()
    load = ("" if busy is None else f"other processes keep {busy:.1f} of the {cpus} CPUs busy now; " if running_now else
            f"load average {busy:.1f} on {cpus} CPUs; ")
    return (f"note: {what} runs at {now:,.0f} tokens/s, {now / reference:.0%} of the {reference:,.0f} it reached "
            f"earlier on the same work: the CPU looks shared with other processes ({load}{threads} threads here). "
            "Each operation waits for its slowest thread, and a thread on a busy core is slow: on a shared machine "
            f"1 thread, or one per idle core, is often several times faster — {advice}.")
