"""The settings of a ``paper``-protocol cell: EncodEval's, setting for setting (paper §5.1).

The paper "adopt[s] the evaluation protocol of Boukhlef et al." (EncodEval), and the authors' release ships that
harness with one YAML file per task x learning rate x seed. The files of a task and learning rate differ only in
``seed`` and ``output_subdir``, and the files of a task hold the same settings at every learning rate but one
(ReCoRD at 2e-5, below); they are, per task (``PAPER_SETTINGS`` below, :func:`protocol_settings` for a rate):

* every task: transformers' ``TrainingArguments`` with ``adam_beta1: 0.9``, ``adam_beta2: 0.95``,
  ``adam_epsilon: 1e-5``, ``weight_decay: 0.1``, ``lr_scheduler_type: linear``, ``warmup_ratio: 0.1``, the
  Trainer's default gradient clipping (``max_grad_norm: 1.0``); the model loaded with ``dtype: bfloat16`` and
  trained with ``bf16: true`` (autocast); ``max_length:`` null (no truncation beyond the model's own limit);
* SC (``sst2``, ``qqp``, ``mnli_m``): ``train_batch_size: 32``, per device 32, eval 32, 1 epoch;
* TC (``conll2003_en``, ``ontonotes``, ``uner_en``): the same;
* QA (``squad``, ``squad_v2``, ``record``): a 2-label token classifier, ``train_batch_size: 32`` as per-device
  16 x 2 accumulation (ReCoRD 4 x 8, but 16 x 2 in its files at lr 2e-5: ``PAPER_SETTINGS_BY_LR``), eval batch 16
  (ReCoRD 4, at every rate), 4 epochs;
* IR: one fine-tuning on ``msmarco_pairs`` (``per_device_train_batch_size: 16``, ``max_steps: 1000``), scored
  zero-shot on ``mldr_en`` (eval batch 4), ``msmarco`` and ``nq`` (eval batch 512).

The sweep: the paper's text reports learning rates {2e-5, 6e-5, 1e-4, 5e-4} x 10 seeds, and the release's driver
(``run.py``) runs exactly those (the default, ``GRIDS["paper"]``); the config files the release ships cover more,
{2e-5, 6e-5, 1e-4, 5e-4, 1e-3, 2e-3} x 20 seeds (``GRIDS["encodeval"]``, ``avey-b evaluate --grid encodeval``),
and NIAH's only 1e-4 and 5e-4 (``avey-b niah evaluate --protocol paper`` runs those x 10 seeds).

Beyond the optimizer settings, a ``paper`` cell follows EncodEval in what it reads and how it scores:

* inputs cut at ``round(0.99 x max_position_embeddings)`` for every model (EncodEval's 1% buffer), Avey-B included:
  the authors' release states a length in its config (``AveyConfig(context_len=512)``, saved as
  ``max_position_embeddings``), kept as ``AveyBConfig.context_len`` (a checkpoint of ours states none and is not
  cut); each ``results.json`` records the limit and its rule (``input_limit``). The standard protocol and
  ``avey-b finetune`` without ``--protocol paper`` never cut Avey-B;
* every model loaded with ``attn_implementation="eager"``; retrieval pools the last token when the model's config
  sets ``retrieval_pooling: eos`` (:mod:`.ir_paper`);
* Table 3's data as the Hub holds it: CoNLL-2003's ``words``/``ner`` and UNER's ``ner_tags`` columns, ClassLabel
  names, integer tags without names as EncodEval's ids; QA rows without ``id`` or answer kept, SQuAD's white space
  stripped without moving the answer offsets, misplaced offsets counted, not refused (:mod:`.tasks.tc`,
  :mod:`.tasks.qa`);
* weight decay on the parameters transformers 4.50's Trainer decays (the release pins 4.50): all but LayerNorm
  modules and names holding ``bias``, ``layernorm`` or ``rmsnorm``, so Avey-B's RMSNorm weights are decayed
  (transformers 5 exempts them; the standard protocol follows 5: :func:`decayed_parameter_names`), in every cell:
  the library's loop and retrieval's sentence-transformers trainer alike (:mod:`.ir_paper`);
* retrieval's input limit includes the tokenizer's stated ``model_max_length`` (EncodEval's SentenceTransformer),
  and its documents are formatted from the title and text as they are, unstripped (:mod:`.ir_paper`, :mod:`.tasks.ir`);
* NIAH on the authors' sets themselves (their ``gen_niah.py`` replayed byte for byte, :mod:`avey_b.data.niah_replay`),
  inputs cut at ``round(0.99 x`` the stated length``)`` like every task here (ModernBERT 8,110, NeoBERT 4,055 tokens),
  not skipped;
* QA scored as EncodEval's code computes it: predictions at the padding of its scoring batches (16, ReCoRD 4)
  counted (``f1``; ``f1_real_tokens`` beside it; :meth:`.tasks.qa.QuestionAnsweringTask._paper_scores`).

What only the authors' data or checkpoints could settle, and what was done:

=====================================================  ==============================================================
open point                                             what the library does
=====================================================  ==============================================================
the feature type of ``hgissbkh/conll2003-en``'s        ClassLabel names are read in their order; plain integers are
``ner`` (and its class order)                          used as ids with EncodEval's ``num_labels`` (9, 37, 7), as
                                                       EncodEval does; the standard protocol refuses unnamed ids
whether the released ``config.json`` holds             read when present; absent, ``context_len`` is 512 (AveyConfig's
``max_position_embeddings`` and ``retrieval_pooling``  default, what EncodEval read) and the pooling is the mean
the padding side of the scoring batches                always right; EncodEval pads on the tokenizer's side, which is
                                                       the right for every model of Table 3
an explicit ``max_length`` (a shrunk run)              used as given; EncodEval takes 99% of ``min(model limit,
                                                       max_length)``, but every one of its configs sets ``null``
which 15 of the coupled model's 30 static layers the   every second, static layers 2, 4, ..., 30 (1-based): a
paper's weight-statistics table shows                  uniform choice holding the layers 14, 22, 24, 26 its figure
                                                       names; the other parity (1, 3, ..., 29) holds the same
                                                       numbers under 0-based labels (0, 2, ..., 28), which the paper
                                                       does not state
NQ's test queries                                      all of them; EncodEval scores a random half per run
                                                       (``random.sample`` after ``set_seed(seed)``, the rest its
                                                       validation): which half depends on every Python draw between
                                                       the two, which only running its harness shows
bf16 while scoring                                     weights in bf16 and bf16 autocast, for every task; EncodEval's
                                                       Trainer-scored tasks predict through the model accelerate
                                                       wrapped for training (autocast), but its IR scoring encodes
                                                       with ``SentenceTransformer.encode`` outside the Trainer:
                                                       plain bf16 weights there (a rounding-level difference)
which word counts made the paper's NIAH 64K and 96K    not in the release (its generator counts words, the paper's
columns                                                columns tokens); ``niah generate --lengths`` takes any
                                                       word count, by the same stream
the authors' efficiency runs                           ``avey-b bench run --protocol authors`` runs their protocol
                                                       (:mod:`avey_b.benchmarking.options`), in their dtype: their
                                                       scripts load bf16 weights and run under bf16 autocast
                                                       (``--dtype bfloat16-autocast``, its default); it times this
                                                       library's Avey-B in the release's shape, and with
                                                       ``--release-code DIR`` the release's own ``modeling_avey.py``
                                                       beside it (:mod:`avey_b.benchmarking.release_code`); NeoBERT
                                                       is the library's stand-in, not their packed flash-attn path
the release's padding (Avey-B ignores                  reproduced: ``AveyBConfig.padding="release"`` (zero rows pad
``attention_mask``: split and batch padding are        the last split, batch padding is a token, the SC head averages
mixed like tokens)                                     every position), equal to the release's forward on short,
                                                       padded and batched inputs; the authors' checkpoints run it
                                                       (``avey_b_padding``), each cell records it (``avey_b``)
the order of exactly tied splits under that padding    the nearer split first (the library's rule); the release takes
(splits holding the pad token tie)                     ``torch.topk``'s order, implementation-defined (CPU: the top 3
                                                       of 5 equal scores are 2, 4, 3), which no rule reproduces; only
                                                       inputs of more than one split (256 tokens) rank at all
whether transformers 4.50's Trainer (EncodEval's)      it does: its ``training_step`` divides by the accumulation
sums the micro-batch losses of the release's heads     steps only ``if not self.model_accepts_loss_kwargs``, and a
(``forward(..., **kwargs)``)                           toy model's grad_norm at accumulation 2 doubles with
                                                       ``**kwargs`` (1.373 -> 2.747) and not without
                                                       (benchmarks/paper_protocol_cpu/accumulation_450.py); so Avey-B
                                                       sums its micro-batch means (``avey_b_accumulation``: QA x2,
                                                       ReCoRD x8, x2 at 2e-5; NIAH x32) before the 1.0 clip; the
                                                       baselines' token heads take no ``**kwargs`` in 4.50 and keep
                                                       means
=====================================================  ==============================================================

The ``standard`` protocol has no table: its cells take :class:`RunConfig`'s defaults. In both, what a suite or the
command line sets explicitly wins over the table (:func:`run_config`), so a run can be shrunk.
"""

