"""What every downstream task shares: the ``Task`` contract, run settings, model loading, batching.

A task owns its data loading (Hugging Face ``datasets`` by name *or* local files), its preprocessing, the
head it needs, its loss and its metric. The fine-tuning loop (:mod:`avey_b.evaluation.finetune`) is the
same for every task and every model: models come only through the ``AutoModelFor*`` classes (which
:mod:`avey_b.model.auto` makes read Avey-B), so BERT, RoBERTa, ModernBERT, NeoBERT and Avey-B run the
exact same code.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch
import transformers
from safetensors.torch import load_file, save_file
from transformers import MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING, AutoConfig, AutoModel
from transformers.modeling_outputs import TokenClassifierOutput

import avey_b.model.auto  # noqa: F401  (registers Avey-B: the Auto classes below load it)
from avey_b.data.tokenization import load_tokenizer
from avey_b.model.file_modes import honour_umask
from avey_b.model.heads import sentence_embedding
from avey_b.utils.device import autocast, use_bf16
from avey_b.utils.files import (
    DataFileError,
    check_model_source,  # noqa: F401 -- finetune and niah import it from here
    iter_jsonl,
    model_source,
    read_rows,
)
from avey_b.utils.model_spec import is_avey_b

from ..settings import DataFiles, RunConfig  # noqa: F401 -- declared in the light settings module (no torch)

#: A model config that names no eos token (BERT's, Avey-B's): what :meth:`Task.end` assumes outside a run.
CONFIG_WITHOUT_EOS = SimpleNamespace(eos_token_id=None)

# head name -> transformers Auto class name
HEADS = {
    "sequence-classification": "AutoModelForSequenceClassification",
    "token-classification": "AutoModelForTokenClassification",
    "question-answering": "AutoModelForQuestionAnswering",
    "embedding": "AutoModel",
}


def resolve_steps(task: Task, cfg: RunConfig, batches_per_epoch: int) -> int:
    """Optimizer steps: ``max_steps`` > ``epochs`` > the family's step budget > the family's epochs. An epoch is
    ``batches_per_epoch`` optimizer steps of ``batch_size`` examples (micro-batches of accumulation included)."""
    if cfg.max_steps is not None:
        return cfg.max_steps
    if cfg.epochs is not None:
        return max(1, math.ceil(cfg.epochs * batches_per_epoch))
    if task.default_steps is not None:
        return task.default_steps
    return max(1, math.ceil(task.default_epochs * batches_per_epoch))


class Task:
    """One benchmark. Subclasses set the class attributes and implement the four methods below."""

    name: str = ""
    family: str = ""  # SC | TC | QA | IR
    display: str = ""  # column header in the report
    metric: str = ""  # key of the headline score in ``evaluate``'s result
    default_epochs: float | None = 1.0
    default_steps: int | None = None
    train_split: str = "train"  # the Hub dataset's split for training ...
    eval_split: str = "validation"  # ... and for scoring, unless the user names others (DataFiles)
    end_token: str | None = None
    """Paper protocol: the token appended to every input (set per run from the model, :func:`end_token`)."""

    def end(self, tokenizer) -> str:
        """The paper protocol's end token: the run's (set from its model by :func:`end_token`), else
        :func:`end_token` for a model config that names no eos token (BERT's, Avey-B's)."""
        return self.end_token or end_token(tokenizer, CONFIG_WITHOUT_EOS)

    # -- data ------------------------------------------------------------------------------------------
    def load(self, which: str, files: DataFiles, protocol: str = "standard") -> Any:
        """Return the raw examples of ``which`` in {"train", "eval"} (a list, or a task-specific object), as
        ``protocol`` reads them (QA and IR read some rows differently under ``paper``)."""
        raise NotImplementedError

    def hub_split(self, which: str, files: DataFiles) -> str:
        """The Hub split that ``which`` ("train" or "eval") reads: the user's choice, else the task's."""
        if which == "train":
            return files.train_split or self.train_split
        return files.eval_split or self.eval_split

    # -- model -----------------------------------------------------------------------------------------
    def head(self, cfg: RunConfig) -> str:
        raise NotImplementedError

    def model_kwargs(self, train: Any, evaluation: Any, cfg: RunConfig) -> dict[str, Any]:
        """Extra ``from_pretrained`` kwargs (num_labels, id2label...)."""
        return {}

    # -- training --------------------------------------------------------------------------------------
    def train_features(self, examples: Any, tokenizer, cfg: RunConfig) -> list[dict[str, Any]]:
        raise NotImplementedError

    def collate(self, features: list[dict[str, Any]], pad_id: int) -> dict[str, torch.Tensor]:
        return pad_batch(features, pad_id)

    def loss(self, model, batch: dict[str, torch.Tensor], cfg: RunConfig) -> torch.Tensor:
        return model(**batch).loss

    # -- scoring ---------------------------------------------------------------------------------------
    def evaluate(self, model, tokenizer, examples: Any, cfg: RunConfig) -> dict[str, float]:
        """Scores in percent; the headline score is under ``self.metric``."""
        raise NotImplementedError

    def num_examples(self, examples: Any) -> int:
        return len(examples)

    def subsample(self, examples: Any, limit: int | None) -> Any:
        return examples if limit is None else examples[:limit]

    def split_holdout(self, examples: Any, fraction: float) -> tuple[Any, Any]:
        """(train, held-out) with a fixed permutation (seed 0), so every cell scores the same examples."""
        if not 0 < fraction < 1:
            raise ValueError(f"holdout must be in (0, 1), got {fraction}")
        order = torch.randperm(len(examples), generator=torch.Generator().manual_seed(0)).tolist()
        n_eval = max(1, int(round(fraction * len(examples))))
        if n_eval >= len(examples):
            raise ValueError(f"holdout {fraction} leaves no training example out of {len(examples)}")
        held = sorted(order[:n_eval])
        kept = sorted(order[n_eval:])
        return [examples[i] for i in kept], [examples[i] for i in held]


# ------------------------------------------------------------------------------------------ models


#: The attention implementation every EncodEval config asks for (``attn_implementation: eager``): the paper
#: protocol's baselines run their attention so.
EVAL_ATTENTION = "eager"


def load_model(name_or_path: str, head: str, cfg: RunConfig, **kwargs):
    """Any encoder by Hub name or local path, through the Auto class of ``head``; under the paper protocol with
    ``attn_implementation="eager"`` (:data:`EVAL_ATTENTION`), as EncodEval loads every model. A token-classification
    head for an encoder whose code has none (NeoBERT's Hub code ships masked-LM and sequence-classification heads
    only) is :class:`EncoderTokenClassifier` on its ``AutoModel``, as the paper's evaluation adds one for NeoBERT."""
    if head not in HEADS:
        raise ValueError(f"unknown head {head!r}; expected one of {sorted(HEADS)}")
    auto = getattr(transformers, HEADS[head])
    dtype = getattr(torch, cfg.weights_dtype)
    if cfg.protocol == "paper":  # every EncodEval config loads its model so (Avey-B has no attention: ignored)
        kwargs.setdefault("attn_implementation", EVAL_ATTENTION)
    with model_source(name_or_path):
        if head == "token-classification" and not _has_token_classifier(name_or_path, cfg.trust_remote_code):
            return EncoderTokenClassifier.from_pretrained(name_or_path, trust_remote_code=cfg.trust_remote_code,
                                                          dtype=dtype, **kwargs)
        return auto.from_pretrained(name_or_path, trust_remote_code=cfg.trust_remote_code, dtype=dtype, **kwargs)


