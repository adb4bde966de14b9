"""Timing primitives shared by every benchmark: warm-up, device sync, repeats, peak memory, OOM as data.

Written once so that Avey-B and every baseline go through exactly the same measurement:

* ``synchronize(device)`` waits for queued GPU work, so ``time.perf_counter`` brackets the real compute
  (CUDA kernels are asynchronous; without the sync a forward pass "takes" microseconds).
* ``alternate({name: fn, ...}, rounds)`` times several calls in turn, round by round (A, B, A, B, ...), for
  comparisons on a shared machine: a change in its speed falls on every call alike, so their ratio stays fair.
* ``measure(fn, device=..., warmup=..., repeats=...)`` runs ``fn`` ``warmup`` times untimed (allocator
  warm-up, cuDNN/oneDNN autotuning, ``torch.compile`` tracing), then ``repeats`` timed calls, and returns
  median / min / max seconds plus peak memory. ``max_seconds`` stops the repeats early (at least
  ``min_repeats``) so a slow CPU point does not eat the whole budget; the number actually run is recorded.
* Peak memory. On CUDA: ``torch.cuda.max_memory_allocated`` after ``reset_peak_memory_stats`` (the
  allocator's own high-water mark, exact for tensors). On CPU there is no allocator counter
  (``tracemalloc`` does not see torch's C++ allocations), so :class:`PeakRSSSampler` samples the process
  resident set size from ``/proc/self/statm`` in a background thread every ~1 ms and reports the peak
  during the timed calls. This is the memory the OS actually gave the process, but it is approximate:
  a spike shorter than the sampling interval can be missed, and memory that glibc keeps cached after an
  earlier, larger point is already counted in the baseline. We report both the absolute peak RSS and the
  increase over the RSS just before the timed calls (``peak_mem_delta_bytes``). Off Linux it is ``None``.
* Each timed call also records the process CPU time (``time.process_time``, all threads). On a shared
  CPU, wall-clock time mostly measures how busy the neighbours are; CPU time measures the work done (plus
  some OpenMP spin-waiting), so CPU-time scaling exponents are the stable ones there. On GPU it means
  nothing (the host waits in ``synchronize``) and wall time is the measure.

Results are plain dicts (JSON-ready): one JSON line per point is the benchmark output format
(:mod:`avey_b.utils.records`), and the fitting and plotting steps read those lines back. Out-of-memory failures
are recognized by :func:`avey_b.utils.device.is_oom` and recorded as "OOM" points.
"""

from __future__ import annotations

import ctypes
import gc
import os
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

__all__ = [
    "PeakRSSSampler",
    "alternate",
    "Timing",
    "gemm_rate",
    "measure",
    "synchronize",
    "timed_call",
    "trim_heap",
]


def synchronize(device: torch.device | str) -> None:
    """Block until all work queued on ``device`` is done (no-op on CPU, where ops are synchronous)."""
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":  # pragma: no cover - no MPS here
        torch.mps.synchronize()
    elif device.type == "xpu":  # pragma: no cover
        torch.xpu.synchronize(device)


def gemm_rate(dtype: torch.dtype = torch.float32, n: int = 2048, repeats: int = 5,
              device: torch.device | str = "cpu") -> float:
    """FLOP/s of the fastest of ``repeats`` square ``n``-cubed GEMMs in ``dtype`` on ``device``.

    The reference for FLOP utilization: measured in the same process, with the same thread count and at (nearly)
    the same time as the figure it is compared with, because this machine's speed drifts between runs. Callers
    measure it before and after their points and report both (or their mean)."""
    g = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(n, n, generator=g, device=device).to(dtype)
    b = torch.randn(n, n, generator=g, device=device).to(dtype)
    a @ b  # warm-up (oneDNN / cuBLAS kernel choice)
    best = float("inf")
    for _ in range(repeats):
        synchronize(device)
        t = time.perf_counter()
        a @ b
        synchronize(device)
        best = min(best, time.perf_counter() - t)
    return 2 * n**3 / best


