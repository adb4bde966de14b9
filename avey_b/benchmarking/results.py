"""What an efficiency-benchmark record means: the curve it belongs to (:func:`series_key`), the point it measures
(:func:`point_key`), its latency and throughput under a chosen statistic (:func:`latency_of`,
:func:`throughput_of`), and the records of a results file (:func:`read_records`). The benchmark
(:mod:`.efficiency`), its fits (:mod:`.fit`) and its plots (:mod:`.plot`) share these, so a record is read one
way everywhere."""

from __future__ import annotations

import os
from typing import Any

from avey_b.utils.records import read_jsonl

STATS = ("median", "min", "cpu", "mean")


def series_key(rec: dict[str, Any]) -> str:
    """The name of one curve: model, attention, mode, dtype."""
    attn = rec.get("attn") or "-"
    return f"{rec['model']} [{rec['mode']}, {attn}, {rec['dtype']}]"


def point_key(rec: dict[str, Any]) -> tuple:
    """What identifies one measured point (a curve and a length)."""
    return (rec["model"], rec.get("attn"), rec["mode"], rec["dtype"], rec["batch_size"], rec["seq_len"])


def latency_of(rec: dict[str, Any], stat: str = "median") -> float:
    """The seconds per forward a fit or plot uses. ``median`` of the repeats' wall time (the paper's
    protocol, right on a dedicated GPU); ``min`` (other processes only ever add time, so on a shared
    machine the minimum is the less disturbed estimate); ``cpu``: median process CPU time of the repeats
    (all threads; the work done, nearly insensitive to neighbours on a shared CPU; CPU runs only); ``mean`` of the
    repeats' wall time (the authors' scripts' figure)."""
    if stat not in STATS:
        raise ValueError(f"stat must be one of {STATS}, got {stat!r}")
    return rec[{"median": "latency_median_s", "min": "latency_min_s", "cpu": "cpu_median_s",
                "mean": "latency_mean_s"}[stat]]


def throughput_of(rec: dict[str, Any], stat: str = "median") -> float:
    """Tokens per second of a point (batch × length / latency)."""
    return rec["batch_size"] * rec["seq_len"] / latency_of(rec, stat)


def read_records(path: str | os.PathLike, *, latest: bool = True) -> list[dict[str, Any]]:
    """The records of an efficiency results file, or of the ``results.jsonl`` in a directory ``bench run`` wrote.
    With ``latest``, a point recorded several times (a resumed run that retried it) keeps only its last record."""
    if os.path.isdir(path):
        path = os.path.join(path, "results.jsonl")
        if not os.path.exists(path):
            raise FileNotFoundError(f"{os.path.dirname(path)} is a directory without results.jsonl: pass the "
                                    "directory `avey-b bench run --out` wrote, or its results.jsonl")
    out = read_jsonl(path, objects_only=True)
    if latest:
        last = {point_key(r): i for i, r in enumerate(out)}
        out = [r for i, r in enumerate(out) if last[point_key(r)] == i]
    return out