def _has_token_classifier(name_or_path: str, trust_remote_code: bool) -> bool:
    """Whether ``AutoModelForTokenClassification`` can build this model: transformers (or a registration) maps its
    config class to one, or its own code (``auto_map``) provides one."""
    config = AutoConfig.from_pretrained(name_or_path, trust_remote_code=trust_remote_code)
    return (type(config) in MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING
            or "AutoModelForTokenClassification" in (getattr(config, "auto_map", None) or {}))


class EncoderTokenClassifier(torch.nn.Module):
    """A token-classification head on any ``AutoModel`` encoder, the one the paper's evaluation (EncodEval, as the
    authors' release adapts it) adds for NeoBERT: dropout, a ``hidden × hidden`` dense layer with tanh, dropout,
    then a linear classifier; weights drawn from N(0, 0.02), biases 0; cross-entropy over the labelled tokens.

    ``save_pretrained(dir)`` writes the encoder as its own class saves it plus the head in
    ``token_classifier.safetensors``; :meth:`from_pretrained` on such a directory restores both."""

    HEAD_FILE = "token_classifier.safetensors"

    def __init__(self, encoder, num_labels: int = 2, dropout: float = 0.1, init_range: float = 0.02):
        super().__init__()
        self.encoder = encoder
        self.config = encoder.config
        self.config.num_labels = num_labels
        hidden = self.config.hidden_size
        self.dropout = torch.nn.Dropout(dropout)
        self.dense = torch.nn.Linear(hidden, hidden)
        self.classifier = torch.nn.Linear(hidden, num_labels)
        for layer in (self.dense, self.classifier):
            torch.nn.init.normal_(layer.weight, std=init_range)
            torch.nn.init.zeros_(layer.bias)
        dtype = next(encoder.parameters()).dtype
        self.dense.to(dtype)
        self.classifier.to(dtype)

    @classmethod
    def from_pretrained(cls, name_or_path: str, *, num_labels: int = 2, id2label=None, label2id=None,
                        trust_remote_code: bool = False, dtype=None, **encoder_kwargs) -> EncoderTokenClassifier:
        encoder = AutoModel.from_pretrained(name_or_path, trust_remote_code=trust_remote_code, dtype=dtype,
                                            **encoder_kwargs)
        saved = Path(name_or_path) / cls.HEAD_FILE
        if saved.is_file():
            head = load_file(saved)
            num_labels = head["classifier.weight"].shape[0]
        model = cls(encoder, num_labels, dropout=getattr(encoder.config, "classifier_dropout", None) or 0.1,
                    init_range=getattr(encoder.config, "classifier_init_range", None) or 0.02)
        if id2label is not None:
            model.config.id2label, model.config.label2id = dict(id2label), dict(label2id or {})
        if saved.is_file():
            for name in ("dense", "classifier"):
                getattr(model, name).load_state_dict(
                    {k.removeprefix(f"{name}."): v for k, v in head.items() if k.startswith(f"{name}.")})
        return model

    def save_pretrained(self, directory, state_dict=None) -> None:
        if state_dict is not None:
            raise ValueError("EncoderTokenClassifier.save_pretrained saves its own weights; state_dict is not "
                             "supported")

        self.encoder.save_pretrained(directory)
        head = {f"{name}.{k}": v.detach().contiguous().cpu() for name in ("dense", "classifier")
                for k, v in getattr(self, name).state_dict().items()}
        save_file(head, str(Path(directory) / self.HEAD_FILE))
        honour_umask(Path(directory) / self.HEAD_FILE)  # safetensors writes 0600

    def forward(self, input_ids=None, attention_mask=None, labels=None, **kwargs):
        hidden = self.encoder(input_ids=input_ids, attention_mask=attention_mask, **kwargs)[0]
        x = torch.tanh(self.dense(self.dropout(hidden)))
        logits = self.classifier(self.dropout(x))
        loss = None
        if labels is not None:
            loss = torch.nn.functional.cross_entropy(logits.view(-1, logits.shape[-1]).float(), labels.view(-1))
        return TokenClassifierOutput(loss=loss, logits=logits)


