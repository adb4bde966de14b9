"""The Avey-B model, and only the model: its configuration and execution settings, the presets, the splits, the
ranker, the layers, the backbone and its heads, loading and saving (the authors' release format, the code saved
beside the weights).

It imports only the standard library, torch, transformers and itself (``tests/test_layout.py`` checks it), which is
what lets ``save_pretrained`` write these modules beside the weights for ``trust_remote_code=True``. Importing it
registers ``model_type="avey-b"`` with the transformers Auto classes.
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
