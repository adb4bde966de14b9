"""Needle-in-a-haystack evaluation (``avey-b niah``; the paper's appendix "Long-Range Benchmark Results"), one
module per job, each importing only those listed before it:

- :mod:`.forms`: the two forms (``qa``, the authors' ``token-classification``), their defaults and headline scores;
- :mod:`.options`: the options of the three verbs, their parsers and descriptions (no torch);
- :mod:`.sets`: the generated sets (:mod:`avey_b.data.niah`) as the evaluation reads them;
- :mod:`.models`: the model to fine-tune, with the form's head, and its tokenizer;
- :mod:`.retrieval`: the ranker hook (Avey-B): which splits it paired with the needle's and the question's;
- :mod:`.answer_tokens`: the authors' form: labels, fine-tuning, predictions, token F1;
- :mod:`.needles`: the score by number of needles;
- :mod:`.scoring`: one test length of a fine-tuned model;
- :mod:`.tables`: summaries over seeds and learning rates, tables and plots;
- :mod:`.runs`: one resumable fine-tuning (model x task x form x learning rate x seed) and its scores;
- :mod:`.cli`: the ``generate`` / ``evaluate`` / ``report`` verbs.
"""