from __future__ import annotations

import math
from typing import Any

from avey_b.utils.model_spec import is_avey_b

from .settings import GRIDS, RunConfig
from .tasks import TASKS
from .tasks.ir import MSMARCOPairs

_EVERY_TASK: dict[str, Any] = {
    "adam_beta1": 0.9, "adam_beta2": 0.95, "adam_epsilon": 1e-5, "weight_decay": 0.1,
    "warmup_ratio": 0.1, "grad_clip": 1.0,
    "weights_dtype": "bfloat16", "precision": "bf16",
    "max_length": None,
}
_BY_FAMILY: dict[str, dict[str, Any]] = {
    "SC": {"batch_size": 32, "grad_accumulation": 1, "eval_batch_size": 32, "epochs": 1.0, "max_steps": None},
    "TC": {"batch_size": 32, "grad_accumulation": 1, "eval_batch_size": 32, "epochs": 1.0, "max_steps": None},
    "QA": {"batch_size": 32, "grad_accumulation": 2, "eval_batch_size": 16, "epochs": 4.0, "max_steps": None},
    "IR": {"batch_size": 16, "grad_accumulation": 1, "eval_batch_size": 512, "epochs": None, "max_steps": 1000,
           "query_max_length": None},
}
_BY_TASK: dict[str, dict[str, Any]] = {
    "record": {"grad_accumulation": 8, "eval_batch_size": 4},  # per device 4, accumulated to 32
    "mldr": {"eval_batch_size": 4},
}
#: (task, learning rate) -> what that rate's files set apart from the task's other rates: ReCoRD's files at 2e-5 run
#: ``per_device_train_batch_size: 16`` (accumulation 2) where its other rates run 4 (accumulation 8).
PAPER_SETTINGS_BY_LR: dict[tuple[str, float], dict[str, Any]] = {
    ("record", 2e-5): {"grad_accumulation": 2},
}

