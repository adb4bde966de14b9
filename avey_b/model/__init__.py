"""The Avey-B model, and only the model: its configuration and execution settings, the presets, the splits, the
ranker, the layers, the backbone and its heads, loading and saving (the authors' release format, the code saved
beside the weights).

It imports only the standard library, torch, transformers and itself (``tests/test_layout.py`` checks it), which is
what lets ``save_pretrained`` write these modules beside the weights for ``trust_remote_code=True``. Importing this
folder imports nothing: :mod:`avey_b.model.auto` registers the model with the transformers Auto classes.
"""

#: The names ``avey_b`` exports, all defined or imported by :mod:`avey_b.model.auto` (declared here, where importing
#: costs nothing, so that the package can name them without importing torch).
PUBLIC = (
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
    "AveyBForMultiVector",
    "AveyBForQueryLastScoring",
    "mean_pool",
    "DocumentState",
    "presets",
    "remote_code",  # `from avey_b import remote_code`: the loading code saved beside 0.1.0 checkpoints imports it
)
