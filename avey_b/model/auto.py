"""Importing this module registers ``model_type="avey-b"`` with the transformers Auto classes (``AutoConfig``,
``AutoModel``, ``AutoModelForMaskedLM``, ...), so that they load a saved Avey-B with this package's classes; ``import
avey_b`` imports it. It is not saved beside the weights: there, the config's ``auto_map`` does the same."""

# ruff: noqa: F401  (this module re-exports the public names: __all__ is avey_b.model.PUBLIC)
from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForMaskedLM,
    AutoModelForMultipleChoice,
    AutoModelForQuestionAnswering,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
)

from . import PUBLIC, presets, remote_code  # noqa: F401  (remote_code: re-exported by avey_b)
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
from .multivector import AveyBForMultiVector
from .query_scoring import AveyBForQueryLastScoring
from .streaming import DocumentState

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

__all__ = list(PUBLIC)
