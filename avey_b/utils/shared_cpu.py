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
CPUs (:func:`avey_b.utils.device.others_busy`) for that case, and :class:`ThreadTuner` times the thread counts
against each other on the first units of work.

:class:`ThreadTuner` is the watch that acts, used by every verb that runs a model on the CPU (``--threads auto``,
the default; pretraining's ``train.threads: null``). The rule:

* a *trial* runs the candidate counts in turn, one unit of work each (the current count, then halvings down to 1:
  8, 4, 2, 1), until each has run ``trial_samples`` units and the trial ``trial_s`` seconds of work per count (or
  20 times as many rounds as that, for work too quick to fill it; or after any round where a count ran 3 times as
  fast as the current one); a count's rate is its work over its seconds on the shapes every count ran (all its
  work where they share none); a shape's first unit is warm-up and counts for nothing;
* the fastest count is kept when it beats the current one by ``margin`` (noise does not move it), and one line
  says so: ``the CPU is shared (...): 2 -> 1 thread(s), Rx faster on the last steps (why)`` (R: the measured ratio);
* a trial runs on the first units of work (a CPU shared from the start) and whenever the watch fires (a CPU that
  others started using); after ``recheck_s`` seconds of work below the starting count, a trial that includes the
  starting count again can go back up when the load has gone;
* a count given explicitly (``--threads N``) never changes: the watch only says once what it found.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, field


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


def load_note() -> str:
    """How busy other processes keep this process's CPUs (:func:`avey_b.utils.device.others_busy`), in words; empty
    where nothing can be read."""
    from avey_b.utils.device import others_busy, usable_cpus

    cpus = usable_cpus()
    busy, running_now = others_busy()
    return ("" if busy is None else f"other processes keep {busy:.1f} of the {cpus} CPUs busy now" if running_now else
            f"load average {busy:.1f} on {cpus} CPUs")


def shared_cpu_message(reference: float, now: float, threads: int, what: str, advice: str) -> str:
    """What :class:`SharedCpuWatch`'s finding means for ``what`` (``"training"``, ``"the model"``) running on
    ``threads`` CPU threads, and what to do: ``advice``, how this verb changes its threads (``"restart with
    --threads 1"``)."""
    load = load_note()
    load = f"{load}; " if load else ""
    return (f"note: {what} runs at {now:,.0f} tokens/s, {now / reference:.0%} of the {reference:,.0f} it reached "
            f"earlier on the same work: the CPU looks shared with other processes ({load}{threads} threads here). "
            "Each operation waits for its slowest thread, and a thread on a busy core is slow: on a shared machine "
            f"1 thread, or one per idle core, is often several times faster — {advice}.")