def buffered(limit: int) -> int:
    """EncodEval's input length under a model's length limit: 99% of it, rounded (its "1% buffer"), at least 1."""
    return max(1, round(0.99 * limit))


def input_limit(model_config, tokenizer, protocol: str = "standard") -> int | None:
    """The longest input of a cell whose ``max_length`` is None, as EncodEval computes it for ``max_length: null``:
    the model's stated length less the 1% buffer (:func:`buffered`), whatever the positions (learned or RoPE). The
    stated length is ``max_position_embeddings``; for Avey-B, which has no position table, it is the length the
    authors' release states (``AveyBConfig.context_len``, its config's ``max_position_embeddings``) under the paper
    protocol only: EncodEval cut every model that is not a SentenceTransformer there, Avey-B included; the standard
    protocol keeps Avey-B uncut. A model with no stated length: its tokenizer's ``model_max_length`` if it states
    one, else None (no truncation)."""
    if is_avey_b(model_config):
        limit = getattr(model_config, "context_len", None) if protocol == "paper" else None
    else:
        limit = getattr(model_config, "max_position_embeddings", None)
    if limit:
        return buffered(limit)
    stated = getattr(tokenizer, "model_max_length", None)
    return stated if stated is not None and stated < 10**8 else None  # transformers' "no limit" is 1e30


