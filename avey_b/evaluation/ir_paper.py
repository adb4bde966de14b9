"""IR as the paper ran it: one fine-tuning on MS MARCO pairs, three zero-shot scorings (paper §5.1, EncodEval).

The paper adopts the evaluation protocol of EncodEval (§5.1). Its retrieval configs (``IR/msmarco_pairs`` and
``IR/{mldr_en,msmarco,nq}_msmarco_pairs`` of the authors' release) fine-tune each model once per learning rate and
seed on MS MARCO (query, positive passage) pairs, and score MLDR, MS MARCO and NQ with that one model, without
training on them. Under ``--protocol paper`` the library does the same:

- **Training** (:func:`train_pairs`) is sentence-transformers' own: the model ``SentenceTransformer(MODEL)`` builds
  (the encoder and masked mean pooling, as in EncodEval), ``SentenceTransformerTrainer`` and
  ``CachedMultipleNegativesRankingLoss(mini_batch_size=256)``: in-batch negatives over cosine similarities times
  ``RunConfig.ir_scale`` (20, the loss's default), the gradient cache only bounding memory. Optimizer and schedule
  come from the cell's ``RunConfig`` (EncodEval: batch 16, 1,000 steps, AdamW β = (0.9, 0.95), ε = 1e-5, weight
  decay 0.1 on the parameters every other cell decays, by transformers 4.50's rule, the release's pin
  (:func:`~avey_b.evaluation.protocol.decayed_parameter_names`: biases exempt, RMSNorm weights decayed; the
  installed trainer's own rule would exempt them), linear decay after 10% warm-up,
  gradient norm clipped at 1, weights in bf16 and bf16 autocast). Inputs read ``Query: …`` and ``Document: …``
  and are tokenized as EncodEval's collator does: the text and the tokenizer's end token (its unknown token when
  it has none: :func:`~avey_b.evaluation.tasks.base.end_token`), no other special tokens, truncated at 99% of the
  length limit (:func:`~avey_b.evaluation.tasks.base.buffered`), padded with the tokenizer's pad token, else its end
  token (EncodEval's SentenceTransformer keeps its tokenizer as loaded). The authors' checkpoints run the release's
  padding, in training and scoring (:func:`~avey_b.evaluation.protocol.avey_b_settings`; each record's ``avey_b``).
- **Scoring** (:func:`score_zero_shot`) loads the saved model and embeds with ``SentenceTransformer.encode`` (the
  tokenizer's own special tokens, the full limit, ``eval_batch_size`` texts at a time: EncodEval 4 for MLDR, 512
  otherwise); ranking and NDCG@10 are the retrieval task's (:meth:`RetrievalTask.score`) on the data mapped as
  EncodEval maps it (:mod:`avey_b.evaluation.tasks.ir`).

``avey-b evaluate`` runs one training cell per (model, lr, seed) — ``<model>/paper/msmarco_pairs/lr…_seed…/``
holding the model (``model/``, a sentence-transformers directory written atomically) and ``trained.json`` — before
the scorings that read it, and reuses it on a rerun (:mod:`avey_b.evaluation.sweep`). ``avey-b finetune --task nq
--protocol paper`` trains and scores in one go; ``--finetuned DIR`` scores a model trained before.

Why sentence-transformers' trainer here and the library's loop elsewhere: this is the protocol's own code path, so
running it is the surest way to match it. On the same embeddings the loss is exactly the library's
:func:`~avey_b.evaluation.tasks.ir.multiple_negatives_ranking_loss` (the tests check the value and the gradient);
the runs still differ from the library's loop in what the Trainer decides (data order) and in the tokenization
above; the weight decay is the same rule.
"""

from __future__ import annotations

import math
import os
import platform
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
import transformers

from avey_b.model.configuration import is_avey_b
from avey_b.model.loading import SENTENCE_TRANSFORMERS_MAX_LENGTH
from avey_b.utils.counting import count_parameters
from avey_b.utils.device import pick_device, use_bf16
from avey_b.utils.records import save_pretrained_atomic, utc_timestamp

from .protocol import avey_b_settings, decayed_parameter_names
from .tasks import TASKS, get_task
from .tasks.base import (
    EVAL_ATTENTION,
    DataFiles,
    RunConfig,
    buffered,
    check_model_source,
    end_token,
    resolve_steps,
)
from .tasks.ir import MSMARCOPairs

PAIRS_TASK = MSMARCOPairs.name
MODEL_DIR = "model"
"""The trained sentence-transformers directory inside a training cell's directory."""
TRAINED_FILE = "trained.json"
"""A training cell's record; its presence (with ``model/``) marks the cell done."""
CACHE_MINI_BATCH = 256
"""``CachedMultipleNegativesRankingLoss(mini_batch_size=256)``, EncodEval's setting (memory only, not the result)."""


