"""Checkpoints: atomic, resumable, keep-last-K.

A checkpoint is a directory ``<run_dir>/checkpoints/step_00001234/`` holding

* the model, written by ``save_pretrained`` (``config.json`` + ``model.safetensors``), so
  ``AutoModelForMaskedLM.from_pretrained(dir)`` loads it (after ``import avey_b`` for Avey-B);
* the tokenizer (``save_pretrained``), so ``AutoTokenizer.from_pretrained(dir)`` and the ``fill-mask``
  pipeline work on the same directory;
* ``train_state.pt``: step, optimizer, LR scheduler, data position, the RNG states of every rank, and the run's
  time so far (its sessions and seconds, so a resumed run reports the whole run's time).

It is first written to ``checkpoints/.tmp-step_…``, flushed to disk and then renamed into place (a rename within
one directory is atomic on POSIX), so a crash or a kill while saving never leaves a half-written checkpoint
under a real name. Each checkpoint names its run (``RUN_ID``), and only the last ``keep_last`` step
directories *of the same run* are kept: a checkpoint of another run is never pruned.

Integrity: every directory written here holds ``SHA256SUMS`` (the SHA-256 of each of its files, in the format
``sha256sum -c SHA256SUMS`` checks). A new checkpoint is read back and checked before any older one is pruned,
and a checkpoint (or a ``model.init_from`` directory) is checked before a run starts from it: a file whose bytes
changed since it was written (a damaged disk, a copy cut short, an edit) stops the run with a
:class:`DamagedCheckpoint` error that names the file and the newest intact checkpoint beside it, to resume from
only if the user says so. A directory without ``SHA256SUMS`` cannot be checked, and since this library writes one
into every directory, its absence means damage or a directory written elsewhere: it is refused too
(:class:`UnverifiedCheckpoint`) unless the user passes ``--trust-unverified``.
"""

from __future__ import annotations

import random
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_optimizer_state_dict,
)

from avey_b.utils.files import sha256_of_file
from avey_b.utils.records import MANIFEST_FILE, save_pretrained_atomic

from . import distributed as dist_utils
from . import rundir
from .config import TRUST_FLAG, to_dict

if TYPE_CHECKING:
    from .config import PretrainConfig

STEP_RE = re.compile(r"^step_(\d+)$")
STATE_FILE = "train_state.pt"
RUN_ID_FILE = "RUN_ID"


class DamagedCheckpoint(OSError):
    """A checkpoint file that is missing or whose bytes are not those written (the message names the file)."""


class UnverifiedCheckpoint(DamagedCheckpoint):
    """A checkpoint or model directory without ``SHA256SUMS``, so its files cannot be checked."""


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


def load_train_state(ckpt: str | Path, trust_unverified: bool = False) -> dict:
    """The training state of a checkpoint, after checking every file of it (:func:`check_model_dir`; one without
    ``SHA256SUMS`` only with ``trust_unverified``). Read with ``weights_only=True``: tensors and plain Python
    values only, never an arbitrary pickle (a file that needs more is refused, nothing of it run)."""
    path = Path(ckpt) / STATE_FILE
    if not path.exists():
        raise FileNotFoundError(f"{ckpt} is not a training checkpoint (no {STATE_FILE})")
    check_model_dir(ckpt, "--resume", trust_unverified)
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # a checkpoint from before SHA256SUMS can still be damaged: name the file
        raise DamagedCheckpoint(f"{path} cannot be read ({type(error).__name__}: {error})") from error


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


