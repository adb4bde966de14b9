"""Registry of the paper's 12 downstream benchmarks: task name -> :class:`~.base.Task` class (paper §5.1)."""

from __future__ import annotations

from .base import DataFiles, RunConfig, Task
from .ir import MLDR, MSMARCO, NQ
from .qa import ReCoRD, SQuAD, SQuADv2
from .sc import MNLI, QQP, SST2
from .tc import UNER, CoNLL2003, OntoNotes

# Order = the columns of the paper's Table 3 (family by family).
TASKS: dict[str, type[Task]] = {
    cls.name: cls
    for cls in (MNLI, QQP, SST2, CoNLL2003, OntoNotes, UNER, ReCoRD, SQuAD, SQuADv2, MLDR, MSMARCO, NQ)
}
FAMILIES = ("SC", "TC", "QA", "IR")


def get_task(name: str) -> Task:
    try:
        return TASKS[name]()
    except KeyError:
        raise ValueError(f"unknown task {name!r}; known tasks: {', '.join(TASKS)}") from None


__all__ = ["TASKS", "FAMILIES", "get_task", "Task", "RunConfig", "DataFiles"]
