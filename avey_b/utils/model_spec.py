"""Model specs: the one grammar that names a model and builds its config — Avey-B from a preset, or a
Transformer encoder (BERT, ModernBERT, NeoBERT-like) — for pretraining, the efficiency benchmark, NIAH evaluation
and the comparison scripts in ``benchmarks/``; :func:`random_model` builds the model with random weights (no
download).

A model spec is ``NAME[:key=value,...]``: a registered name below, a transformers ``model_type`` (``bert``,
``roberta``, ``modernbert``: that class's default config), or a local directory / Hub id holding a
``config.json`` (read with ``AutoConfig``; after ``import avey_b`` that includes Avey-B directories). The
``key=value`` overrides set config fields (values parsed as Python literals: ``avey-b-small:compressor=False``,
``bert-base:num_hidden_layers=6``). It is the one grammar of a model: pretraining's ``model.arch`` / ``preset`` /
``overrides`` are the same spec written as YAML (:func:`avey_b.training.build.model_config`).

Registered names:

* ``avey-b-<preset>`` for every preset of ``avey_b.model.presets`` (``tiny``, ``small``, ``base``, ``large``,
  ``avey-b1``); ``tiny`` is the test model, ``small`` d=256 L=8 S=64 k=3 (CPU runs), ``base`` the paper's 164M
  model.
* ``bert-base``: ``transformers.BertConfig()`` defaults (BERT-base, learned absolute positions, max 512).
* ``bert-tiny``: a 2-layer, width-32 BERT for tests.
* ``modernbert-base``: ``transformers.ModernBertConfig()`` defaults (ModernBERT-base: 22 layers,
  global attention every third layer, local window 128 elsewhere, RoPE, trained window 8,192).
* ``neobert``: NeoBERT (medium) has no class in transformers, so it is *approximated* with a
  ``ModernBertConfig`` carrying NeoBERT's published shape: hidden 768, 28 layers, 12 heads,
  intermediate 3,072 with a SiLU-gated MLP (SwiGLU), RoPE (theta 10,000), global attention in every
  layer, vocabulary 30,522, window 4,096. Differences from the real model: ModernBERT's LayerNorm
  instead of RMSNorm and its embedding norm; FLOPs and memory traffic of attention and MLP match the
  published shape, which is what a latency benchmark measures. Reported as ``neobert (approx.)``.
* ``modernbert-tiny``: a 2-layer, width-32 ModernBERT for tests.

Maximum length. Models with a learned absolute position table (BERT) cannot run past
``max_position_embeddings``: such points are recorded as ``max_length`` ("—"). RoPE models have no
table; the paper extrapolates ModernBERT and NeoBERT past their trained windows for the efficiency
study (quality is irrelevant there), so :func:`max_length` returns ``None`` for them unless
``respect_rope_window`` is set (NIAH evaluation sets it: quality *is* measured there).
"""

from __future__ import annotations

import ast
import copy
import os
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from transformers import AutoConfig, AutoModel, AutoModelForMaskedLM, AutoModelForQuestionAnswering
from transformers.models.auto.configuration_auto import CONFIG_MAPPING

from avey_b.configs import check_keys
from avey_b.model import auto, presets  # noqa: F401  (auto: AutoConfig reads Avey-B directories)
from avey_b.model.configuration import is_avey_b
from avey_b.utils.files import model_source


def _neobert_like(**overrides):
    layers = overrides.get("num_hidden_layers", 28)
    rope = {"rope_type": "default", "rope_theta": 10000.0}
    return {
        "vocab_size": 30522,
        "hidden_size": 768,
        "num_hidden_layers": layers,
        "num_attention_heads": 12,
        "intermediate_size": 3072,
        "hidden_activation": "silu",
        "max_position_embeddings": 4096,
        "layer_types": ["full_attention"] * layers,  # global attention in every layer, however many
        "rope_parameters": {"full_attention": rope, "sliding_attention": rope},
        "pad_token_id": 0,
        "bos_token_id": 101,
        "eos_token_id": 102,
        "cls_token_id": 101,
        "sep_token_id": 102,
    }