def thread_counts(start: int) -> list[int]:
    """The counts a trial of :class:`ThreadTuner` compares: ``start``, then halvings down to 1 (8: 8, 4, 2, 1;
    6: 6, 3, 1)."""
    counts = [max(1, start)]
    while counts[-1] > 1:
        counts.append(counts[-1] // 2)
    return counts


@dataclass
class _Trial:
    """The counts of one trial run in turn, one unit of work each (the rule: the module docstring)."""

    counts: list[int]
    samples: int
    seconds: float
    why: tuple[float, float] | None  # the watch's finding that started it; None at the start or a recheck
    turn: int = 0
    done: dict[int, dict[Hashable, list[float]]] = field(default_factory=dict)  # count -> shape -> [work, s, n]

    @property
    def count(self) -> int:
        """The count the next unit of work runs at."""
        return self.counts[self.turn % len(self.counts)]

    def add(self, work: float, seconds: float, shape: Hashable) -> bool:
        """Credit a unit of work to the count it ran at and turn to the next; True when the trial is complete (or
        has run 20 times its least rounds, work that never fills it)."""
        totals = self.done.setdefault(self.count, {}).setdefault(shape, [0.0, 0.0, 0])
        totals[0], totals[1], totals[2] = totals[0] + work, totals[1] + seconds, totals[2] + 1
        self.turn += 1
        if self.turn % len(self.counts):
            return False
        spent = {c: sum(t[1] for t in self.done.get(c, {}).values()) for c in self.counts}
        full = (all(sum(t[2] for t in self.done.get(c, {}).values()) >= self.samples for c in self.counts)
                and sum(spent.values()) >= self.seconds * len(self.counts))
        rates = self.rates()
        clear = min(rates.values()) > 0 and max(rates.values()) >= 3 * rates[self.counts[0]]  # no noise is 3x
        return full or clear or self.turn >= len(self.counts) * self.samples * 20

    def rates(self) -> dict[int, float]:
        """Each count's rate on the shapes every count ran (all its work where they share none)."""
        common = set.intersection(*(set(self.done.get(c, {})) for c in self.counts))
        rates = {}
        for count in self.counts:
            parts = [t for shape, t in self.done.get(count, {}).items() if not common or shape in common]
            seconds = sum(t[1] for t in parts)
            rates[count] = sum(t[0] for t in parts) / seconds if seconds > 0 else 0.0
        return rates


class ThreadTuner:
    """The thread count of the work it is fed, fitted to the machine (the rule: the module docstring). Feed it
    ``add(work, seconds, shape)`` after each unit of work, as :class:`SharedCpuWatch`; ``threads`` is the count the
    next unit runs at (set through ``set_threads``, default ``torch.set_num_threads``). ``adapt`` False (a count
    given explicitly): the count never changes, and the watch's finding is said with ``advice``. ``report`` takes
    each line said; ``what`` (``"training"``, ``"the model"``) and ``unit`` (``"steps"``, ``"batches"``) word
    them."""

    def __init__(self, threads: int, *, adapt: bool, report: Callable[[str], None], what: str, advice: str,
                 unit: str = "batches", set_threads: Callable[[int], None] | None = None, trial_samples: int = 2,
                 trial_s: float = 1.0, margin: float = 1.15, recheck_s: float = 60.0):
        if set_threads is None:
            import torch

            set_threads = torch.set_num_threads
        self.start = self.threads = threads
        self.adapt = adapt and threads > 1
        self.report, self.what, self.advice, self.unit, self._set = report, what, advice, unit, set_threads
        self.trial_samples, self.trial_s, self.margin, self.recheck_s = trial_samples, trial_s, margin, recheck_s
        self.changes: list[tuple[int, int, float]] = []  # (from, to, how many times faster) of each change
        self.watch = SharedCpuWatch()
        self._seen: set[Hashable] = set()
        self._since_trial = 0.0
        self._trial = self._new_trial(thread_counts(threads), None) if self.adapt else None

    def add(self, work: float, seconds: float, shape: Hashable = None) -> None:
        """Record ``work`` (tokens, steps) done in ``seconds`` at the current count on work of kind ``shape``; the
        next unit's count may differ (:attr:`threads`)."""
        if seconds <= 0 or work <= 0:
            return
        warm_up = shape not in self._seen  # allocation, kernel choice: it says nothing about the count
        self._seen.add(shape)
        if self._trial is not None:
            if warm_up:
                return
            if self._trial.add(work, seconds, shape):
                self._decide()
            else:
                self._set(self._trial.count)
            return
        self._since_trial += seconds
        found = self.watch.add(work, seconds, shape)
        if found and self.adapt and self.threads > 1:
            self._trial = self._new_trial(thread_counts(self.threads), found)
        elif found and not self.adapt:  # auto on one thread: nothing fewer to try
            self.report(shared_cpu_message(*found, self.threads, self.what, self.advice))
        elif self.adapt and self.threads < self.start and self._since_trial >= self.recheck_s:
            self._trial = self._new_trial([self.threads, *(c for c in thread_counts(self.start) if c != self.threads)],
                                          None)

    def settle(self, work: Callable[[], float], seconds: float = 10.0) -> None:
        """For a verb with no stream of work to watch (``avey-b demo``): run ``work`` (a call that returns how much
        it did) over and over, timed, until the trial under way has decided or ``seconds`` have passed."""
        import time

        deadline = time.perf_counter() + seconds
        while self._trial is not None and time.perf_counter() < deadline:
            t0 = time.perf_counter()
            done = work()
            self.add(done, time.perf_counter() - t0, "settle")

    def _new_trial(self, counts: list[int], why: tuple[float, float] | None) -> _Trial:
        return _Trial(counts, self.trial_samples, self.trial_s, why)

    def _decide(self) -> None:
        trial, self._trial = self._trial, None
        rates = trial.rates()
        current = trial.counts[0]
        best = max(rates, key=lambda c: (rates[c], -c))
        gain = rates[best] / rates[current] if rates[current] > 0 else float("inf")
        if best != current and gain >= self.margin:
            self.threads = best
            self.changes.append((current, best, gain))
            load = load_note()
            state, why = (("the CPU is shared", WHY_FEWER) if best < current else
                          ("the CPU is less busy", "more cores are free now"))
            self.report(f"{state}{f' ({load})' if load else ''}: {current} -> {best} thread(s), {gain:.1f}x faster "
                        f"on the last {self.unit} ({why})")
        elif trial.why is not None:
            self.report(shared_cpu_message(*trial.why, self.threads, self.what, "fewer threads ran no faster here: "
                                           f"keeping {self.threads}"))
        self._set(self.threads)
        self.watch, self._since_trial = SharedCpuWatch(), 0.0  # references at the count kept


#: Why fewer threads can run faster, said where the tuner takes fewer: the line a user reads when one beats two.
WHY_FEWER = ("each step waits for its slowest thread, and a thread on a core that another process holds is slow: "
             "fewer threads, on the free cores, finish sooner")


def thread_tuner(device, threads: int, requested: int | None, report: Callable[[str], None], what: str,
                 advice: str, unit: str = "batches") -> ThreadTuner | None:
    """The :class:`ThreadTuner` of a verb's work on ``device`` at ``threads`` CPU threads: adapting when no count
    was ``requested`` (``--threads auto``), else only watching; None where nothing can change (not the CPU, or one
    thread)."""
    if str(device).split(":")[0] != "cpu" or threads <= 1:
        return None
    return ThreadTuner(threads, adapt=requested is None, report=report, what=what, advice=advice, unit=unit)
