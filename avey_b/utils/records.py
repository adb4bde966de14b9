"""Result files, written one way everywhere: JSON lines appended durably, JSON written atomically, model
directories written atomically with the SHA-256 of their files (checkpoints, fine-tuned models), names made safe
for paths, the one Markdown table with a column per sequence length (efficiency benchmark, NIAH), and the
:class:`Envelope` every benchmark record carries (machine, commit, versions, load average before and after, time).

This module imports no torch (the envelope reads versions with :mod:`importlib.metadata`, and a GPU's name only
where the process already imported torch), so that a benchmark whose parent process must stay small can use it.

What an efficiency-benchmark record means (its curve, its latency) is :mod:`avey_b.benchmarking.results`. Of the
package, this module imports only :mod:`avey_b.utils.files` (to read JSON lines strictly), the model's
:func:`~avey_b.model.file_modes.honour_umask` (every file it writes gets the mode the umask gives, 0644 under 022);
this package's version is its installed metadata's, like every other version in a record.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import glob
import importlib.metadata
import json
import os
import platform
import re
import shutil
import subprocess
import sys
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


#: The distributions whose versions every record names (beside Python's and this package's).
VERSIONED = ("torch", "transformers")


def load_average() -> list[float]:
    """The 1-, 5- and 15-minute load averages, rounded to 0.01 (``[]`` where the platform has none)."""
    return [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else []


def cpu_model() -> str:
    """This machine's CPU as benchmark records name it, read from ``/proc/cpuinfo``: its model name and family,
    whether it multiplies bf16 in hardware (the flags ``avx512_bf16`` / ``amx_bf16``, else "no native bf16"; this
    project's VMs change CPU between sessions, and the answer decides the precision a record could use) and the
    CPU count, e.g. ``"AMD EPYC (family 25, no native bf16), 2 CPUs"``."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            first = f.read().split("\n\n")[0]
    except OSError:
        return f"unknown CPU, {os.cpu_count()} CPUs"
    fields = {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in first.splitlines())}
    flags = fields.get("flags", "").split()
    bf16 = [flag for flag in ("avx512_bf16", "amx_bf16") if flag in flags] or ["no native bf16"]
    family = [f"family {fields['cpu family']}"] if "cpu family" in fields else []
    return f"{fields.get('model name', 'unknown CPU')} ({', '.join(family + bf16)}), {os.cpu_count()} CPUs"