def status_mb(key: str, pid: int | str = "self") -> float:
    """A memory line of a process's ``/proc/PID/status`` (Linux) in MB: ``VmRSS`` (resident now), ``VmHWM`` (its
    peak, which writing 5 to ``/proc/PID/clear_refs`` resets)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"{key} not in /proc/{pid}/status")


def _rss_bytes() -> int | None:
    """Current resident set size of this process, from /proc (Linux); None elsewhere."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


class PeakRSSSampler:
    """Context manager sampling this process's RSS in a daemon thread; ``peak`` and ``baseline`` in bytes.

    Used for CPU peak memory (see the module docstring for why not tracemalloc, and the caveats).
    """

    def __init__(self, interval_s: float = 0.001):
        self.interval_s = interval_s
        self.baseline: int | None = None
        self.peak: int | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _run(self) -> None:
        while not self._stop.is_set():
            rss = _rss_bytes()
            if rss is not None and (self.peak is None or rss > self.peak):
                self.peak = rss
            self._stop.wait(self.interval_s)

    def __enter__(self) -> PeakRSSSampler:
        self.baseline = _rss_bytes()
        self.peak = self.baseline
        if self.baseline is not None:
            self._thread = threading.Thread(target=self._run, name="peak-rss", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        rss = _rss_bytes()  # one last sample: a spike at the very end counts too
        if rss is not None and self.peak is not None:
            self.peak = max(self.peak, rss)


class PeakMemory:
    """Peak memory of what runs inside ``with PeakMemory(device) as mem:``. On exit: ``peak`` (bytes; CUDA: the
    allocator's maximum, CPU: the sampled RSS of this process), ``delta`` (above the level at entry) and ``method``;
    ``peak``/``delta`` are None where memory cannot be read."""

    def __init__(self, device: torch.device | str = "cpu", rss_interval_s: float = 0.001):
        self.device = torch.device(device)
        self.sampler = None if self.device.type == "cuda" else PeakRSSSampler(rss_interval_s)
        self.peak: int | None = None
        self.delta: int | None = None
        self.method = "cuda_max_memory_allocated" if self.sampler is None else "rss_sampler"

    def __enter__(self) -> PeakMemory:
        if self.sampler is None:
            torch.cuda.reset_peak_memory_stats(self.device)
            self._base = torch.cuda.memory_allocated(self.device)
        else:
            self.sampler.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.sampler is None:
            self.peak = torch.cuda.max_memory_allocated(self.device)
            self.delta = self.peak - self._base
            return
        self.sampler.__exit__(*exc)
        if self.sampler.peak is None:
            self.method = "unavailable"
        else:
            self.peak = self.sampler.peak
            self.delta = self.peak - (self.sampler.baseline or 0)


@dataclass
class Timing:
    """Timed calls of one benchmark point. Seconds per call; memory in bytes (None when unknown)."""

    times_s: list[float]
    cpu_times_s: list[float]  # process CPU time (all threads) of each timed call
    warmup: int
    first_call_s: float | None  # duration of the first warm-up call (includes torch.compile tracing)
    peak_mem_bytes: int | None
    peak_mem_delta_bytes: int | None
    mem_method: str
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def median_s(self) -> float:
        return statistics.median(self.times_s)

    @property
    def min_s(self) -> float:
        return min(self.times_s)

    @property
    def max_s(self) -> float:
        return max(self.times_s)

    def summary(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(
            median_s=self.median_s,
            min_s=self.min_s,
            max_s=self.max_s,
            repeats=len(self.times_s),
            cpu_median_s=statistics.median(self.cpu_times_s),
        )
        return d


def trim_heap() -> None:
    """Return freed heap memory to the system (glibc ``malloc_trim``), so that a following RSS peak measures that
    call and not what an earlier, larger one left cached. A no-op off glibc."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:
        pass


def timed_call(fn: Callable[[], Any], *, device: torch.device | str = "cpu") -> tuple[float, int | None, Any]:
    """One call of ``fn``, for points too slow to repeat or whose result is needed: ``(seconds, peak memory above
    the level before the call in bytes (None where it cannot be read), fn's result)``. The heap is trimmed first
    and the call bracketed by device syncs; use :func:`measure` for warm-up and repeats."""
    device = torch.device(device)
    gc.collect()
    trim_heap()
    synchronize(device)
    with PeakMemory(device) as mem:
        t0 = time.perf_counter()
        result = fn()
        synchronize(device)
        seconds = time.perf_counter() - t0
    return seconds, mem.delta, result


def measure(
    fn: Callable[[], Any],
    *,
    device: torch.device | str = "cpu",
    warmup: int = 2,
    repeats: int = 5,
    min_repeats: int = 3,
    max_seconds: float | None = None,
    rss_interval_s: float = 0.001,
) -> Timing:
    """Time ``fn()``: ``warmup`` untimed calls, then up to ``repeats`` timed calls, each bracketed by syncs.

    ``max_seconds`` caps the total timed duration: repeats stop once it is exceeded, but never before
    ``min_repeats`` calls (or ``repeats`` if smaller). Exceptions propagate (wrap with :func:`is_oom`).
    """
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    if warmup < 0:
        raise ValueError(f"warmup must be >= 0, got {warmup}")
    device = torch.device(device)
    first_call_s = None
    for i in range(warmup):
        synchronize(device)
        t0 = time.perf_counter()
        fn()
        synchronize(device)
        if i == 0:
            first_call_s = time.perf_counter() - t0

    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    times: list[float] = []
    cpu_times: list[float] = []
    floor = min(min_repeats, repeats)
    with PeakMemory(device, rss_interval_s) as mem:
        for _ in range(repeats):
            synchronize(device)
            t0, c0 = time.perf_counter(), time.process_time()
            fn()
            synchronize(device)
            times.append(time.perf_counter() - t0)
            cpu_times.append(time.process_time() - c0)
            if max_seconds is not None and len(times) >= floor and sum(times) >= max_seconds:
                break
    return Timing(
        times_s=times,
        cpu_times_s=cpu_times,
        warmup=warmup,
        first_call_s=first_call_s,
        peak_mem_bytes=mem.peak,
        peak_mem_delta_bytes=mem.delta,
        mem_method=mem.method,
    )


def alternate(calls: dict[Any, Callable[[], Any]], rounds: int, *, device: torch.device | str = "cpu",
              prepare: Callable[[Any], None] | None = None) -> dict[Any, Timing]:
    """Time the ``calls`` in turn, round by round (A, B, A, B, ...), ``rounds`` times: the comparison of two code
    paths or models on a shared machine, where the machine's speed drifts and a neighbour's load falls on every
    call alike. Each call is bracketed by device syncs; ``prepare(name)``, when given, runs untimed before each call
    (to switch a setting). No warm-up: call each once first, keeping its output if it is compared. Returns each
    name's :class:`Timing` (wall and process CPU time of every round; memory is not measured)."""
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    device = torch.device(device)
    times: dict[Any, list[float]] = {name: [] for name in calls}
    cpu_times: dict[Any, list[float]] = {name: [] for name in calls}
    for _ in range(rounds):
        for name, fn in calls.items():
            if prepare is not None:
                prepare(name)
            synchronize(device)
            t0, c0 = time.perf_counter(), time.process_time()
            fn()
            synchronize(device)
            times[name].append(time.perf_counter() - t0)
            cpu_times[name].append(time.process_time() - c0)
    return {name: Timing(times_s=times[name], cpu_times_s=cpu_times[name], warmup=0, first_call_s=None,
                         peak_mem_bytes=None, peak_mem_delta_bytes=None, mem_method="not measured")
            for name in calls}
