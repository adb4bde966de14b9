"""The authors' released Avey-B checkpoints (``avey-ai/avey-b1-*``): their format, mapped onto ours.

This module is a leaf: it imports nothing else from the package, so the configuration, the model and the
``avey-b convert`` writer can all use it without an import circle. It holds the one table of release config
fields, the one table of weight names, the architecture switches that make the paper's model compute what the
release computes, and pure ``dict -> dict`` conversions.

The release differs from the paper in several places: a GELU enricher, no activation after mixing, L1 row
normalization of the dynamic matrix, a learned residual scalar per layer, its own feature orders inside the
enricher and fuser, ranker weights divided by the *smallest* selected score, no final norm and its own
classification heads. Each is a config value of the one model (``AVEY_B1_ARCHITECTURE``).

| release key                         | ours                                      |
|-------------------------------------|-------------------------------------------|
| ``embed.weight``                    | ``model.embed_tokens.weight``             |
| ``layers.i.norm.weight``            | ``model.layers.i.norm.weight``            |
| ``layers.i.enricher.{weight,bias}`` | ``model.layers.i.enricher.{weight,bias}`` |
| ``layers.i.fuser.{weight,bias}``    | ``model.layers.i.fuser.{weight,bias}``    |
| ``layers.i.alpha``                  | ``model.layers.i.alpha``                  |
| ``layers.i.spatial_proj`` (even i)  | ``model.layers.i.mixer.weight``           |
| ``ranker.down_proj``                | ``model.compressor.weight``               |
| ``dense.*``, ``classifier.*``       | the same names on our classification heads |
"""

from __future__ import annotations

import json
import logging
import os
import re
from pathlib import Path

import torch
from safetensors.torch import load_file
from transformers.utils import cached_file

logger = logging.getLogger(__name__)

#: Release ``config.json`` fields and the ``AveyBConfig`` fields they set (the one table: ``AveyBConfig``'s
#: ``attribute_map`` is derived from it).
RELEASE_CONFIG_FIELDS = {
    "vocab_size": "vocab_size",
    "d_embed": "hidden_size",
    "n_layers": "num_hidden_layers",
    "chunk_size": "split_size",
    "k": "num_retrieved_splits",
}
#: Release fields that are copies of mapped ones, or informational (checked, then dropped).
RELEASE_REDUNDANT_FIELDS = {"hidden_size", "eps"}
#: Release fields that only the paper's evaluation protocol reads, and the ``AveyBConfig`` fields that keep them:
#: the stated input length (``AveyConfig(context_len=...)``, saved as ``max_position_embeddings``; EncodEval cuts
#: inputs at 99% of it) and the retrieval pooling switch (EncodEval pools the last token when it is ``"eos"``).
#: Not in ``attribute_map``: ``max_position_embeddings`` must stay absent from our configs (see
#: ``AveyBConfig.context_len``).
RELEASE_EVALUATION_FIELDS = {"max_position_embeddings": "context_len", "context_len": "context_len",
                             "retrieval_pooling": "retrieval_pooling"}
#: ``AveyConfig``'s default ``context_len``: what the authors' code (and so EncodEval) reads from a release
#: ``config.json`` that states no length.
RELEASE_DEFAULT_CONTEXT_LEN = 512
#: Standard transformers fields passed through unchanged.
HF_STANDARD_FIELDS = {
    "model_type", "architectures", "auto_map", "transformers_version", "torch_dtype", "dtype", "id2label",
    "label2id", "num_labels", "problem_type", "pad_token_id", "bos_token_id", "eos_token_id", "sep_token_id",
    "cls_token_id", "mask_token_id", "tie_word_embeddings", "_name_or_path", "name_or_path",
}

#: Every switch that makes the one model path compute what the authors' release computes.
AVEY_B1_ARCHITECTURE = {
    "enricher_activation": "gelu",
    "mixing_activation": "identity",
    "enricher_layout": "release",
    "layer_pattern": "interleaved_sd",
    "dynamic_normalization": "l1",
    "dynamic_eps": 1e-12,
    "ranker_weighting": "min",
    "fuser_bias": True,
    "residual_scale": True,
    "final_norm": False,
    "decoder_bias": False,
    "classifier_head": "avey-b1",
    "initializer": "xavier_normal",
}