_TINY = {"vocab_size": 99, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
         "intermediate_size": 37, "max_position_embeddings": 512}

# name -> (transformers model_type, its constructor's keywords; a callable when they depend on the overrides).
NAMED_CONFIGS = {
    "bert-base": ("bert", {}),
    "bert-tiny": ("bert", _TINY),
    "modernbert-base": ("modernbert", {}),
    "modernbert-tiny": ("modernbert", {**_TINY, "local_attention": 16, "pad_token_id": 0, "bos_token_id": 1,
                                       "eos_token_id": 2, "cls_token_id": 1, "sep_token_id": 2}),
    "neobert": ("modernbert", _neobert_like),
}
DISPLAY_NAMES = {"neobert": "neobert (approx.)"}


@dataclass
class ModelSpec:
    """A parsed ``NAME[:key=value,...]`` spec."""

    name: str
    overrides: dict[str, Any]

    @property
    def label(self) -> str:
        base = DISPLAY_NAMES.get(self.name, self.name)
        if not self.overrides:
            return base
        return base + ":" + ",".join(f"{k}={v}" for k, v in self.overrides.items())


def parse_spec(spec: str) -> ModelSpec:
    """Parse ``NAME[:key=value,...]``; values are Python literals (``False``, ``3``, ``'gelu'``) or strings."""
    name, _, rest = spec.partition(":")
    if not name:
        raise ValueError(f"empty model name in spec {spec!r}")
    overrides: dict[str, Any] = {}
    for item in filter(None, rest.split(",")):
        key, eq, raw = item.partition("=")
        if not eq or not key:
            raise ValueError(f"bad override {item!r} in model spec {spec!r}: expected key=value")
        try:
            value = ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            value = {"true": True, "false": False}.get(raw.lower(), raw)
        overrides[key.strip()] = value
    return ModelSpec(name, overrides)


def _is_model_type(name: str) -> bool:
    return name in CONFIG_MAPPING


def is_registered(name: str) -> bool:
    """Whether ``name`` is built from a config here (a registered name, ``avey-b-<preset>`` or a transformers
    ``model_type``), not loaded from a directory or the Hub."""
    return name in NAMED_CONFIGS or name.removeprefix("avey-b-") in presets.PRESETS or _is_model_type(name)


def build_config(spec: ModelSpec | str, defaults: dict[str, Any] | None = None):
    """The config for ``spec``: a registered name, ``avey-b-<preset>``, a transformers ``model_type`` (``bert``,
    ``roberta``, ``modernbert``, ...), or a directory / Hub id.

    ``defaults`` are fields set where the config has them, over a registered name's own and beneath the
    overrides (pretraining's vocabulary size and special-token ids, from its tokenizer). Built names get their
    fields through the config's constructor, so what a constructor derives from them (ModernBERT's
    ``layer_types`` from ``num_hidden_layers``) follows; a loaded config gets them as attributes. An override the
    config does not have is an error that names it."""
    if isinstance(spec, str):
        spec = parse_spec(spec)
    name = spec.name

    def fields_of(config) -> dict[str, Any]:  # the defaults this config has, beneath the overrides
        check_keys(config, spec.overrides, f"model spec {spec.label!r}: {type(config).__name__}'s fields are")
        return {k: v for k, v in (defaults or {}).items() if hasattr(config, k)}

    if name.startswith("avey-b-") and name.removeprefix("avey-b-") in presets.PRESETS:
        preset = name.removeprefix("avey-b-")  # AveyBConfig re-derives layer_types from the fields
        return presets.get(preset, **{**fields_of(presets.get(preset)), **spec.overrides})
    if name in NAMED_CONFIGS or _is_model_type(name):
        model_type, fields = NAMED_CONFIGS.get(name, (name, {}))
        given = fields(**spec.overrides) if callable(fields) else fields
        return transformers_config(model_type, **{**given, **fields_of(AutoConfig.for_model(model_type)),
                                                  **spec.overrides})
    if os.path.isdir(name) or "/" in name:
        with model_source(name):
            config = AutoConfig.from_pretrained(name)
        for key, value in {**fields_of(config), **spec.overrides}.items():
            setattr(config, key, value)
        return config
    known = [f"avey-b-{p}" for p in presets.PRESETS] + sorted(NAMED_CONFIGS)
    raise ValueError(f"unknown model {name!r}: use one of {known}, a transformers model_type (bert, modernbert, "
                     "...), a local directory or a Hub id")


