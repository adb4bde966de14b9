"""Downstream evaluation: the paper's fine-tuning protocol (paper §5.1) and long-context probes.

``finetune`` runs one cell (model x task x learning rate x seed), ``sweep`` runs the grid, ``report``
aggregates ``results.json`` files into the paper's Table 3 layout. Importing this package imports nothing
heavy; the task modules import ``datasets`` / ``seqeval`` only when they need them.
"""