#: The release's classes, by the head their weights hold.
RELEASE_HEADS = ("masked_lm", "sequence_classification", "token_classification")

#: The keyword arguments of ``from_pretrained`` that say where and how to fetch a checkpoint's files (transformers'
#: ``cached_file`` options).
HUB_OPTIONS = ("cache_dir", "force_download", "proxies", "token", "revision", "local_files_only", "subfolder")


class ReleaseConversionError(ValueError):
    """A release checkpoint that cannot be mapped exactly (the message names every offending key)."""


def attribute_map() -> dict[str, str]:
    """Release config keys read as our fields (``AveyBConfig.attribute_map``)."""
    return {release: ours for release, ours in RELEASE_CONFIG_FIELDS.items() if release != ours}


def is_release_config(config_dict: dict) -> bool:
    """True for the authors' ``config.json`` (``model_type: "avey-b"`` with ``d_embed``/``chunk_size``)."""
    return (config_dict.get("model_type") == "avey-b" and "split_size" not in config_dict
            and ("chunk_size" in config_dict or "d_embed" in config_dict))


def release_config_to_ours(config_dict: dict) -> dict:
    """Our config dict (the ``avey_b1`` parameterization) for a release ``config.json`` dict."""
    missing = [k for k in RELEASE_CONFIG_FIELDS if k not in config_dict]
    if missing:
        raise ReleaseConversionError(f"release config.json lacks required field(s): {', '.join(missing)}")
    if "hidden_size" in config_dict and config_dict["hidden_size"] != config_dict["d_embed"]:
        raise ReleaseConversionError(
            f"release config.json has hidden_size={config_dict['hidden_size']} != d_embed={config_dict['d_embed']}"
        )
    eps = float(config_dict.get("eps", 1e-12))
    ours = {ours_key: config_dict[key] for key, ours_key in RELEASE_CONFIG_FIELDS.items()}
    ours.update(AVEY_B1_ARCHITECTURE)
    ours.update({"norm_eps": eps, "ranker_eps": eps, "dynamic_eps": 1e-12})
    ours.update({k: v for k, v in config_dict.items() if k in HF_STANDARD_FIELDS and k != "auto_map"})
    # AveyConfig sets max_position_embeddings = context_len, then a saved max_position_embeddings overrides it
    ours["context_len"] = int(config_dict.get("max_position_embeddings",
                                              config_dict.get("context_len", RELEASE_DEFAULT_CONTEXT_LEN)))
    if "retrieval_pooling" in config_dict:  # EncodEval: "eos" pools the last token, any other value the mean
        ours["retrieval_pooling"] = "eos" if config_dict["retrieval_pooling"] == "eos" else "mean"
    ours["model_type"] = "avey-b"
    ours.pop("architectures", None)  # the release's class names are not ours; save_pretrained writes ours
    unknown = sorted(set(config_dict) - set(RELEASE_CONFIG_FIELDS) - RELEASE_REDUNDANT_FIELDS - HF_STANDARD_FIELDS
                     - set(RELEASE_EVALUATION_FIELDS))
    if unknown:
        logger.warning("release config.json fields not used by this library (no effect on the model): %s",
                       ", ".join(unknown))
    return ours


_LAYER_KEY = re.compile(r"^layers\.(\d+)\.(norm\.weight|enricher\.weight|enricher\.bias|fuser\.weight|fuser\.bias|"
                        r"alpha|spatial_proj)$")
_HEAD_KEY = re.compile(r"^(dense\.\d+\.(weight|bias)|classifier\.(weight|bias))$")


