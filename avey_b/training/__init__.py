"""Masked-LM pretraining: run configuration (``config``), LR schedules (``schedule``), checkpoints
(``checkpoint``), distributed helpers (``distributed``), metrics (``metrics``) and the loop (``pretrain``)."""
