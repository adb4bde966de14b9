"""One table of the tasks ``avey-b finetune --task`` takes: each name -> its family and what implements it.

A :class:`Family` is tasks that share their options and their runner: your own data's tasks
(:data:`avey_b.finetuning.options.OWN_DATA`: one :class:`~avey_b.finetuning.options.OwnDataOptions`, each task a
``train(options) -> dict``) and the paper's benchmark cells (registered by the paper's protocol, whose options and
``Task`` classes are its own). :func:`register` adds a family's tasks to :data:`TASKS`; ``avey-b finetune`` reads
``--task``, parses the rest with that task's family's options (:class:`avey_b.finetuning.options.FinetuneParser`)
and runs it with the family's runner (:func:`avey_b.finetuning.run.run`).

The protocol builds on this room, never the reverse: this package imports nothing of the benchmarks, which register
themselves where their options are declared (the command line imports that module before ``finetune`` parses, see
``avey_b.cli``). Everything is named as ``"module:attribute"`` and imported when it runs, so that ``--help`` imports
no torch. Standard library only.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Family:
    """Tasks that share their options and their runner."""

    name: str
    """A short name (``own data``, ``benchmark``)."""
    title: str
    """The heading of the family's part of ``avey-b finetune --help``."""
    parser: str
    """``"module:function"`` returning the ``argparse`` parser of the family's options (a module that imports no
    torch)."""
    runner: str
    """``"module:function"``: ``run(args) -> exit code`` for a task of the family, with the arguments its parser
    gave."""


@dataclass(frozen=True)
class TaskEntry:
    """One task of the table."""

    name: str
    """What ``--task`` takes."""
    family: Family
    """Its options and runner."""
    target: str
    """``"module:attribute"``: what implements it — an own-data task's ``train(options) -> dict``, a benchmark's
    ``Task`` class."""

    def load(self) -> Any:
        """The implementation (imported now)."""
        return load(self.target, what=f"--task {self.name}")


#: Task name -> its entry, in the order registered (your own data's first, then the benchmarks' Table-3 order).
TASKS: dict[str, TaskEntry] = {}


def register(family: Family, targets: dict[str, str]) -> tuple[str, ...]:
    """Add ``family``'s tasks (name -> ``"module:attribute"``) to :data:`TASKS`; returns their names, in order.
    Registering the same task again (a module imported twice) changes nothing; a name another implementation holds
    is an error."""
    for name, target in targets.items():
        known = TASKS.get(name)
        if known is not None and (known.family.name, known.target) != (family.name, target):
            raise ValueError(f"task {name!r} is already registered, by the {known.family.name} family ({known.target})")
        TASKS[name] = TaskEntry(name, family, target)
    return tuple(targets)


def entry(name: str) -> TaskEntry:
    """The entry of task ``name``; an unknown name is an error that names the known ones."""
    try:
        return TASKS[name]
    except KeyError:
        raise ValueError(f"unknown task {name!r}; known tasks: {', '.join(TASKS)}") from None


def families() -> list[Family]:
    """The registered families, in the order their first task was registered."""
    return list({e.family.name: e.family for e in TASKS.values()}.values())


def names(family: Family) -> tuple[str, ...]:
    """The tasks of ``family``, in the order registered."""
    return tuple(n for n, e in TASKS.items() if e.family.name == family.name)


def load(target: str, what: str | None = None) -> Any:
    """The attribute that ``"module:attribute"`` names, its module imported now. A missing module of the package
    itself is named as a part this version lacks (``what``)."""
    module, _, attribute = target.partition(":")
    try:
        return getattr(importlib.import_module(module), attribute)
    except ModuleNotFoundError as e:
        if e.name != module or what is None:
            raise
        raise NotImplementedError(f"{what} is not part of this version of avey_b ({module} is missing)") from None
