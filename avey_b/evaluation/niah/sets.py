"""The sets ``avey-b niah generate`` writes, as the evaluation reads them: one ``train_<L>.jsonl`` /
``test_<L>.jsonl`` per length in each task's directory (:mod:`avey_b.data.niah`, :mod:`avey_b.data.niah_authors`),
or, where the data directory holds no folder of the task, the authors' layout beside it
(``{word|number}_<L>_controllable/{train,test}.jsonl``: their ``gen_niah.py``'s output, or
``--generator authors-replay``'s; :func:`avey_b.data.niah_replay.read_authors_set`)."""

from __future__ import annotations

import os
import re
from typing import Any

from avey_b.data import niah_replay
from avey_b.utils.records import read_jsonl


def _authors_layout(task_dir: str) -> bool:
    """Whether ``task_dir`` (``DATA/<task>``) is absent and ``DATA`` holds the authors' folders of the task."""
    data, task = os.path.split(os.path.normpath(task_dir))
    return (not os.path.isdir(task_dir) and task in niah_replay.NEEDLE_KIND
            and bool(niah_replay.authors_lengths(data, task)))


def set_path(task_dir: str, split: str, length: int) -> str:
    """The file of one split (``train`` / ``test``) at one length (in tokens; words for the authors' sets), in the
    library's layout or, when only that is there, the authors' (module docstring)."""
    if _authors_layout(task_dir):
        data, task = os.path.split(os.path.normpath(task_dir))
        return niah_replay.authors_set_path(data, task, split, length)
    return os.path.join(task_dir, f"{split}_{length}.jsonl")


def read_set(path: str) -> list[dict[str, Any]]:
    """The rows of one set file (the authors' layout's with the library's fields added); a missing one is named,
    with the command that writes it."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"NIAH file not found: {path} (run `avey-b niah generate` first)")
    if os.path.basename(path) in ("train.jsonl", "test.jsonl"):
        return niah_replay.read_authors_set(path)
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
    if _authors_layout(task_dir):
        found = niah_replay.authors_lengths(*os.path.split(os.path.normpath(task_dir)))
    else:
        found = sorted(int(m.group(1)) for f in os.listdir(task_dir)
                       if (m := re.match(r"test_(\d+)\.jsonl$", f)))
    if wanted is None:
        return found
    missing = [n for n in wanted if n not in found]
    if missing:
        raise FileNotFoundError(f"{task_dir}: no test set for lengths {missing} (found {found})")
    return wanted

