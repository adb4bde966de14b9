"""Result files, written one way everywhere: JSON lines appended durably, JSON written atomically, names made
safe for paths, and the one Markdown table with a column per sequence length (efficiency benchmark, NIAH).

Also the meaning of an efficiency-benchmark record (``series_key``, ``latency_of``, ``throughput_of``,
``read_records``), which the benchmark, its fits, its plots and the comparison scripts share. This module
imports nothing else from the package.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from .files import iter_jsonl


def utc_timestamp() -> str:
    """Now, as ``2026-11-22T15:04:05Z`` (the time stamp of every record)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def slug(name: str) -> str:
    """``name`` as one path component: runs of characters other than ``[A-Za-z0-9._@-]`` become ``_``."""
    return re.sub(r"[^A-Za-z0-9._@-]+", "_", str(name)).strip("_") or "model"


def append_jsonl(path: str | os.PathLike | None, record: dict[str, Any], *, echo: bool = False) -> None:
    """Append ``record`` as one JSON line, flushed and fsynced (an interrupted run keeps every finished line);
    with ``echo``, also print it to stdout. ``path=None`` only echoes."""
    line = json.dumps(record, default=str)
    if path is not None:
        with open(path, "a", encoding="utf-8") as f:
            f.write(line + "\n")
            f.flush()
            os.fsync(f.fileno())
    if echo:
        print(line, flush=True)


def read_jsonl(path: str | os.PathLike, *, objects_only: bool = False) -> list[Any]:
    """The records of a JSON-lines file. Blank lines are skipped; with ``objects_only``, so are lines that are not
    JSON objects (log lines mixed into a captured stdout). A malformed line is an error naming file and line."""
    return [v for _, v in iter_jsonl(path, objects=objects_only, skip_other_lines=objects_only)]


#: The temporary file of an atomic write is hidden (a leading ``.``: directory readers such as pyarrow's datasets
#: skip it) and ends in this suffix; one left by a killed process can be recognized and removed.
TMP_SUFFIX = ".tmp"


def _atomic_write(path: str | os.PathLike, write: Callable[[Any], None], binary: bool = False) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix="." + os.path.basename(path) + ".", suffix=TMP_SUFFIX)
    try:
        with (os.fdopen(fd, "wb") if binary else os.fdopen(fd, "w", encoding="utf-8", newline="")) as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def write_json_atomic(path: str | os.PathLike, record: Any) -> None:
    """Write ``record`` as indented JSON; readers see the old file or the new one, never half of one."""
    _atomic_write(path, lambda f: json.dump(record, f, indent=2, sort_keys=True))


def write_jsonl_atomic(path: str | os.PathLike, rows: Iterable[dict[str, Any]]) -> None:
    """Write ``rows`` as a whole JSON-lines file, atomically."""
    _atomic_write(path, lambda f: f.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    _atomic_write(path, lambda f: f.write(text))


def write_bytes_atomic(path: str | os.PathLike, write: Callable[[Any], None]) -> None:
    """Call ``write(f)`` on a binary file that becomes ``path`` only once complete (flushed, fsynced, renamed):
    readers see the old file or the new one, never half of one (e.g. ``pyarrow.parquet.write_table(table, f)``)."""
    _atomic_write(path, write, binary=True)


# ------------------------------------------------------------------------------------------ length tables
def length_label(n: int) -> str:
    """``1024 -> "1K"``, ``98304 -> "96K"``, ``600 -> "600"``."""
    return f"{n // 1024}K" if n >= 1024 and n % 1024 == 0 else str(n)


def length_table(header: Sequence[str], rows: Sequence[tuple[Sequence[str], dict[int, str]]]) -> str:
    """Markdown: the ``header`` columns, then one column per sequence length found in ``rows``.

    Each row is ``(its first cells, {length: cell text})``; a length a row lacks is an empty cell.
    """
    lengths = sorted({n for _, cells in rows for n in cells})
    lines = ["| " + " | ".join([*header, *map(length_label, lengths)]) + " |",
             "|" + "---|" * (len(header) + len(lengths))]
    for first, cells in rows:
        lines.append("| " + " | ".join([*first, *(cells.get(n, "") for n in lengths)]) + " |")
    return "\n".join(lines)


# ------------------------------------------------------------------------------- efficiency benchmark records
STATS = ("median", "min", "cpu")


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
    (all threads; the work done, nearly insensitive to neighbours on a shared CPU; CPU runs only)."""
    if stat not in STATS:
        raise ValueError(f"stat must be one of {STATS}, got {stat!r}")
    return rec[{"median": "latency_median_s", "min": "latency_min_s", "cpu": "cpu_median_s"}[stat]]


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
