"""Avey-B: the attention-free bidirectional encoder (ICLR 2026) for PyTorch and Hugging Face transformers.

Importing the package registers ``model_type="avey-b"`` with the transformers Auto classes.

The package's folders: ``model/`` (the model, and only the model), ``utils/`` (files, records, progress, devices,
batching, clusters, model specs), ``configs/`` (configs as data and the shipped recipes), ``data/``, ``training/``,
``evaluation/``, ``benchmarking/``, ``apps/`` (serve, embed, export, quantize, convert, analyze, demo, ablation) and
``cli.py``, the one command line.
"""

from .model import (
    AveyBConfig,
    AveyBForMaskedLM,
    AveyBForMultipleChoice,
    AveyBForQuestionAnswering,
    AveyBForSentenceEmbedding,
    AveyBForSequenceClassification,
    AveyBForTokenClassification,
    AveyBModel,
    AveyBPreTrainedModel,
    ExecutionSettings,
    mean_pool,
    presets,
    remote_code,  # noqa: F401  (`from avey_b import remote_code`: the code saved beside checkpoints)
)

__version__ = "0.1.0"

__all__ = [
    "AveyBConfig",
    "ExecutionSettings",
    "AveyBModel",
    "AveyBPreTrainedModel",
    "AveyBForMaskedLM",
    "AveyBForSequenceClassification",
    "AveyBForTokenClassification",
    "AveyBForQuestionAnswering",
    "AveyBForMultipleChoice",
    "AveyBForSentenceEmbedding",
    "mean_pool",
    "presets",
]
