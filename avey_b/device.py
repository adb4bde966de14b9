"""Device and precision choices, made one way for pretraining, fine-tuning, NIAH and benchmarks.

* ``pick_device("auto" | "cpu" | "cuda" | "cuda:1" | None)`` — CUDA when available for ``auto``/``None``.
* ``cpu_has_native_bf16()`` — AMX or AVX512-BF16. Without them bf16 is emulated and slower than float32.
* ``use_bf16(precision, device)`` — ``auto`` means bf16 autocast on CUDA and on CPUs with native bf16.
* ``autocast(device, enabled)`` — a bf16 autocast context for that device (a no-op when not enabled).
* ``is_oom(exc)`` — recognizes CUDA and CPU out-of-memory failures, so callers can record "OOM" as data.

This module imports nothing else from the package.
"""

from __future__ import annotations

import contextlib

import torch

PRECISIONS = ("auto", "bf16", "fp32")


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