def check_model_dir(directory: str | Path, role: str, trust_unverified: bool = False) -> bool:
    """:func:`verify` before a run starts from ``directory`` (``role``: ``--resume`` or ``model.init_from``), with
    the newest intact checkpoint beside it named in the error. A run's checkpoint or model without ``SHA256SUMS``
    is refused (:class:`UnverifiedCheckpoint`) unless ``trust_unverified``: runs always write it, so it was lost. A
    ``model.init_from`` directory that no run wrote (save_pretrained, ``avey-b convert``, a download) has none to
    lose and starts unchecked, with a note. Returns whether the files were checked."""
    directory = Path(directory)
    try:
        if verify(directory):
            return True
    except DamagedCheckpoint as error:
        raise DamagedCheckpoint(f"{error}{_instead(directory, role)}") from None
    if trust_unverified:
        dist_utils.print0(f"note: {directory} has no {MANIFEST_FILE}; its files were not checked ({TRUST_FLAG})")
        return False
    if role != "--resume" and not _written_by_a_run(directory):
        # save_pretrained, `avey-b convert` and Hub downloads write no manifest: nothing is missing from them.
        dist_utils.print0(f"note: {directory} has no {MANIFEST_FILE} (not written by a run); "
                          "its files were not checked")
        return False
    raise UnverifiedCheckpoint(
        f"{directory} has no {MANIFEST_FILE}, so its files cannot be checked. Every checkpoint and model directory "
        f"that avey-b pretrain and finetune write records the SHA-256 of its files there: this one lost it (damage, "
        f"an incomplete copy) or was written by something else (save_pretrained, avey-b convert, a download)"
        f"{_instead(directory, role)}. To start from it anyway, unchecked, add {TRUST_FLAG}.")


def _written_by_a_run(directory: Path) -> bool:
    """Whether ``directory`` is a checkpoint or the ``model/`` of an ``avey-b pretrain`` / ``finetune`` run (which
    always write the manifest): it sits in a run's ``checkpoints/``, or beside the run's ``history.jsonl``."""
    parent = directory.resolve().parent
    return parent.name == checkpoint_dir("").name or (parent / "history.jsonl").is_file()


def _instead(directory: Path, role: str) -> str:
    """The error's pointer to the newest intact checkpoint beside ``directory`` (in a run's ``checkpoints/``)."""
    if directory.resolve().parent.name != checkpoint_dir("").name:
        return ""
    intact = newest_intact_checkpoint(directory.resolve().parent.parent, other_than=directory)
    if intact is None:
        return "; there is no intact checkpoint beside it"
    how = f"resume with --resume {intact}" if role == "--resume" else f"set {role}={intact}"
    return f"; the newest intact checkpoint beside it is {intact}: to continue from there, {how}"


def newest_intact_checkpoint(run_dir: str | Path, other_than: Path | None = None) -> Path | None:
    """The newest checkpoint of ``run_dir`` that has ``SHA256SUMS`` and whose files match it."""
    for ckpt in reversed(list_checkpoints(run_dir)):
        if other_than is not None and ckpt.resolve() == Path(other_than).resolve():
            continue
        try:
            if verify(ckpt):
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


def full_state_dict(model) -> dict:
    """The unsharded model state on CPU (FSDP2: a collective every rank must call)."""
    sd = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    # save_pretrained drops tied copies only when it builds the state dict itself; do the same here
    tied = getattr(model, "_tied_weights_keys", None) or {}
    if getattr(model.config, "tie_word_embeddings", True):
        for key in (tied.keys() if isinstance(tied, dict) else tied):
            sd.pop(key, None)
    return sd


@dataclass
class TrainState:
    """Where a run stands: the optimizer step reached, the run's id (kept across resumes), the step of the last
    checkpoint written or resumed from, and its time: when this session (this process) started, which session of
    the run it is, and the run's seconds in the earlier ones, up to the checkpoint resumed from (None: a checkpoint
    written before that was recorded). A plain record: :func:`save_training` writes it with the state of the run's
    objects, :func:`restore_training` reads both back."""

    step: int = 0
    run_id: str = field(default_factory=rundir.new_run_id)
    last_saved: int = -1
    started: float = field(default_factory=time.time)
    session: int = 1
    earlier_s: float | None = 0.0

    def session_seconds(self) -> float:
        return time.time() - self.started

    def run_seconds(self) -> float | None:
        """The run's time over all its sessions (None where an earlier one's is not known)."""
        return None if self.earlier_s is None else self.earlier_s + self.session_seconds()