def is_zero_shot(task_name: str, cfg: RunConfig) -> bool:
    """Whether the cell scores a model trained on MS MARCO pairs instead of training on its own task."""
    return cfg.protocol == "paper" and task_name in TASKS and TASKS[task_name].family == "IR"


def _st_modules():
    """sentence-transformers' trainer, arguments, collator and loss (their homes moved in 5.x)."""
    from sentence_transformers import SentenceTransformerTrainer, SentenceTransformerTrainingArguments

    try:
        from sentence_transformers.sentence_transformer.data_collator import SentenceTransformerDataCollator
        from sentence_transformers.sentence_transformer.losses import CachedMultipleNegativesRankingLoss
    except ImportError:  # releases before the move
        from sentence_transformers.data_collator import SentenceTransformerDataCollator
        from sentence_transformers.losses import CachedMultipleNegativesRankingLoss
    return SentenceTransformerTrainer, SentenceTransformerTrainingArguments, SentenceTransformerDataCollator, \
        CachedMultipleNegativesRankingLoss


def tokenizer_stated_length(name_or_path: str, trust_remote_code: bool = False) -> int | None:
    """The ``model_max_length`` the tokenizer of ``name_or_path`` states in its own files (None: none, or
    transformers' "no limit"), as the SentenceTransformer EncodEval builds from a pretrained encoder takes it
    into its length limit (a directory's ``sentence_bert_config.json`` would override it in the loaded tokenizer)."""
    stated = transformers.AutoTokenizer.from_pretrained(str(name_or_path),
                                                        trust_remote_code=trust_remote_code).model_max_length
    return int(stated) if stated is not None and stated < 10**8 else None


def load_sentence_transformer(name_or_path: str, cfg: RunConfig, device: torch.device,
                              tokenizer_name: str | None = None):
    """``SentenceTransformer(name_or_path)`` as EncodEval builds it: a plain encoder gets masked mean pooling, a
    sentence-transformers directory its own modules; ``attn_implementation="eager"`` (every EncodEval config sets
    it); weights in ``cfg.weights_dtype``; the length limit is sentence-transformers' own (the smaller of
    ``max_position_embeddings`` and the ``model_max_length`` the tokenizer's files state, even where a saved
    ``sentence_bert_config.json`` says otherwise; for Avey-B the length its release states,
    ``AveyBConfig.context_len``, which the authors' config exposes as ``max_position_embeddings``), capped by
    ``cfg.max_length``; a model whose config sets ``retrieval_pooling: eos`` pools the last token instead of the
    mean (EncodEval's switch); a ``Normalize`` module is dropped, as EncodEval's plain encoders have none (cosine
    similarity ranks the same either way); a tokenizer without an end or padding token gets EncodEval's stand-ins
    (unknown, end); an Avey-B runs the padding :func:`~avey_b.evaluation.protocol.avey_b_settings` chooses."""
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError as e:  # pragma: no cover - the eval extra installs it
        raise ImportError("the paper's IR protocol needs sentence-transformers (pip install avey-b[eval])") from e
    check_model_source(name_or_path)
    if tokenizer_name is not None and tokenizer_name != name_or_path:
        raise ValueError("the paper's IR protocol builds a SentenceTransformer from the model directory and uses "
                         f"the tokenizer saved there; a separate tokenizer ({tokenizer_name}) is not supported")
    st = SentenceTransformer(str(name_or_path), device=str(device), trust_remote_code=cfg.trust_remote_code,
                             model_kwargs={"attn_implementation": EVAL_ATTENTION})
    if cfg.weights_dtype == "bfloat16":
        st.to(torch.bfloat16)
    config = st[0].auto_model.config
    avey_b = avey_b_settings(config, cfg)  # the authors' checkpoints under the paper protocol: the release's padding
    if avey_b is not None:
        config.padding = avey_b["padding"]  # read at every forward pass
    limit = st.max_seq_length
    if limit is None or limit > SENTENCE_TRANSFORMERS_MAX_LENGTH:  # no limit (Avey-B): the tokenizer's sentinel
        limit = SENTENCE_TRANSFORMERS_MAX_LENGTH
    if is_avey_b(config) and getattr(config, "context_len", None):  # what the authors' config states
        limit = min(limit, config.context_len)
    stated = tokenizer_stated_length(name_or_path, cfg.trust_remote_code)
    if stated is not None:  # EncodEval's SentenceTransformer: min(max_position_embeddings, model_max_length)
        limit = min(limit, stated)
    if cfg.max_length is not None:
        limit = min(limit, cfg.max_length)
    st.max_seq_length = limit
    for i in reversed(range(len(st))):  # EncodEval's SentenceTransformer of a plain encoder has no Normalize module
        if type(st[i]).__name__ == "Normalize":  # (every directory this library saves adds one: cosine ranks alike)
            del st[i]
    if getattr(config, "retrieval_pooling", None) == "eos":
        pool_last_token(st)
    tok = st.tokenizer
    if tok.eos_token is None:  # EncodEval's stand-in: the unknown token (end_token without a model config)
        tok.eos_token = end_token(tok)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return st


