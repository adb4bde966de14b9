"""The CPU threads of ``avey-b finetune`` on your own data: its start line (:func:`start`: the task, the model and
:func:`avey_b.utils.device.start_runtime`'s line: device, precision, threads, a note when other processes keep the
CPUs busy) and the thread count fitted to the machine while transformers' ``Trainer`` (or a sentence-transformers
trainer) steps (:func:`watch`: a :class:`ThreadsCallback` feeding each optimizer step's time to a
:class:`avey_b.utils.shared_cpu.ThreadTuner`). A benchmark cell's loop does the same in
:func:`avey_b.evaluation.finetune.train_model`."""

from __future__ import annotations

import sys
import time

from transformers import TrainerCallback

from avey_b.utils.device import start_runtime
from avey_b.utils.shared_cpu import ThreadTuner, thread_tuner

from .options import OwnDataOptions


def start(options: OwnDataOptions) -> int:
    """Set the CPU threads of ``options`` (auto or a count) and print the start line on stderr; the count."""
    return start_runtime(options.device, options.precision, options.threads,
                         what=f"finetune {options.task} of {options.model}")[2]


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def watch(trainer, options: OwnDataOptions) -> None:
    """Add a :class:`ThreadsCallback` to ``trainer`` where the threads can change (CPU training on several)."""
    import torch

    tuner = thread_tuner(trainer.args.device, torch.get_num_threads(), options.threads, _say, "training",
                         "run it again with --threads 1 (or one per idle core); --resume continues from the last "
                         "checkpoint", unit="steps")
    if tuner is not None:
        trainer.add_callback(ThreadsCallback(tuner))


class ThreadsCallback(TrainerCallback):
    """Each optimizer step's time (``on_step_begin`` to ``on_step_end``: forwards, backwards and the update; logging,
    saving and evaluation left out) to ``tuner``, one unit of work per step."""

    def __init__(self, tuner: ThreadTuner):
        self.tuner, self._t0 = tuner, None

    def on_step_begin(self, args, state, control, **kwargs):
        self._t0 = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        if self._t0 is not None:
            self.tuner.add(1.0, time.perf_counter() - self._t0)
            self._t0 = None
