"""Inference with a saved Avey-B: the front door of the package, exported as ``avey_b.Encoder`` and
``avey_b.LoadOptions``.

* :mod:`avey_b.inference.options` — :class:`LoadOptions` (device, precision, threads, ONNX file) and its
  command-line flags; the standard library only, so that a verb's ``--help`` imports no torch.
* :mod:`avey_b.inference.encoder` — :class:`Encoder`: the model and its tokenizer loaded once;
  ``encode(texts or ids, outputs=..., chunks=...)`` (any of the vectors it gives, in one call), and the
  padded-batch calls under it (``vectors``, ``embed``, ``sparse``, ``token_vectors``, ``hidden_states``,
  ``logits``).
* :mod:`avey_b.inference.runtimes` — the eager PyTorch model and the ONNX model (onnxruntime) it runs in.
* :mod:`avey_b.inference.chunks` — :func:`chunk_ranges`: a tokenized text's late chunks as token and character
  ranges (the model's rule, :mod:`avey_b.model.chunks`, mapped to the tokenizer's offsets).
* :mod:`avey_b.inference.documents` — :class:`TextDocument` (``Encoder.document(text)``): a text that grows and
  changes, encoded in pieces (appends and edits recompute only the splits whose inputs changed).
* :mod:`avey_b.inference.states` — :class:`States`: the one state path (document states run without gradients in
  the encoder's precision, a block at a time, through the prefix cache) under ``Encoder.document``, ``avey-b embed``
  and ``avey-b serve``.
* :mod:`avey_b.inference.prefix` — :class:`PrefixCache`: document states found again by their token ids.

It stands on the model and the shared utilities (``utils/``, ``configs/``); the verbs of ``apps/`` (serve, embed,
export, analyze) load through it, and it imports none of them. Importing this folder imports nothing.
"""
