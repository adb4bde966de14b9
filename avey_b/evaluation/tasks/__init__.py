"""The paper's 12 downstream benchmarks: task name -> :class:`~.base.Task` class (paper §5.1), read from the one
task table of ``avey-b finetune`` (:mod:`avey_b.finetuning.registry`), where :mod:`avey_b.evaluation.settings`
registers them."""

from __future__ import annotations

from avey_b.finetuning import registry

from ..settings import TASK_NAMES
from .base import DataFiles, RunConfig, Task

# Order = the columns of the paper's Table 3 (family by family).
TASKS: dict[str, type[Task]] = {name: registry.entry(name).load() for name in TASK_NAMES}
FAMILIES = ("SC", "TC", "QA", "IR")


def get_task(name: str) -> Task:
    try:
        return TASKS[name]()
    except KeyError:
        raise ValueError(f"unknown task {name!r}; known tasks: {', '.join(TASKS)}") from None


__all__ = ["TASKS", "FAMILIES", "get_task", "Task", "RunConfig", "DataFiles"]
