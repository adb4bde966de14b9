"""Device and precision choices, made one way for pretraining, fine-tuning, NIAH and benchmarks.

* ``pick_device("auto" | "cpu" | "cuda" | "cuda:1" | None)`` — CUDA when available for ``auto``/``None``.
* ``cpu_has_native_bf16()`` — AMX or AVX512-BF16. Without them bf16 is emulated and slower than float32.
* ``use_bf16(precision, device)`` — ``auto`` means bf16 autocast on CUDA and on CPUs with native bf16.
* ``autocast(device, enabled)`` — a bf16 autocast context for that device (a no-op when not enabled).
* ``is_oom(exc)`` — recognizes CUDA and CPU out-of-memory failures, so callers can record "OOM" as data.
* ``usable_cpus()`` — the CPUs this process may run on: its affinity mask, capped by its cgroup's CPU quota
  (a container's ``--cpus``, a systemd ``CPUQuota``), which ``os.cpu_count()`` and PyTorch's default ignore.
* ``set_cpu_threads(n)`` — PyTorch's intra-op threads: ``n``, else its default capped at ``usable_cpus()``.
* ``start_runtime(device, precision, threads)`` — the three choices at once, and the start line printed.
* ``others_busy()`` — how many CPUs other processes keep busy right now (the kernel's count of runnable threads,
  less this process's own), or the 1-minute load average where ``/proc`` is missing.
* ``runtime_line(device, precision, threads)`` — the one line every verb that runs a model prints at its start:
  device, precision, CPU threads, and a note when other processes already keep the CPUs busy.

This module imports nothing else from the package.
"""

from __future__ import annotations

import contextlib
import math
import os
import statistics
import sys
import time
from pathlib import Path

import torch

from avey_b.configs import PRECISIONS


def pick_device(name: str | torch.device | None = "auto") -> torch.device:
    """``auto`` / ``None``: CUDA when available, else CPU; anything else as ``torch.device`` reads it."""
    if name is None or str(name) == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(f"device {str(name)!r} was asked for but no CUDA device is available")
    return device


def cpu_has_native_bf16() -> bool:
    """Whether this CPU multiplies bf16 in hardware (AMX or AVX512-BF16). torch.cpu's probes are private API:
    any failure means "no"."""
    try:
        return bool(torch.cpu._is_amx_tile_supported() or torch.cpu._is_avx512_bf16_supported())
    except Exception:  # noqa: BLE001 -- an older/other torch build: assume no native bf16
        return False