def machine() -> dict[str, Any]:
    """The machine a record was measured on: host name, CPU (:func:`cpu_model`), CPU count, the GPUs' names (``[]``
    without one; read only where the process imported torch: one that did not ran nothing on a GPU) and PyTorch's
    intra-op threads (``None`` where torch is not imported)."""
    torch = sys.modules.get("torch")
    gpus = ([torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
            if torch is not None and torch.cuda.is_available() else [])
    return {"host": platform.node(), "cpu": cpu_model(), "cpus": os.cpu_count(), "gpus": gpus,
            "threads": torch.get_num_threads() if torch is not None else None}


def git_commit(repo: str | os.PathLike | None = None) -> tuple[str | None, bool | None]:
    """``(short commit, dirty)`` of the git work tree at ``repo`` (default: the one holding this package); dirty
    means tracked files differ from the commit (untracked files do not count). ``(None, None)`` outside git."""
    repo = Path(repo) if repo is not None else Path(__file__).resolve().parents[2]

    def git(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True)

    try:
        head = git("rev-parse", "--short", "HEAD")
    except OSError:  # no git on this machine
        return None, None
    if head.returncode != 0:
        return None, None
    return head.stdout.strip(), bool(git("status", "--porcelain", "--untracked-files=no").stdout.strip())


def versions(*extra: str) -> dict[str, str | None]:
    """Python's version, this package's, and those of :data:`VERSIONED` and of the distributions ``extra`` (``None``:
    not installed), read from the installed metadata (no package is imported)."""
    found: dict[str, str | None] = {"python": platform.python_version()}
    # this package under its import name, as records have always named it; its distribution is "avey-b"
    for key, name in (("avey_b", "avey-b"), *((name, name) for name in (*VERSIONED, *extra))):
        try:
            found[key] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[key] = None
    return found


@dataclasses.dataclass
class Envelope:
    """What every benchmark record carries besides its measurements: the machine (:func:`machine`), the commit
    and whether the work tree was dirty (:func:`git_commit`), the versions (:func:`versions`), the UTC time the
    measurement began (:func:`utc_timestamp`) and the load average (:func:`load_average`) when it began and when it
    ended. A run's own threads, precision, command and results are its fields, beside these.

    ``env = Envelope.begin()`` before the measurement, ``record = {**results, **env.end()}`` after it. An envelope
    is plain data: one begun in another process travels as ``Envelope(**fields)``."""

    time: str
    machine: dict[str, Any]
    commit: str | None
    dirty: bool | None
    versions: dict[str, str | None]
    load_before: list[float]
    load_after: list[float] | None = None

    @classmethod
    def begin(cls, *packages: str, repo: str | os.PathLike | None = None) -> Envelope:
        """Now: the time, the machine, the commit of ``repo`` (default: this package's), the versions (with those
        of the distributions ``packages``, e.g. ``"onnxruntime"``) and the load average before the measurement."""
        commit, dirty = git_commit(repo)
        return cls(time=utc_timestamp(), machine=machine(), commit=commit, dirty=dirty,
                   versions=versions(*packages), load_before=load_average())

    def end(self) -> dict[str, Any]:
        """Take the load average after the measurement (the first call's; later calls keep it) and return the
        envelope's fields, to merge into the record."""
        if self.load_after is None:
            self.load_after = load_average()
        return dataclasses.asdict(self)

    def line(self) -> str:
        """The envelope as one sentence for a Markdown report (after :meth:`end`): host and CPU, commit, load
        average at the start and the end, time."""
        m = self.machine
        return (f"{m['host']}, {m['cpu']}{', GPU ' + ', '.join(m['gpus']) if m['gpus'] else ''}; commit "
                f"{self.commit}{' (dirty)' if self.dirty else ''}; load average {self.load_before} at the start, "
                f"{self.load_after} at the end; {self.time}")


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


@contextlib.contextmanager
def naming_full_disk(path: str | os.PathLike):
    """Re-raise a full disk or quota (``ENOSPC``, ``EDQUOT``) met while writing ``path`` as an ``OSError`` that names
    it: a file object's write says only "No space left on device", and the writers of safetensors and torch.save wrap
    the same error in their own exception types, with the OS's words or their own (``os error 28``, ``StorageFull``).
    The atomic writers here leave nothing under the name, so the job stops in a resumable state: free
    space and run it again."""
    try:
        yield
    except Exception as e:
        if isinstance(e, OSError) and e.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        if not isinstance(e, OSError) and not _FULL.search(str(e)):
            raise
        code = e.errno if isinstance(e, OSError) else errno.ENOSPC
        raise OSError(code, f"{os.strerror(code)} while writing {path}: nothing was written under its name; free "
                            "space and run the job again (it resumes)", os.fspath(path)) from e


#: How wrapped ENOSPC / EDQUOT errors read (safetensors' Rust IoError, torch's stream writer, the OS's words).
_FULL = re.compile(r"No space left on device|Disk quota exceeded|os error (28|122)|StorageFull|QuotaExceeded")


def _atomic_write(path: str | os.PathLike, write: Callable[[Any], None], binary: bool = False) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix="." + os.path.basename(path) + ".", suffix=TMP_SUFFIX)
    try:
        with naming_full_disk(path), \
                (os.fdopen(fd, "wb") if binary else os.fdopen(fd, "w", encoding="utf-8", newline="")) as f:
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


@contextlib.contextmanager
def no_save_bars():
    """transformers' progress bars off inside the block, then as they were: a model save shows a "Writing model
    shards" bar per save, noise beside a run's own progress (checkpoints every epoch, the finished model)."""
    import huggingface_hub.utils as hub
    from transformers.utils import logging as hf_logging

    was_on, hub_was_off = hf_logging.is_progress_bar_enabled(), hub.are_progress_bars_disabled()
    hf_logging.disable_progress_bar()  # transformers' own bars and the Hub's
    try:
        yield
    finally:
        if was_on:
            hf_logging.enable_progress_bar()
        if hub_was_off:
            hub.disable_progress_bars()
        else:
            hub.enable_progress_bars()


def save_pretrained_atomic(dest: Path, model, tokenizer, state_dict=None, extra: dict | None = None,
                           texts: dict[str, str] | None = None) -> Path:
    """Write model (+ tokenizer, + ``extra`` files as torch.save, + ``texts`` files) to ``dest`` through a temp
    dir and a rename, with ``SHA256SUMS`` (:func:`write_manifest`): readers see the old directory or the new one,
    never half of one. ``model`` is anything with ``save_pretrained(dir, state_dict=...)``."""
    import torch  # here, not at the top: the light option modules (--help) import this module

    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    # a killed writer's temporary directory (another pid): the job's lock (avey_b.utils.locks) makes it stale
    for stale in dest.parent.glob(f".tmp-{glob.escape(dest.name)}-*"):
        shutil.rmtree(stale, ignore_errors=True)
    tmp = dest.parent / f".tmp-{dest.name}-{os.getpid()}"
    tmp.mkdir()
    try:
        with naming_full_disk(dest), no_save_bars():
            model.save_pretrained(tmp, state_dict=state_dict)
            if tokenizer is not None:
                tokenizer.save_pretrained(tmp)
            for name, obj in (extra or {}).items():
                torch.save(obj, tmp / name)
            for name, text in (texts or {}).items():
                (tmp / name).write_text(text)
            write_manifest(tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)  # a full disk or an error: nothing left behind, nothing under dest
        raise
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
