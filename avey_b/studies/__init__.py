"""The paper's studies, reproduced as commands: ``avey-b ablation`` (:mod:`avey_b.studies.ablation`: pretrain each
architecture variant, evaluate, tabulate) and ``avey-b analyze weights`` (:mod:`avey_b.studies.analysis`: the
static matrices' statistics and heat maps of the appendix). Their options: :mod:`avey_b.studies.options`. The
ablation drives pretraining and the evaluation protocol both, so this room stands above ``training`` and
``evaluation``, beside the apps.
"""
