"""What a fine-tuning run shows while it trains: one progress bar with an ETA (:class:`TrainingProgress`, an
:class:`avey_b.utils.progress.Progress`: a tqdm bar on a terminal, a plain line every 30 seconds in a log) in place
of the dictionary of the loss, the gradient norm and the learning rate that transformers' ``PrinterCallback`` prints
every few steps when its own bars are off (:func:`show_progress`)."""

from __future__ import annotations

from transformers import PrinterCallback, TrainerCallback

from avey_b.utils.progress import Progress


class TrainingProgress(TrainerCallback):
    """A ``TrainerCallback``: the optimizer steps as a :class:`Progress` (done/total, rate, ETA, the last logged
    loss), from the step a resumed run starts at."""

    def __init__(self, desc: str):
        self.desc = desc
        self.bar: Progress | None = None
        self.loss: float | None = None

    def on_train_begin(self, args, state, control, **kwargs):
        self.bar = Progress(state.max_steps or None, self.desc, unit="step", initial=state.global_step)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "loss" in logs:
            self.loss = float(logs["loss"])

    def on_step_end(self, args, state, control, **kwargs):
        if self.bar is not None:
            self.bar.update(state.global_step - self.bar.n, **({} if self.loss is None else {"loss": self.loss}))

    def on_train_end(self, args, state, control, **kwargs):
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def show_progress(trainer, desc: str):
    """``trainer`` (transformers' ``Trainer`` or a subclass, built with ``disable_tqdm=True``) showing one
    :class:`TrainingProgress` instead of printing its logs."""
    trainer.remove_callback(PrinterCallback)
    trainer.add_callback(TrainingProgress(desc))
    return trainer