@dataclass
class CheckpointParts:
    """The live objects of a run whose state a checkpoint holds beside :class:`TrainState`: the model (unwrapped:
    no DDP or compile wrapper; FSDP2 shards it in place), its tokenizer, the optimizer, the learning-rate schedule
    and the packed training stream (its position in the data)."""

    raw_model: torch.nn.Module
    tokenizer: Any
    optimizer: torch.optim.Optimizer
    scheduler: Any
    stream: Any


def restore_training(saved: dict | None, parts: CheckpointParts, cfg: PretrainConfig, info,
                     started: float) -> TrainState:
    """The run's state after continuing from ``saved``, a checkpoint's train state (:func:`load_train_state`), into
    ``parts``; ``None``: a fresh run, seeded per rank. ``started``: when this session began (``time.time()``)."""
    if saved is None:
        torch.manual_seed(cfg.train.seed + 1000 * info.rank)  # dropout differs per rank
        return TrainState(started=started)
    if dist_utils.uses_fsdp(info, cfg.distributed.strategy):
        set_optimizer_state_dict(parts.raw_model, parts.optimizer, saved["optimizer"],
                                 options=StateDictOptions(full_state_dict=True))
    else:
        parts.optimizer.load_state_dict(saved["optimizer"])
    parts.scheduler.load_state_dict(saved["scheduler"])
    data_state = saved["data"]
    if "per_rank" in data_state:
        if len(data_state["per_rank"]) != info.world_size:
            raise ValueError(f"checkpoint was written by {len(data_state['per_rank'])} ranks with "
                             f"data.shard_by=document; resume it on the same number of ranks")
        data_state = data_state["per_rank"][info.rank]
    parts.stream.load_state_dict(data_state)
    step = int(saved["step"])
    state = TrainState(step=step, last_saved=step, started=started, session=int(saved.get("sessions", 1)) + 1,
                       earlier_s=saved.get("run_seconds"))
    state.run_id = saved.get("run_id") or state.run_id  # a checkpoint from before run ids: a new id
    rngs = saved["rng"]
    if len(rngs) == info.world_size:
        set_rng_state(rngs[info.rank])
    else:
        dist_utils.print0(f"note: checkpoint has RNG states for {len(rngs)} ranks, this run has "
                          f"{info.world_size}; reseeding")
        torch.manual_seed(cfg.train.seed + 1000 * info.rank + step)
    return state


def save_training(run_dir: Path, state: TrainState, parts: CheckpointParts, cfg: PretrainConfig, info) -> Path | None:
    """A checkpoint of ``state.step`` (written by rank 0, atomically, by :func:`save_checkpoint`; every rank takes
    part); sets ``state.last_saved`` and returns the checkpoint's path on rank 0."""
    rngs, data_state = [rng_state()], parts.stream.state_dict()
    if info.enabled:
        rngs = [None] * info.world_size
        torch.distributed.all_gather_object(rngs, rng_state())
        if cfg.data.shard_by == "document":  # each rank packs its own documents: keep every position
            states = [None] * info.world_size
            torch.distributed.all_gather_object(states, data_state)
            data_state = {"per_rank": states}
    fsdp, sd, optim_sd = dist_utils.uses_fsdp(info, cfg.distributed.strategy), None, None
    if fsdp:
        # FSDP2: every rank takes part in gathering the full (unsharded) model and optimizer state
        sd = full_state_dict(parts.raw_model)
        optim_sd = get_optimizer_state_dict(parts.raw_model, parts.optimizer,
                                            options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    path = None
    if info.is_main:
        train_state = {"step": state.step, "optimizer": optim_sd if fsdp else parts.optimizer.state_dict(),
                       "scheduler": parts.scheduler.state_dict(), "data": data_state, "rng": rngs,
                       "world_size": info.world_size, "config": to_dict(cfg), "run_id": state.run_id,
                       "sessions": state.session, "run_seconds": state.run_seconds()}
        path = save_checkpoint(run_dir, state.step, parts.raw_model, parts.tokenizer, train_state,
                               cfg.checkpoint.keep_last, state_dict=sd)
    if info.enabled:
        torch.distributed.barrier()
    state.last_saved = state.step
    return path