def release_head(state_dict: dict[str, torch.Tensor]) -> str:
    """Which release class wrote the weights: one of ``RELEASE_HEADS``."""
    if "classifier.weight" not in state_dict:
        return "masked_lm"
    first = state_dict.get("dense.0.weight")
    if first is None:
        raise ReleaseConversionError("release checkpoint has classifier.* but no dense.0.weight")
    d = state_dict["embed.weight"].shape[1]
    if tuple(first.shape) == (2 * d, d):
        return "sequence_classification"
    if tuple(first.shape) == (d, d):
        return "token_classification"
    raise ReleaseConversionError(f"dense.0.weight has shape {tuple(first.shape)}; "
                                 f"expected ({2 * d}, {d}) or ({d}, {d})")


def release_num_labels(state_dict: dict[str, torch.Tensor]) -> int | None:
    """The number of labels of a release classification checkpoint (None for the masked-LM one)."""
    weight = state_dict.get("classifier.weight")
    return None if weight is None else int(weight.shape[0])


def release_state_dict_to_ours(state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The release's weights under our names (as a head class stores them: backbone under ``model.``).

    Unknown names are an error naming them; shapes are checked by whoever builds the model.
    """
    out, unknown = {}, []
    for key, value in state_dict.items():
        if key == "embed.weight":
            out["model.embed_tokens.weight"] = value
        elif key == "ranker.down_proj":
            out["model.compressor.weight"] = value
        elif m := _LAYER_KEY.match(key):
            i, name = m.groups()
            out[f"model.layers.{i}.{'mixer.weight' if name == 'spatial_proj' else name}"] = value
        elif _HEAD_KEY.match(key):
            out[key] = value
        else:
            unknown.append(key)
    if unknown:
        raise ReleaseConversionError(f"unknown key(s) in the release checkpoint: {', '.join(sorted(unknown))}")
    return out


def check_weights(ours: dict[str, torch.Tensor], expected: dict[str, torch.Size], *, strict: bool) -> None:
    """Compare converted weights with a model's ``{name: shape}``: shape mismatches are errors; with
    ``strict``, so are missing weights (the tied decoder excepted) and weights with no place in the model."""
    bad = [f"{k}: release {tuple(v.shape)} vs expected {tuple(expected[k])}" for k, v in ours.items()
           if k in expected and tuple(v.shape) != tuple(expected[k])]
    if bad:
        raise ReleaseConversionError("shape mismatch: " + "; ".join(bad))
    if not strict:
        return
    missing = sorted(set(expected) - set(ours) - {"decoder.weight"})
    if missing:
        raise ReleaseConversionError(f"the release checkpoint lacks weight(s) for: {', '.join(missing)}")
    extra = sorted(set(ours) - set(expected))
    if extra:  # e.g. spatial_proj on a dynamic layer
        raise ReleaseConversionError(f"release weight(s) with no place in this architecture: {', '.join(extra)}")


def load_release_weights(directory: Path) -> dict[str, torch.Tensor]:
    """Every tensor of the ``*.safetensors`` files in a release directory."""
    files = sorted(Path(directory).glob("*.safetensors"))
    if not files:
        raise ReleaseConversionError(f"no *.safetensors weights in {directory}")
    state = {}
    for f in files:
        state.update(load_file(str(f)))
    return state


def read_release_config(directory: Path) -> dict:
    return json.loads((Path(directory) / "config.json").read_text())


def resolve_release_directory(name_or_path: str | os.PathLike, **hub_kwargs) -> Path | None:
    """The local directory of a release checkpoint (downloading a hub repo's files if needed), or None when
    ``name_or_path`` is not a release checkpoint."""
    path = Path(name_or_path)
    if path.is_dir():
        cfg = path / "config.json"
        if not cfg.exists():
            return None
        return path if is_release_config(json.loads(cfg.read_text())) else None
    keep = {k: hub_kwargs[k] for k in HUB_OPTIONS if k in hub_kwargs}
    cfg_file = cached_file(str(name_or_path), "config.json", _raise_exceptions_for_missing_entries=False, **keep)
    if cfg_file is None or not is_release_config(json.loads(Path(cfg_file).read_text())):
        return None
    weights = cached_file(str(name_or_path), "model.safetensors", **keep)
    return Path(weights).parent