SPECIAL_ID_KEYS = ("pad_token_id", "bos_token_id", "eos_token_id", "cls_token_id", "sep_token_id")


def transformers_config(model_type: str, **fields):
    """``AutoConfig.for_model(model_type, **fields)``, where a special-token id the fields leave at the class's
    default is unset (``None``) if it falls outside the vocabulary the fields give: ModernBERT's default ids
    (50281, 50282) belong to its default 50,368-token vocabulary, not to a 4,096-token one, and transformers warns
    about every such id. Ids the fields give are kept as given."""
    vocab = fields.get("vocab_size")
    if vocab is not None:
        base = AutoConfig.for_model(model_type)
        for key in SPECIAL_ID_KEYS:
            default = getattr(base, key, None)
            if key not in fields and isinstance(default, int) and default >= vocab:
                fields[key] = None
    return AutoConfig.for_model(model_type, **fields)


def uses_rope(config) -> bool:
    return bool(
        getattr(config, "rope_parameters", None)
        or getattr(config, "rope_theta", None)
        or getattr(config, "position_embedding_type", None) == "rotary"
    )


def max_length(config, *, respect_rope_window: bool = False) -> int | None:
    """Longest sequence the model can run (None = unbounded), see the module docstring."""
    if is_avey_b(config):
        return None
    limit = getattr(config, "max_position_embeddings", None)
    if uses_rope(config) and not respect_rope_window:
        return None
    return limit


def random_model(config, *, attn_implementation: str | None = None, head: str = "base") -> nn.Module:
    """Random-weight model from ``config``. ``head``: ``"base"`` (AutoModel) or ``"qa"``.

    ``attn_implementation``: a Transformer's attention (``sdpa``, ``flex_attention``, ``flash_attention_2``,
    ``eager``; :mod:`avey_b.benchmarking.attention`); ignored for Avey-B, which has none. The model gets its own
    copy of ``config`` (transformers writes the attention choice into the config it is given, so models built
    from one config object would otherwise all run the last one's attention).

    Raises ``ValueError``/``ImportError`` when the attention implementation is unavailable.
    """
    cls = {"base": AutoModel, "qa": AutoModelForQuestionAnswering}[head]
    kwargs = {}
    if attn_implementation and not is_avey_b(config):
        kwargs["attn_implementation"] = attn_implementation
        config = copy.deepcopy(config)
    model = cls.from_config(config, **kwargs)
    return model.eval()


def masked_lm_parameters(config) -> int:
    """Parameters of the masked-LM model built from ``config`` (tied embeddings counted once), on no memory."""
    with torch.device("meta"):
        return sum(p.numel() for p in AutoModelForMaskedLM.from_config(config).parameters())


def matched_width(arch: str, target: int, **config) -> dict:
    """``config`` for ``arch`` (``bert``, ``modernbert``) with the FFN width (``intermediate_size``, a multiple of
    32) whose masked-LM model has the parameter count closest to ``target``: a Transformer the size of an Avey-B."""
    def size(inter: int) -> int:
        return masked_lm_parameters(transformers_config(arch, intermediate_size=inter, **config))

    hidden = config.get("hidden_size", 768)
    inter = min(range(32, 16 * hidden + 1, 32), key=lambda i: abs(size(i) - target))
    return {**config, "intermediate_size": inter}


def random_batch(config, batch_size: int, length: int, device: torch.device, seed: int = 0):
    """Random token ids in ``[0, vocab)`` (avoiding id 0..3 so no special/pad token appears) + ones mask."""
    g = torch.Generator().manual_seed(seed)
    low = 4 if config.vocab_size > 8 else 0
    ids = torch.randint(low, config.vocab_size, (batch_size, length), generator=g)
    return ids.to(device), torch.ones(batch_size, length, dtype=torch.long, device=device)
