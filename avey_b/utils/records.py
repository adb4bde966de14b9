"""Result files, written one way everywhere: JSON lines appended durably, JSON written atomically, model
directories written atomically with the SHA-256 of their files (checkpoints, fine-tuned models), names made safe
for paths, and the one Markdown table with a column per sequence length (efficiency benchmark, NIAH).

What an efficiency-benchmark record means (its curve, its latency) is :mod:`avey_b.benchmarking.results`. Of the
package, this module imports only :mod:`avey_b.utils.files` (to read JSON lines strictly) and the model's
:func:`~avey_b.model.file_modes.honour_umask` (every file it writes gets the mode the umask gives, 0644 under 022).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from avey_b.model.file_modes import honour_umask
from avey_b.utils.files import iter_jsonl, sha256_of_file


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
        honour_umask(tmp)  # mkstemp made it 0600
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


def write_yaml_atomic(path: str | os.PathLike, data: dict) -> None:
    """Write ``data`` as YAML (keys in their order), atomically (PyYAML, imported here: the training extra's)."""
    import yaml

    write_text_atomic(path, yaml.safe_dump(data, sort_keys=False))


def write_bytes_atomic(path: str | os.PathLike, write: Callable[[Any], None]) -> None:
    """Call ``write(f)`` on a binary file that becomes ``path`` only once complete (flushed, fsynced, renamed):
    readers see the old file or the new one, never half of one (e.g. ``pyarrow.parquet.write_table(table, f)``)."""
    _atomic_write(path, write, binary=True)


# --------------------------------------------------------------------------------- atomic model directories
#: The manifest of a directory written by :func:`save_pretrained_atomic`: the SHA-256 of each of its files, in the
#: format ``sha256sum -c SHA256SUMS`` checks (:mod:`avey_b.training.checkpoint` verifies it before a run starts).
MANIFEST_FILE = "SHA256SUMS"


def save_pretrained_atomic(dest: Path, model, tokenizer, state_dict=None, extra: dict | None = None,
                           texts: dict[str, str] | None = None) -> Path:
    """Write model (+ tokenizer, + ``extra`` files as torch.save, + ``texts`` files) to ``dest`` through a temp
    dir and a rename, with ``SHA256SUMS`` (:func:`write_manifest`): readers see the old directory or the new one,
    never half of one. ``model`` is anything with ``save_pretrained(dir, state_dict=...)``."""
    import torch  # here, not at the top: the light option modules (--help) import this module

    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.parent / f".tmp-{dest.name}-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    model.save_pretrained(tmp, state_dict=state_dict)
    if tokenizer is not None:
        tokenizer.save_pretrained(tmp)
    for name, obj in (extra or {}).items():
        torch.save(obj, tmp / name)
    for name, text in (texts or {}).items():
        (tmp / name).write_text(text)
    write_manifest(tmp)
    honour_umask(*(p for p in tmp.rglob("*") if p.is_file()))  # safetensors writes weights 0600
    if dest.exists():  # re-saving the same step (e.g. interrupted right after a periodic save)
        old = dest.parent / f".old-{dest.name}-{os.getpid()}"
        os.replace(dest, old)
        os.replace(tmp, dest)
        shutil.rmtree(old)
    else:
        os.replace(tmp, dest)
    return dest


def write_manifest(directory: Path) -> None:
    """Flush every file of ``directory`` to disk and record its SHA-256 in ``SHA256SUMS`` (``sha256sum`` format)."""
    lines = []
    for path in sorted(p for p in Path(directory).rglob("*") if p.is_file() and p.name != MANIFEST_FILE):
        with open(path, "rb") as f:
            try:
                os.fsync(f.fileno())
            except OSError:  # a platform that cannot flush a read-only handle: the hash still records the bytes
                pass
        lines.append(f"{sha256_of_file(path)}  {path.relative_to(directory).as_posix()}\n")
    with open(Path(directory) / MANIFEST_FILE, "w") as f:
        f.write("".join(lines))
        f.flush()
        os.fsync(f.fileno())


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