#: task -> the RunConfig fields a ``paper``-protocol cell of that task takes from EncodEval; ``msmarco_pairs`` is
#: the retrieval fine-tuning the three IR benchmarks are scored with (:mod:`.ir_paper`), not a benchmark itself.
PAPER_SETTINGS: dict[str, dict[str, Any]] = {
    name: _EVERY_TASK | _BY_FAMILY[cls.family] | _BY_TASK.get(name, {})
    for name, cls in (TASKS | {MSMARCOPairs.name: MSMARCOPairs}).items()
}


def protocol_settings(task: str, protocol: str, lr: float | None = None) -> dict[str, Any]:
    """The RunConfig fields the protocol sets for ``task`` at learning rate ``lr`` (a copy; empty for
    ``standard``): the task's settings, then what the files of that rate set apart (:data:`PAPER_SETTINGS_BY_LR`;
    ``lr=None``: the task's settings alone)."""
    if task not in PAPER_SETTINGS:
        raise ValueError(f"unknown task {task!r}; known tasks: {', '.join(TASKS)}")
    if protocol == "paper":
        by_lr = [v for (name, rate), v in PAPER_SETTINGS_BY_LR.items()
                 if name == task and lr is not None and math.isclose(rate, lr, rel_tol=1e-9)]
        return dict(PAPER_SETTINGS[task]) | (by_lr[0] if by_lr else {})
    if protocol == "standard":
        return {}
    raise ValueError(f"protocol must be 'standard' or 'paper', got {protocol!r}")


