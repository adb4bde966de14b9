"""Avey-B: the attention-free bidirectional encoder (ICLR 2026) for PyTorch and Hugging Face transformers.

Importing the package registers ``model_type="avey-b"`` with the transformers Auto classes.
"""

from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForMaskedLM,
    AutoModelForMultipleChoice,
    AutoModelForQuestionAnswering,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
)

from . import presets
from .configuration import AveyBConfig
from .execution import ExecutionSettings
from .heads import (
    AveyBForMaskedLM,
    AveyBForMultipleChoice,
    AveyBForQuestionAnswering,
    AveyBForSentenceEmbedding,
    AveyBForSequenceClassification,
    AveyBForTokenClassification,
    mean_pool,
)
from .modeling import AveyBModel, AveyBPreTrainedModel

__version__ = "0.1.0"

AutoConfig.register(AveyBConfig.model_type, AveyBConfig, exist_ok=True)
for _auto, _cls in (
    (AutoModel, AveyBModel),
    (AutoModelForMaskedLM, AveyBForMaskedLM),
    (AutoModelForSequenceClassification, AveyBForSequenceClassification),
    (AutoModelForTokenClassification, AveyBForTokenClassification),
    (AutoModelForQuestionAnswering, AveyBForQuestionAnswering),
    (AutoModelForMultipleChoice, AveyBForMultipleChoice),
):
    _auto.register(AveyBConfig, _cls, exist_ok=True)

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
