"""Fine-tuning on your own data: a classifier with your labels, a tagger with your tags, an embedding model, a
reranker, each from your files in one call.

    from avey_b.finetuning import OwnDataOptions, finetune

    record = finetune(OwnDataOptions(model="runs/quickstart/model", task="text-classification",
                                     train_file="reviews.csv", label_column="sentiment", output_dir="runs/sentiment"))
    print(record["metrics"], record["baseline"])    # held-out accuracy and macro-F1, and the majority class's

The same as ``avey-b finetune --task text-classification ...`` (:mod:`avey_b.finetuning.options` declares the
options once, for both). The output directory holds the model with its tokenizer, loadable by transformers'
``pipeline`` and Auto classes and by ``avey-b serve``.

This is the general fine-tuning room; the paper's benchmark protocol builds on it (its cells join the task table,
its settings the shared training settings), never the reverse. Modules: ``registry`` (the one task table of
``avey-b finetune``), ``settings`` (the training settings every fine-tuning shares), ``alignment`` (words and
sub-word tokens, for every tagger), ``options`` (your own data's options and tasks; these four import no torch),
``data`` (your files), ``common`` (the output directory, lengths, the learning rate, trainer settings, the
below-baseline line), ``progress`` (the bar while a run trains), ``loading`` (the base model with the task's new
head, its config's special ids), ``run`` (the verb), and one module per task (``classification``, ``tagging``,
...).
"""

from __future__ import annotations

from typing import Any

from .options import OWN_TASKS, OwnDataOptions, default_lr


def finetune(options: OwnDataOptions) -> dict[str, Any]:
    """Train ``options.task`` on ``options.train_file`` and score it on held-out rows; returns the results record
    (also ``<output_dir>/results.json``). See :func:`avey_b.finetuning.run.finetune`."""
    from .run import finetune as run_finetune

    return run_finetune(options)


__all__ = ["OWN_TASKS", "OwnDataOptions", "default_lr", "finetune"]