def input_limit_rule(model_config, protocol: str = "standard") -> str:
    """In words, where :func:`input_limit` took a cell's limit from (recorded with it in ``results.json``)."""
    if is_avey_b(model_config):
        stated = getattr(model_config, "context_len", None)
        if protocol != "paper":
            return "none: Avey-B has no position table (standard protocol)"
        if stated is None:
            return "none: the Avey-B checkpoint states no context_len"
        return f"round(0.99 x context_len {stated}) (EncodEval's rule; the release's max_position_embeddings)"
    stated = getattr(model_config, "max_position_embeddings", None)
    if stated:
        return f"round(0.99 x max_position_embeddings {stated}) (EncodEval's rule)"
    return "the tokenizer's model_max_length, if it states one"


def end_token(tokenizer, model_config=None) -> str:
    """The token EncodEval appends to every input (``text + eos_token``, no other special tokens), by its one rule:
    the eos token the tokenizer holds once the model is loaded, else its unknown token.

    * A transformers model (``model_config`` given): EncodEval copies the config's ``eos_token_id`` onto the
      tokenizer, and under transformers 4 (its ``dtype=`` loading needs 4.56 or later) every config has that field,
      None unless the model sets one. So: the config's eos token, else the unknown token (``[UNK]`` for BERT and
      Avey-B, ``</s>`` for RoBERTa, ``[SEP]`` for ModernBERT).
    * A SentenceTransformer (``model_config=None``: the paper protocol's retrieval training,
      :mod:`avey_b.evaluation.ir_paper`): its tokenizer is used as loaded, so its own eos token, else the unknown
      token.

    Either way the tokenizer's own eos is the last resort; a tokenizer with neither is an error."""
    if model_config is None:
        eos = tokenizer.eos_token
    else:
        eos_id = getattr(model_config, "eos_token_id", None)
        if isinstance(eos_id, (list, tuple)):
            eos_id = eos_id[0] if eos_id else None
        eos = tokenizer.convert_ids_to_tokens(eos_id) if eos_id is not None else None
    token = eos or tokenizer.unk_token or tokenizer.eos_token
    if token is None:
        raise ValueError("the tokenizer has neither an unknown nor an end-of-sequence token to end inputs with")
    return token


def truncation(max_length: int | None, strategy: bool | str = True) -> dict[str, Any]:
    """Tokenizer keywords for a limit that may be None (no truncation)."""
    return {"truncation": strategy, "max_length": max_length} if max_length is not None else {"truncation": False}


def load_task_tokenizer(name_or_path: str, cfg: RunConfig):
    """The tokenizer of an encoder under evaluation, as it is (no tokens added), fast (offsets needed)."""
    return load_tokenizer(name_or_path, complete=False, require_fast=True, trust_remote_code=cfg.trust_remote_code)


def pad_id_of(tokenizer) -> int:
    """The id a batch is padded with: the tokenizer's pad token, else 0. Under masked padding it only fills positions
    that ``attention_mask`` hides, so any id works; under the release's padding (``AveyBConfig.padding="release"``)
    and where predictions at padding count (the paper protocol's QA scores) it changes outputs, and the paper
    protocol sets EncodEval's (:func:`use_encodeval_pad`)."""
    return tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0


def encodeval_pad_id(tokenizer, model_config) -> int:
    """The id EncodEval pads a transformers model's batches with (``abstract_eval.py``): it copies the config's
    ``pad_token_id`` and ``eos_token_id`` onto the tokenizer, pads with that pad id when the config sets one, else
    with the eos id copied, else (no eos either) with the unknown token, which it makes the eos: the config's
    ``pad_token_id``, else :func:`end_token`'s token."""
    pad = getattr(model_config, "pad_token_id", None)
    if pad is not None:
        return int(pad)
    return tokenizer.convert_tokens_to_ids(end_token(tokenizer, model_config))


def use_encodeval_pad(tokenizer, model_config) -> int:
    """Make :func:`encodeval_pad_id` the tokenizer's pad token (what :func:`pad_id_of` then reads, in training and
    scoring) for a paper-protocol run of a transformers model; returns the id."""
    pad = encodeval_pad_id(tokenizer, model_config)
    tokenizer.pad_token = tokenizer.convert_ids_to_tokens(pad)
    return pad


