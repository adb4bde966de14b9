"""The sets ``avey-b niah generate`` writes (:mod:`avey_b.data.niah`), as the evaluation reads them: one
``train_<L>.jsonl`` / ``test_<L>.jsonl`` per length in each task's directory."""

from __future__ import annotations

import os
import re
from typing import Any

from avey_b.utils.records import read_jsonl


def set_path(task_dir: str, split: str, length: int) -> str:
    """The file of one split (``train`` / ``test``) at one length (in tokens)."""
    return os.path.join(task_dir, f"{split}_{length}.jsonl")


def read_set(path: str) -> list[dict[str, Any]]:
    """The rows of one set file; a missing one is named, with the command that writes it."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"NIAH file not found: {path} (run `avey-b niah generate` first)")
    return read_jsonl(path)


def squad_examples(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """NIAH rows -> the QA harness's example format (``answers`` as a list of {text, start})."""
    return [
        {
            "id": r["id"],
            "question": r["question"],
            "context": r["context"],
            "answers": [
                {"text": t, "start": s}
                for t, s in zip(r["answers"]["text"], r["answers"]["answer_start"], strict=True)
            ],
        }
        for r in rows
    ]


def available_lengths(task_dir: str, wanted: list[int] | None) -> list[int]:
    """The test lengths to score: ``wanted`` (each must have its ``test_<L>.jsonl``), or every one found."""
    found = sorted(int(m.group(1)) for f in os.listdir(task_dir) if (m := re.match(r"test_(\d+)\.jsonl$", f)))
    if wanted is None:
        return found
    missing = [n for n in wanted if n not in found]
    if missing:
        raise FileNotFoundError(f"{task_dir}: no test set for lengths {missing} (found {found})")
    return wanted

