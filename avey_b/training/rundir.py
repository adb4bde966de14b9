"""Run directories that never lose or mix a run.

* A fresh run needs an empty (or missing) ``run_dir``. One that already holds something is an error that says
  what is there and offers ``--resume`` (continue it) or ``--overwrite``, which *moves* the old run aside to
  ``<run_dir>.old-<time>`` — nothing is ever deleted.
* Every run has an id, stored in its checkpoints; pruning (``checkpoint.keep_last``) only removes the current
  run's older checkpoints.
* ``--resume`` is checked: settings that cannot change in the middle of a run (model, tokenizer, data,
  optimizer, batch, seed) must equal the checkpoint's, or the run stops with the differing fields; the others
  (``MUTABLE``: step budget, logging, evaluation and checkpoint cadence, threads, ...) are applied and recorded.
* ``history.jsonl`` in the run dir records every start, resume (with the changed settings) and overwrite.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

from avey_b.utils.records import append_jsonl, utc_timestamp

#: Settings a resumed run may change (dotted keys, or prefixes ending in "."): applied and recorded.
MUTABLE = ("run_dir", "train.max_steps", "train.max_tokens", "train.max_minutes", "train.threads", "train.device",
           "train.peak_flops", "train.compile", "data.num_workers", "eval.", "checkpoint.", "logging.",
           "distributed.")
HISTORY = "history.jsonl"


class RunDirError(RuntimeError):
    """A run directory that would lose or mix runs, or a resume with changed settings (the message says which)."""


def new_run_id() -> str:
    return uuid.uuid4().hex[:12]


def describe_contents(run_dir: Path) -> str:
    """What a run directory holds, in a few words (``config.yaml, metrics.jsonl, checkpoints/ (step 10 … 30)``)."""
    parts = []
    for entry in sorted(run_dir.iterdir()):
        if entry.name == "checkpoints" and entry.is_dir():
            steps = sorted(p.name for p in entry.iterdir() if p.name.startswith("step_"))
            span = f"{steps[0]} … {steps[-1]}" if len(steps) > 1 else (steps[0] if steps else "empty")
            parts.append(f"checkpoints/ ({span})")
        else:
            parts.append(entry.name + ("/" if entry.is_dir() else ""))
    return ", ".join(parts)


def _aside(run_dir: Path) -> Path:
    stamp = utc_timestamp().replace(":", "").replace("-", "")
    target = run_dir.with_name(f"{run_dir.name}.old-{stamp}")
    n = 1
    while target.exists():
        n += 1
        target = run_dir.with_name(f"{run_dir.name}.old-{stamp}-{n}")
    return target


def prepare(run_dir: Path, *, resuming: bool, overwrite: bool, act: bool = True) -> Path | None:
    """Make ``run_dir`` ready for a run. Returns where an old run was moved (``--overwrite``), else None.

    ``act=False`` only checks (ranks other than the first of a distributed run)."""
    if resuming or not run_dir.exists() or not any(run_dir.iterdir()):
        return None
    if not overwrite:
        raise RunDirError(
            f"{run_dir} already holds a run ({describe_contents(run_dir)}). Pass --resume to continue it, or "
            f"--overwrite to start afresh after moving it aside to {run_dir.name}.old-<time> (nothing is deleted); "
            "or choose another run_dir."
        )
    target = _aside(run_dir)
    if act:
        os.replace(run_dir, target)
    return target


def flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out = {}
    for key, value in tree.items():
        if isinstance(value, dict) and key != "overrides":
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[prefix + key] = value
    return out


def _mutable(key: str, mutable: tuple[str, ...] = MUTABLE) -> bool:
    return any(key == m or (m.endswith(".") and key.startswith(m)) for m in mutable)


def check_resume(saved: dict[str, Any] | None, requested: dict[str, Any],
                 mutable: tuple[str, ...] = MUTABLE) -> dict[str, list]:
    """The changed settings of a resumed run (``{key: [checkpoint value, requested value]}``), all of them ones
    that may change (``mutable``: dotted keys, or prefixes ending in "."; pretraining's :data:`MUTABLE` by
    default); a change to any other setting raises :class:`RunDirError` listing every such field."""
    if saved is None:  # a checkpoint from before configs were stored in it: nothing to compare
        return {}
    old, new = flatten(saved), flatten(requested)
    changed = {k: [old.get(k), new.get(k)] for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)}
    frozen = {k: v for k, v in changed.items() if not _mutable(k, mutable)}
    if frozen:
        diff = "\n".join(f"  {k}: {a!r} (checkpoint) -> {b!r} (requested)" for k, (a, b) in frozen.items())
        raise RunDirError("--resume with settings that cannot change in the middle of a run:\n" + diff +
                          "\nresume with the checkpoint's values, or start a new run (another run_dir, or --overwrite)")
    return changed


def record(run_dir: Path, event: str, **fields: Any) -> None:
    """Append one event (``start``, ``resume``, ``overwrite``) to the run's history."""
    append_jsonl(run_dir / HISTORY, {"time": utc_timestamp(), "event": event, **fields})