def run_config(task: str, given: dict[str, Any]) -> RunConfig:
    """A cell's settings: RunConfig's defaults < the protocol's table for ``task`` at ``given["lr"]`` < ``given``
    (what a suite or the command line set explicitly, ``protocol`` included)."""
    return RunConfig(**(protocol_settings(task, given.get("protocol", "standard"), given.get("lr")) | given))


def grid(name: str) -> tuple[list[float], int]:
    """The learning rates and the number of seeds of a named sweep grid."""
    if name not in GRIDS:
        raise ValueError(f"unknown grid {name!r}; known: {', '.join(GRIDS)}")
    lrs, seeds = GRIDS[name]
    return list(lrs), seeds


#: Parameters transformers' Trainer exempts from weight decay (``Trainer.get_decay_parameter_names``, transformers
#: 5): those of LayerNorm modules and those whose name holds a bias or a norm.
NO_DECAY_PATTERNS = [r"bias", r"layernorm", r"rmsnorm", r"(?:^|\.)norm(?:$|\.)", r"_norm(?:$|\.)"]
#: The same rule in transformers 4.50, which the authors' release pins: LayerNorm modules and names holding "bias",
#: "layernorm" or "rmsnorm" (lower-cased), so a norm module named ``norm`` that is not a LayerNorm (Avey-B's
#: RMSNorm, the release's ``layers.i.norm``) is decayed.
NO_DECAY_PATTERNS_4_50 = [r"bias", r"layernorm", r"rmsnorm"]


def decayed_parameter_names(model, protocol: str) -> list[str]:
    """The names of ``model``'s parameters that AdamW's weight decay applies to, by transformers' Trainer's rule:
    under ``paper`` the rule of transformers 4.50, the release's pin (:data:`NO_DECAY_PATTERNS_4_50`), else
    transformers 5's (:data:`NO_DECAY_PATTERNS`). One rule for every cell of a protocol: the fine-tuning loop's
    optimizer (:func:`.finetune.finetune_optimizer`) and the retrieval trainer's (:func:`.ir_paper.train_pairs`)."""
    from torch import nn
    from transformers.trainer_pt_utils import get_parameter_names

    patterns = NO_DECAY_PATTERNS_4_50 if protocol == "paper" else NO_DECAY_PATTERNS
    return get_parameter_names(model, [nn.LayerNorm], patterns)


def avey_b_settings(model_config, cfg: RunConfig) -> dict[str, str] | None:
    """How an Avey-B cell runs its padding and its accumulated steps, ``{"padding": ..., "accumulation": ...}``
    (recorded in its ``results.json`` as ``avey_b``); None for any other model, which masks its padding and averages
    its micro-batches. The cell's ``avey_b_padding`` / ``avey_b_accumulation`` win; else, under ``paper``, the
    release's padding for the authors' checkpoints (the ``avey_b1`` parameterization, ``enricher_layout:
    release``; ours keep their own) and summed micro-batch means for every Avey-B, as EncodEval's Trainer computed
    them (the table above); under ``standard``, the checkpoint's own padding and means."""
    if not is_avey_b(model_config):
        return None
    paper = cfg.protocol == "paper"
    authors = getattr(model_config, "enricher_layout", None) == "release"
    padding = cfg.avey_b_padding or ("release" if paper and authors else model_config.padding)
    return {"padding": padding, "accumulation": cfg.avey_b_accumulation or ("sum" if paper else "mean")}