def pool_last_token(st) -> None:
    """Switch a SentenceTransformer's pooling from the masked mean to the last (non-padding) token, as EncodEval
    does for a model whose config sets ``retrieval_pooling: eos`` (its inputs end with the end token, so this pools
    that token). sentence-transformers 6 names the mode (``pooling_mode``); earlier releases hold one flag each."""
    pooling = next((m for m in st if type(m).__name__ == "Pooling"), None)
    if pooling is None:
        raise ValueError("retrieval_pooling 'eos': the SentenceTransformer has no Pooling module to switch")
    if isinstance(getattr(pooling, "pooling_mode", None), (str, tuple)):
        pooling.pooling_mode = "lasttoken"
    else:  # sentence-transformers < 6
        pooling.pooling_mode_mean_tokens = False
        pooling.pooling_mode_lasttoken = True


class _AsPretrained:
    """``save_pretrained_atomic``'s model interface over a SentenceTransformer (which writes its own tokenizer)."""

    def __init__(self, st):
        self.st = st

    def save_pretrained(self, directory, state_dict=None) -> None:
        self.st.save_pretrained(str(directory))


def train_pairs(model_name: str, cfg: RunConfig, files: DataFiles, dest: str | os.PathLike,
                tokenizer_name: str | None = None) -> dict[str, Any]:
    """Fine-tune ``model_name`` on the (query, positive) pairs of ``files.train`` (default: the Hub's
    ``hgissbkh/msmarco-pairs``, EncodEval's) with sentence-transformers (module docstring), save the model to
    ``dest`` through a temporary directory and a rename, and return the training record."""
    import datasets

    trainer_cls, args_cls, collator_cls, loss_cls = _st_modules()
    task = MSMARCOPairs()
    device = pick_device(cfg.device)
    if device.type == "cuda" and device.index not in (None, 0):
        raise ValueError(f"device {device}: sentence-transformers' trainer uses the first visible GPU; select it "
                         "with CUDA_VISIBLE_DEVICES instead (avey-b evaluate --devices does)")
    pairs = task.subsample(task.load("train", files), cfg.max_train_examples)
    if not pairs:
        raise ValueError(f"{PAIRS_TASK}: no training pairs")
    transformers.set_seed(cfg.seed)
    st = load_sentence_transformer(model_name, cfg, device, tokenizer_name)
    tok, limit, end = st.tokenizer, buffered(st.max_seq_length), end_token(st.tokenizer)

    def tokenize(texts: list[str], **_) -> dict[str, torch.Tensor]:  # EncodEval's RetrievalEval.tokenize
        return tok([t + end for t in texts], truncation=True, padding=True, max_length=limit,
                   add_special_tokens=False, return_tensors="pt")

    steps = resolve_steps(task, cfg, math.ceil(len(pairs) / cfg.batch_size))
    bf16 = use_bf16(cfg.precision, device)
    with tempfile.TemporaryDirectory(prefix="ir-train-") as scratch:
        args = args_cls(
            output_dir=scratch, max_steps=steps, per_device_train_batch_size=cfg.batch_size, learning_rate=cfg.lr,
            lr_scheduler_type="linear", warmup_steps=math.ceil(cfg.warmup_ratio * steps),
            adam_beta1=cfg.adam_beta1, adam_beta2=cfg.adam_beta2, adam_epsilon=cfg.adam_epsilon,
            weight_decay=cfg.weight_decay, max_grad_norm=cfg.grad_clip, seed=cfg.seed, bf16=bf16,
            use_cpu=device.type == "cpu", save_strategy="no", report_to="none", logging_steps=max(1, steps // 100),
            disable_tqdm=True,
        )
        dataset = datasets.Dataset.from_dict({"anchor": [q for q, _ in pairs], "positive": [d for _, d in pairs]})
        loss = loss_cls(st, scale=cfg.ir_scale, mini_batch_size=CACHE_MINI_BATCH)
        trainer = trainer_cls(model=st, args=args, train_dataset=dataset, loss=loss,
                              data_collator=collator_cls(tokenize))
        # the weight decay rule of every other cell, not the installed transformers' own (read by create_optimizer)
        trainer.get_decay_parameter_names = lambda model: decayed_parameter_names(model, cfg.protocol)
        t0 = time.perf_counter()
        trainer.train()
        seconds = time.perf_counter() - t0
    losses = [float(h["loss"]) for h in trainer.state.log_history if "loss" in h]
    if not all(math.isfinite(x) for x in losses):
        raise FloatingPointError(f"non-finite training loss (lr {cfg.lr}): {losses}")
    st.eval()
    save_pretrained_atomic(Path(dest), _AsPretrained(st), None)
    tenth = max(1, len(losses) // 10)
    return {"steps": trainer.state.global_step, "batches_per_epoch": math.ceil(len(pairs) / cfg.batch_size),
            "examples": len(pairs), "seconds": seconds, "loss_first": _mean(losses[:tenth]),
            "loss_last": _mean(losses[-tenth:]), "losses": [round(x, 5) for x in losses],
            "autocast": "bf16" if bf16 else "fp32", "weights_dtype": cfg.weights_dtype,
            "loss": f"CachedMultipleNegativesRankingLoss(scale={cfg.ir_scale:g}, mini_batch_size={CACHE_MINI_BATCH})",
            "max_length": limit, "pooling": _pooling_mode(st), "avey_b": avey_b_settings(st[0].auto_model.config, cfg),
            "pad_id": tok.pad_token_id}


def score_zero_shot(task_name: str, finetuned: str, cfg: RunConfig, files: DataFiles) -> dict[str, Any]:
    """Score the sentence-transformers model in ``finetuned`` on ``task_name``'s evaluation data, mapped as EncodEval
    maps it, without training; returns the task's metrics and the parameter count."""
    task = get_task(task_name)
    if files.holdout is not None:
        raise ValueError(f"{task_name}: --holdout does not apply to a zero-shot scoring")
    examples = task.subsample(task.load("eval", files, protocol="paper"), cfg.max_eval_examples)
    st = load_sentence_transformer(finetuned, cfg, pick_device(cfg.device)).eval()

    def embed(texts: list[str], query: bool) -> torch.Tensor:
        return st.encode(texts, batch_size=cfg.eval_batch_size, convert_to_tensor=True, normalize_embeddings=True,
                         show_progress_bar=False).float()

    with torch.no_grad():
        metrics = task.score(examples, embed, cfg)
    return metrics | {"n_parameters": count_parameters(st), "avey_b": avey_b_settings(st[0].auto_model.config, cfg)}


def run_zero_shot_cell(model_name: str, task_name: str, cfg: RunConfig, files: DataFiles,
                       tokenizer_name: str | None = None, save_model: str | None = None,
                       finetuned: str | None = None) -> dict[str, Any]:
    """One paper-protocol IR cell: score ``finetuned`` (a model :func:`train_pairs` saved), or train one first on
    ``files.train`` (MS MARCO pairs; saved to ``save_model`` when given); returns the results record of
    :func:`avey_b.evaluation.finetune.run_cell`."""
    task = get_task(task_name)
    training: dict[str, Any]
    with tempfile.TemporaryDirectory(prefix="ir-model-") as tmp:
        if finetuned is None:
            finetuned = save_model or os.path.join(tmp, MODEL_DIR)
            training = train_pairs(model_name, cfg, DataFiles(train=files.train, train_split=files.train_split),
                                   finetuned, tokenizer_name)
        elif save_model:
            raise ValueError("--save-model with --finetuned: nothing is trained, the model is already in "
                             f"{finetuned}")
        else:
            training = {"zero_shot": True, "finetuned": str(finetuned)}
        t0 = time.perf_counter()
        metrics = score_zero_shot(task_name, finetuned, cfg, files)
        seconds = time.perf_counter() - t0
    n_parameters, avey_b = metrics.pop("n_parameters"), metrics.pop("avey_b")
    return {
        "model": model_name, "task": task.name, "family": task.family, "protocol": cfg.protocol,
        "lr": cfg.lr, "seed": cfg.seed, "metric": task.metric, "score": metrics[task.metric], "metrics": metrics,
        "train": training | {"task": PAIRS_TASK}, "eval_seconds": seconds, "n_parameters": n_parameters,
        "config": cfg.to_dict(), "avey_b": avey_b, "data": vars(files), "device": str(pick_device(cfg.device)),
        "versions": {"python": platform.python_version(), "torch": torch.__version__,
                     "transformers": transformers.__version__, "sentence_transformers": _st_version()},
        "finished": utc_timestamp(),
    }


def _pooling_mode(st) -> str:
    """The pooling a SentenceTransformer applies, in words (recorded with the training)."""
    pooling = next((m for m in st if type(m).__name__ == "Pooling"), None)
    if pooling is None:
        return "none"
    mode = getattr(pooling, "pooling_mode", None)
    if isinstance(mode, (str, tuple)):
        return str(mode)
    return "lasttoken" if getattr(pooling, "pooling_mode_lasttoken", False) else "mean"


def _st_version() -> str:
    import sentence_transformers

    return sentence_transformers.__version__


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")