def encode_texts(model, tokenizer, texts: Sequence[str], max_length: int | None, batch_size: int,
                 device: torch.device, normalize: bool, precision: str) -> torch.Tensor:
    """Embeddings (len(texts), d) in float32, computed in length-sorted batches for speed."""
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    out = [None] * len(texts)
    pad = pad_id_of(tokenizer)
    for start in range(0, len(order), batch_size):
        idx = order[start:start + batch_size]
        enc = tokenizer([texts[i] for i in idx], **truncation(max_length))
        feats = [{"input_ids": ids, "attention_mask": am}
                 for ids, am in zip(enc["input_ids"], enc["attention_mask"], strict=False)]
        batch = {k: v.to(device) for k, v in pad_batch(feats, pad).items()}
        with torch.no_grad(), autocast_ctx(device, precision):
            hidden = model(**batch).last_hidden_state
        emb = sentence_embedding(hidden.float(), batch["attention_mask"], normalize).cpu()  # the embedding head's
        for j, i in enumerate(idx):
            out[i] = emb[j]
    if not out:
        raise ValueError("encode_texts: nothing to encode")
    return torch.stack(out)


# ------------------------------------------------------------------------------------------ batching


def pad_batch(features: list[dict[str, Any]], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-pad list-valued fields to the batch maximum: ``input_ids`` with ``pad_id``, ``labels`` with
    -100 (ignored by the losses), everything else with 0; scalar fields are stacked."""
    if not features:
        raise ValueError("pad_batch: empty batch")
    out = {}
    for key in features[0]:
        values = [f[key] for f in features]
        if isinstance(values[0], (list, tuple)):
            width = max(len(v) for v in values)
            fill = pad_id if key.endswith("input_ids") else (-100 if key == "labels" else 0)
            out[key] = torch.tensor([list(v) + [fill] * (width - len(v)) for v in values], dtype=torch.long)
        else:
            out[key] = torch.tensor(values)
    return out


def batches(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start:start + size]


def autocast_ctx(device: torch.device, precision: str):
    """bf16 autocast per ``precision`` (``auto`` / ``bf16`` / ``fp32``, see :func:`avey_b.utils.device.use_bf16`)."""
    return autocast(device, use_bf16(precision, device))


def model_inputs(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The fields the encoder takes (token_type_ids only when the tokenizer produced them)."""
    return {k: v for k, v in batch.items() if k in ("input_ids", "attention_mask", "token_type_ids")}


# ------------------------------------------------------------------------------------------ files


def read_table(path: str) -> list[tuple[str, dict[str, Any]]]:
    """``(where, row)`` for the rows of a TSV (GLUE: header line, tab separated, quotes are literal text), CSV or
    JSONL file; ``where`` is ``"path, line N"`` for error messages. Every row must have the header's fields."""
    if path.endswith((".jsonl", ".json")):
        rows = [(f"{path}, line {n}", row) for n, row in iter_jsonl(path)]
        if not rows:
            raise DataFileError(f"{path}: no rows")
        return rows
    return [(f"{path}, line {n}", row) for n, row in read_rows(path, "," if path.endswith(".csv") else "\t")]


def require_columns(columns, groups: dict[str, tuple[str, ...]], source: str, task: str) -> None:
    """Format sniffing: ``columns`` must hold one name of every group (e.g. {"text": (...), "label": (...)})."""
    missing = {what: names for what, names in groups.items() if not any(n in columns for n in names)}
    if missing:
        wanted = "; ".join(f"a {what} column (one of {list(names)})" for what, names in missing.items())
        raise DataFileError(f"{source} does not look like {task} data: found columns {sorted(columns)}, "
                            f"expected {wanted}")


def load_hub(name: str, config: str | None, split: str):
    """A split of a Hub dataset (needs the ``datasets`` package and network or a warm cache)."""
    try:
        import datasets
    except ImportError as e:  # pragma: no cover - the eval extra installs it
        raise ImportError("loading benchmarks by name needs `datasets` (pip install avey-b[eval])") from e
    return datasets.load_dataset(name, config, split=split)

