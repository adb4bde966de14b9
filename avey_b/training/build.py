"""Pretraining's set-up: the data sources, the tokenizer (a given one, or a byte-level BPE fitted on the training
documents only), the model (Avey-B from a preset, or any Hugging Face masked-LM architecture with the tokenizer's
special-token ids mapped into its config) and the optimizer.

:func:`check_inputs` runs every check that is cheap (the held-out split, that local data files exist, the model's
config with its overrides, the starting weights' ``SHA256SUMS``) before anything is written to the run directory,
so a typo never leaves a half-made run behind."""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import AutoModelForMaskedLM

from avey_b.data.tokenization import load_tokenizer, pad_to_multiple, train_bpe_tokenizer
from avey_b.model import auto  # noqa: F401  (AutoModelForMaskedLM builds and loads Avey-B)
from avey_b.utils import model_spec
from avey_b.utils.files import check_model_source, model_source

from ..data.corpus import SourceSpec, in_split, iter_documents, resolve_files
from .checkpoint import check_model_dir
from .config import PretrainConfig


def source_spec(cfg: PretrainConfig, source, split_name: str | None = None, shuffle: bool = False) -> SourceSpec:
    d = cfg.data
    return SourceSpec(source=source, text_field=d.text_field, txt_mode=d.txt_mode, hf_config=d.hf_config,
                      hf_split=split_name or d.hf_split, shuffle_seed=cfg.train.seed if shuffle else None)


def data_specs(cfg: PretrainConfig) -> tuple[SourceSpec, str, SourceSpec, str]:
    """(train spec, train split, eval spec, eval split): a separate eval corpus, or a hash-split of the train one."""
    train = source_spec(cfg, cfg.data.train, shuffle=cfg.data.shuffle)
    if cfg.data.eval is None:
        if cfg.data.shuffle and cfg.data.eval_documents > 0:
            raise ValueError("data.shuffle reorders the stream, so the first data.eval_documents documents would "
                             "change every epoch; hold out with data.eval_fraction instead")
        if cfg.data.eval_documents <= 0 and not 0 < cfg.data.eval_fraction < 1:
            raise ValueError("data.eval is null, so set data.eval_fraction in (0, 1) or data.eval_documents > 0 "
                             "to hold out documents")
        return train, "train", source_spec(cfg, cfg.data.train), "heldout"
    ev = source_spec(cfg, cfg.data.eval, cfg.data.hf_eval_split)
    return train, "all", ev, "all"


def build_tokenizer(cfg: PretrainConfig, info, run_dir: Path):
    if cfg.tokenizer.path:
        return load_tokenizer(cfg.tokenizer.path)
    out = run_dir / "tokenizer"
    if info.is_main:
        spec, split, _, _ = data_specs(cfg)
        def texts():
            n = 0
            for index, text in iter_documents(spec):
                if not in_split(index, text, split, cfg.data.eval_fraction, cfg.data.eval_documents):
                    continue  # never fit the tokenizer on held-out text
                yield text
                n += 1
                if n >= cfg.tokenizer.train_documents:
                    return

        tok = train_bpe_tokenizer(texts(), cfg.tokenizer.vocab_size)
        tok.save_pretrained(out)
    if info.enabled:
        torch.distributed.barrier()
    return load_tokenizer(str(out))


def check_inputs(cfg: PretrainConfig, resume_dir: Path | None = None, trust_unverified: bool = False) -> None:
    """Raise on any input error that can be found without reading the data or training a tokenizer: the held-out
    split, missing local data files, the model's config (arch, preset, every ``model.overrides`` key) and the
    ``SHA256SUMS`` of a local ``model.init_from`` directory. Writes nothing."""
    train, _, evaluation, _ = data_specs(cfg)
    for spec in (train, evaluation):
        if spec.kind == "local":
            resolve_files(spec.paths())
    if resume_dir is not None:
        return  # the model is the checkpoint's (its config was compared with this one)
    if cfg.model.init_from:
        if Path(cfg.model.init_from).is_dir():
            check_model_dir(cfg.model.init_from, "model.init_from", trust_unverified)
        else:  # a Hub id, or a path that does not exist: said now, before the run directory is written
            check_model_source(cfg.model.init_from, "model.init_from")
        return
    model_config(cfg, tokenizer=None)  # the vocabulary comes later, from the tokenizer; the fields are checked now


def model_config(cfg: PretrainConfig, tokenizer=None):
    """The config of a fresh model: the model spec of :mod:`avey_b.utils.model_spec` (arch avey-b + preset ->
    ``avey-b-<preset>``, written as YAML) with ``model.overrides``, its vocabulary sized from ``tokenizer`` and a
    transformers architecture's special-token ids taken from it. ``tokenizer=None`` (checking the fields before
    the tokenizer exists): the BPE's vocabulary size and no special ids."""
    m = cfg.model
    avey = m.arch in ("avey-b", "avey_b")
    if avey and m.preset is None:
        raise ValueError("model.preset is required for model.arch=avey-b (tiny, small, base, large)")
    name = f"avey-b-{m.preset}" if avey else m.arch
    vocab = pad_to_multiple(len(tokenizer) if tokenizer is not None else cfg.tokenizer.vocab_size, 64)
    defaults = {"vocab_size": vocab}
    if tokenizer is not None:
        defaults["pad_token_id"] = tokenizer.pad_token_id
    if not avey:  # a transformers architecture: its position table and special ids from the tokenizer
        defaults["max_position_embeddings"] = max(cfg.data.seq_len, 512)
        if tokenizer is not None:
            ids = {"bos_token_id": tokenizer.cls_token_id, "cls_token_id": tokenizer.cls_token_id,
                   "eos_token_id": tokenizer.sep_token_id, "sep_token_id": tokenizer.sep_token_id}
            defaults.update({k: v for k, v in ids.items() if v is not None})
    return model_spec.build_config(model_spec.ModelSpec(name, dict(m.overrides)), defaults)


def build_model(cfg: PretrainConfig, tokenizer, resume_dir: Path | None = None):
    """A fresh model from the config (vocab sized from the tokenizer), or weights from a checkpoint (checked
    before, by ``load_train_state``) or from ``model.init_from`` (checked by :func:`check_inputs`)."""
    m = cfg.model
    if resume_dir is not None or m.init_from:
        with model_source(str(resume_dir or m.init_from), "model.init_from" if resume_dir is None else "checkpoint"):
            model = AutoModelForMaskedLM.from_pretrained(str(resume_dir or m.init_from), dtype=torch.float32)
        if model.get_input_embeddings().weight.shape[0] < len(tokenizer):
            model.resize_token_embeddings(pad_to_multiple(len(tokenizer), 64))
    else:
        model = AutoModelForMaskedLM.from_config(model_config(cfg, tokenizer))
    if hasattr(model.config, "sparse_prediction"):
        model.config.sparse_prediction = bool(m.sparse_prediction)
    return model


def build_optimizer(model, cfg: PretrainConfig):
    """AdamW; decoupled weight decay only on parameters with >= 2 dimensions (matrices, embeddings)."""
    o = cfg.optim
    decay = [p for p in model.parameters() if p.requires_grad and p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.requires_grad and p.ndim < 2]
    groups = [{"params": decay, "weight_decay": o.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=o.lr, betas=tuple(o.betas), eps=o.eps)
