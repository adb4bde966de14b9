"""Checkpoints: atomic, resumable, keep-last-K.

A checkpoint is a directory ``<run_dir>/checkpoints/step_00001234/`` holding

* the model, written by ``save_pretrained`` (``config.json`` + ``model.safetensors``), so
  ``AutoModelForMaskedLM.from_pretrained(dir)`` loads it (after ``import avey_b`` for Avey-B);
* the tokenizer (``save_pretrained``), so ``AutoTokenizer.from_pretrained(dir)`` and the ``fill-mask``
  pipeline work on the same directory;
* ``train_state.pt``: step, optimizer, LR scheduler, data position, and the RNG states of every rank.

It is first written to ``checkpoints/.tmp-step_…``, flushed to disk and then renamed into place (a rename within
one directory is atomic on POSIX), so a crash or a kill while saving never leaves a half-written checkpoint
under a real name. Each checkpoint names its run (``RUN_ID``), and only the last ``keep_last`` step
directories *of the same run* are kept: a checkpoint of another run is never pruned.

Integrity: every directory written here holds ``SHA256SUMS`` (the SHA-256 of each of its files, in the format
``sha256sum -c SHA256SUMS`` checks). A new checkpoint is read back and checked before any older one is pruned,
and a checkpoint is checked before a run resumes from it: a file whose bytes changed since it was written (a
damaged disk, a copy cut short, an edit) stops the run with a :class:`DamagedCheckpoint` error that names the file
and the newest intact checkpoint beside it, to resume from only if the user says so.
"""

from __future__ import annotations

import os
import random
import re
import shutil
from pathlib import Path

import torch

from ..files import sha256_of_file

STEP_RE = re.compile(r"^step_(\d+)$")
STATE_FILE = "train_state.pt"
RUN_ID_FILE = "RUN_ID"
MANIFEST_FILE = "SHA256SUMS"


class DamagedCheckpoint(OSError):
    """A checkpoint file that is missing or whose bytes are not those written (the message names the file)."""


def checkpoint_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / "checkpoints"


def list_checkpoints(run_dir: str | Path) -> list[Path]:
    """Complete step checkpoints of a run, oldest first."""
    root = checkpoint_dir(run_dir)
    if not root.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in root.iterdir() if (m := STEP_RE.match(p.name)) and (p / STATE_FILE).exists()]
    return [p for _, p in sorted(found)]


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    found = list_checkpoints(run_dir)
    return found[-1] if found else None


def run_id_of(ckpt: Path) -> str | None:
    """The id of the run that wrote a checkpoint (None for checkpoints from before run ids)."""
    path = Path(ckpt) / RUN_ID_FILE
    return path.read_text().strip() if path.exists() else None


def save_pretrained_atomic(dest: Path, model, tokenizer, state_dict=None, extra: dict | None = None,
                           texts: dict[str, str] | None = None) -> Path:
    """Write model (+ tokenizer, + ``extra`` files as torch.save, + ``texts`` files) to ``dest`` through a temp
    dir and a rename."""
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
    if dest.exists():  # re-saving the same step (e.g. interrupted right after a periodic save)
        old = dest.parent / f".old-{dest.name}-{os.getpid()}"
        os.replace(dest, old)
        os.replace(tmp, dest)
        shutil.rmtree(old)
    else:
        os.replace(tmp, dest)
    return dest


def save_checkpoint(run_dir, step: int, model, tokenizer, train_state: dict, keep_last: int = 3,
                    state_dict=None) -> Path:
    """Save one step checkpoint atomically and delete this run's checkpoints beyond the last ``keep_last``
    (the run is ``train_state["run_id"]``; checkpoints of other runs are left alone)."""
    run_id = str(train_state["run_id"])
    dest = checkpoint_dir(run_dir) / f"step_{step:08d}"
    save_pretrained_atomic(dest, model, tokenizer, state_dict=state_dict, extra={STATE_FILE: train_state},
                           texts={RUN_ID_FILE: run_id})
    verify(dest)  # read back: no older checkpoint is pruned while the newest one is unverified
    if keep_last > 0:
        for old in [c for c in list_checkpoints(run_dir) if run_id_of(c) == run_id][:-keep_last]:
            shutil.rmtree(old)
    return dest


def load_train_state(ckpt: str | Path) -> dict:
    """The training state of a checkpoint, after checking every file of it (:func:`check_checkpoint`)."""
    path = Path(ckpt) / STATE_FILE
    if not path.exists():
        raise FileNotFoundError(f"{ckpt} is not a training checkpoint (no {STATE_FILE})")
    check_checkpoint(ckpt)
    try:
        return torch.load(path, map_location="cpu", weights_only=False)
    except Exception as error:  # a checkpoint from before SHA256SUMS can still be damaged: name the file
        raise DamagedCheckpoint(f"{path} cannot be read ({type(error).__name__}: {error})") from error


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


def verify(directory: str | Path) -> bool:
    """Check every file recorded in ``directory``'s ``SHA256SUMS``: True when all match, False when there is no
    ``SHA256SUMS`` (written before this format: nothing to check). Raises :class:`DamagedCheckpoint` naming the
    first file that is missing or changed."""
    directory = Path(directory)
    manifest = directory / MANIFEST_FILE
    if not manifest.exists():
        return False
    for lineno, line in enumerate(manifest.read_text(errors="replace").splitlines(), 1):
        digest, sep, name = line.partition("  ")
        if not sep or len(digest) != 64:
            raise DamagedCheckpoint(f"{manifest}, line {lineno}: not a 'SHA-256  file name' line: {line[:80]!r}")
        path = directory / name
        if not path.is_file():
            raise DamagedCheckpoint(f"{path} is missing (recorded in {manifest})")
        found = sha256_of_file(path)
        if found != digest:
            raise DamagedCheckpoint(f"{path} is damaged: its SHA-256 is {found[:16]}…, not the {digest[:16]}… "
                                    f"recorded in {MANIFEST_FILE} when it was written")
    return True


def check_checkpoint(ckpt: str | Path) -> None:
    """:func:`verify`, with the newest intact checkpoint of the same run directory named in the error."""
    try:
        verify(ckpt)
    except DamagedCheckpoint as error:
        intact = newest_intact_checkpoint(Path(ckpt).parent.parent, other_than=Path(ckpt))
        hint = (f"; the newest intact checkpoint beside it is {intact}: to continue from there, resume with "
                f"--resume {intact}" if intact else "; there is no intact checkpoint beside it")
        raise DamagedCheckpoint(f"{error}{hint}") from None


def newest_intact_checkpoint(run_dir: str | Path, other_than: Path | None = None) -> Path | None:
    """The newest checkpoint of ``run_dir`` whose files match their ``SHA256SUMS`` (or that has none)."""
    for ckpt in reversed(list_checkpoints(run_dir)):
        if other_than is not None and ckpt.resolve() == other_than.resolve():
            continue
        try:
            verify(ckpt)
            return ckpt
        except DamagedCheckpoint:
            continue
    return None


def rng_state() -> dict:
    state = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