def use_bf16(precision: str, device: torch.device) -> bool:
    """Whether to run under bf16 autocast: ``auto`` (CUDA, or a CPU with native bf16), ``bf16`` or ``fp32``."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    if precision == "auto":
        return device.type == "cuda" or (device.type == "cpu" and cpu_has_native_bf16())
    return precision == "bf16"


def autocast(device: torch.device, enabled: bool = True):
    """bf16 autocast on ``device`` when ``enabled``; a no-op context otherwise."""
    if not enabled:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16)


def is_oom(exc: BaseException) -> bool:
    """True when ``exc`` is an out-of-memory failure (CUDA, or a CPU allocation that failed)."""
    if isinstance(exc, (torch.cuda.OutOfMemoryError, MemoryError)):
        return True
    if isinstance(exc, RuntimeError):
        text = str(exc).lower()
        return any(s in text for s in ("out of memory", "can't allocate memory", "cannot allocate memory",
                                       "not enough memory"))
    return False


def usable_cpus(affinity: set[int] | None = None, cgroup_root: str | Path = "/sys/fs/cgroup",
                proc_cgroup: str | Path = "/proc/self/cgroup") -> int:
    """How many CPUs this process can keep busy: its affinity mask (``taskset``, cpusets; ``os.sched_getaffinity``)
    capped by the cgroup CPU quota, rounded down (a quota of 1.5 CPUs: one thread runs unthrottled, two are
    throttled every period). At least 1. ``affinity`` and the two paths are for tests."""
    if affinity is None:
        try:
            affinity = os.sched_getaffinity(0)
        except AttributeError:  # no affinity API (macOS, Windows): every CPU
            affinity = set(range(os.cpu_count() or 1))
    cpus = len(affinity)
    quota = cgroup_cpu_quota(cgroup_root, proc_cgroup)
    if quota is not None:
        cpus = min(cpus, math.floor(quota))
    return max(1, cpus)


def cgroup_cpu_quota(cgroup_root: str | Path = "/sys/fs/cgroup", proc_cgroup: str | Path = "/proc/self/cgroup"):
    """The CPU time this process's cgroup may use per period, in CPUs (quota / period; the tightest over the cgroup
    and its ancestors), or None when there is no quota or no cgroup file system. Reads cgroup v2's ``cpu.max``
    (``"150000 100000"``, or ``"max 100000"`` for none) and cgroup v1's ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``
    (quota -1 for none), under the hierarchy ``/proc/self/cgroup`` names; inside a container, where that path is
    not mounted, the mount's root is the container's own cgroup."""
    root = Path(cgroup_root)
    try:
        lines = Path(proc_cgroup).read_text().splitlines()
    except OSError:
        return None
    limits = []
    for line in lines:
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hierarchy == "0" and not controllers:  # cgroup v2 (alone, or beside v1 under unified/)
            mounts, read = (root, root / "unified"), _cpu_max
        elif "cpu" in controllers.split(","):  # cgroup v1's cpu controller
            mounts, read = (root / controllers, root / "cpu", root / "cpu,cpuacct"), _cfs_quota
        else:
            continue
        parts = [p for p in path.split("/") if p]
        for mount in dict.fromkeys(mounts):
            for depth in range(len(parts), -1, -1):  # the cgroup, then each ancestor up to the mount's root
                limit = read(mount.joinpath(*parts[:depth]))
                if limit is not None:
                    limits.append(limit)
    return min(limits) if limits else None


def _cpu_max(directory: Path) -> float | None:
    try:
        quota, period = (directory / "cpu.max").read_text().split()[:2]
    except (OSError, ValueError):
        return None
    return None if quota == "max" else int(quota) / int(period)


def _cfs_quota(directory: Path) -> float | None:
    try:
        quota = int((directory / "cpu.cfs_quota_us").read_text())
        period = int((directory / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return None if quota <= 0 or period <= 0 else quota / period


def others_busy(samples: int = 5, interval: float = 0.02, proc: str | Path = "/proc") -> tuple[float | None, bool]:
    """``(CPUs, now)``: how many CPUs other processes keep busy. ``now`` True: the threads that are running or
    waiting for a CPU at this moment (``/proc/loadavg``'s fourth field, ``running/total``) less this process's own
    (``/proc/self/task/*/stat`` in state R), the mean of ``samples`` readings ``interval`` seconds apart. False,
    where ``/proc`` cannot be read (macOS): the 1-minute load average, which also counts this process and, for
    minutes, processes that have ended (a finished ``pip install``); None where there is neither. ``proc`` is for
    tests."""
    proc, readings = Path(proc), []
    for i in range(samples):
        if i:
            time.sleep(interval)
        try:
            running = int((proc / "loadavg").read_text().split()[3].split("/")[0])
            own = sum(_task_state(stat) == "R" for stat in (proc / "self" / "task").glob("*/stat"))
        except (OSError, IndexError, ValueError):
            return (os.getloadavg()[0] if hasattr(os, "getloadavg") else None), False
        readings.append(max(0, running - max(own, 1)))  # at least this thread, reading the count, runs
    return statistics.fmean(readings), True


def _task_state(stat: Path) -> str:
    """A thread's state letter (R running, S sleeping, ...) from its ``stat`` line ``pid (name) S ...``; the name
    may hold spaces and parentheses, so the state follows the last ``)``. Empty for a thread that has ended."""
    try:
        return stat.read_text().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return ""


#: PyTorch's own thread count when this module was imported: one per core it sees (it follows the affinity mask,
#: not a cgroup quota), or ``OMP_NUM_THREADS``.
PYTORCH_DEFAULT_THREADS = torch.get_num_threads()


def set_cpu_threads(requested: int | None = None, pytorch_default: int = PYTORCH_DEFAULT_THREADS) -> int:
    """Set PyTorch's intra-op CPU threads and return the count: ``requested``; else (auto), unless
    ``OMP_NUM_THREADS`` is set, ``pytorch_default`` (:data:`PYTORCH_DEFAULT_THREADS`; tests pass another) capped at
    :func:`usable_cpus` — whatever an earlier piece of work in this process tuned it to
    (:class:`avey_b.utils.shared_cpu.ThreadTuner`)."""
    if requested:
        torch.set_num_threads(int(requested))
    elif not os.environ.get("OMP_NUM_THREADS"):
        torch.set_num_threads(min(usable_cpus(), pytorch_default))
    return torch.get_num_threads()


def runtime_line(device: torch.device | str, precision: str, threads: int | None = None, *, runtime: str = "PyTorch",
                 flag: str = "--threads", auto: bool = False) -> str:
    """The one line every verb that runs a model prints at its start: ``runtime`` on ``device`` in ``precision``
    (``"fp32"``, ``"bf16 autocast"``, ``"int8"``) and, on the CPU, ``threads`` (default: PyTorch's) of the CPUs this
    process may use (:func:`usable_cpus`) — the setting that decides the speed on a shared machine — and ``auto``
    when the program fits the count (:class:`avey_b.utils.shared_cpu.ThreadTuner`). When other processes already
    keep the CPUs busy (:func:`others_busy`) and several threads run, a second line says what ``flag`` to try, or
    that auto tries fewer (:mod:`avey_b.utils.shared_cpu` watches the rate later on)."""
    device = torch.device(device)
    where = f"{device} ({torch.cuda.get_device_name(device)})" if device.type == "cuda" else str(device)
    line = f"{runtime} on {where}, {precision}"
    if device.type != "cpu":
        return line
    threads = threads or torch.get_num_threads()
    cpus = usable_cpus()
    line += (f", {threads} CPU thread{'s' if threads != 1 else ''}{', auto' if auto else ''} ({cpus} usable "
             f"CPU{'s' if cpus != 1 else ''}; {flag})")
    busy, now = others_busy()
    idle = max(1, cpus - math.floor((busy or 0.0) + 0.25))  # a core counts as busy from a load of 0.75
    if threads > 1 and threads > idle:
        said = (f"other processes keep {busy:.1f} of the {cpus} CPUs busy now" if now else
                f"the load average is {busy:.1f} on {cpus} CPUs: other processes keep them busy")
        line += f"\nnote: {said}, and each operation waits for the slowest of the {threads} threads; " + (
            "auto times fewer threads on the first steps and keeps the fastest" if auto else
            f"{flag} {idle} (one per idle core) is often several times faster")
    return line


def start_runtime(device: str | torch.device | None, precision: str, threads: int | None, *,
                  flag: str = "--threads", what: str = "") -> tuple[torch.device, bool, int]:
    """What a verb that runs a PyTorch model does first: pick the device (:func:`pick_device`), the precision
    (:func:`use_bf16`) and the CPU threads (:func:`set_cpu_threads`), and print its start line on stderr
    (:func:`runtime_line`, after ``what``, the verb's work, when given; ``flag`` is the option that sets the
    threads; stdout stays the verb's results). ``threads`` None: auto. Returns ``(device, bf16, threads)``."""
    device = pick_device(device)
    bf16 = use_bf16(precision, device)
    count = set_cpu_threads(threads)
    line = runtime_line(device, "bf16 autocast" if bf16 else "fp32", count, flag=flag, auto=threads is None)
    print(f"{what}: {line}" if what else line, file=sys.stderr, flush=True)
    return device, bf16, count
