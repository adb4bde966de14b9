"""Load the authors' released Avey-B checkpoints (``avey-ai/avey-b1-*``) into this library, exactly (SPEC §8).

The release differs from the paper in several places (GELU enricher, no post-mixing activation, L1 row
normalization, a learned residual scalar, its own feature orders, min-normalized ranker weights, no final
norm, its own classification heads). All of them are config values of the one model code path: the
``avey_b1`` preset. This module maps the release's ``config.json`` and weight names onto ours:

| release key                     | ours                                       |
|---------------------------------|--------------------------------------------|
| ``embed.weight``                | ``model.embed_tokens.weight``              |
| ``layers.i.norm.weight``        | ``model.layers.i.norm.weight``             |
| ``layers.i.enricher.{weight,bias}`` | ``model.layers.i.enricher.{weight,bias}`` |
| ``layers.i.fuser.{weight,bias}`` | ``model.layers.i.fuser.{weight,bias}``    |
| ``layers.i.alpha``              | ``model.layers.i.alpha``                   |
| ``layers.i.spatial_proj`` (even i) | ``model.layers.i.mixer.weight``         |
| ``ranker.down_proj``            | ``model.compressor.weight``                |
| ``dense.*``, ``classifier.*``   | the same names on our classification heads |

Unknown or missing weights and shape mismatches raise an error naming them; config fields we do not know
are reported by name (a warning) and never change the computation silently.

``from_pretrained`` detects a release checkpoint (repo id or local directory) by itself; ``avey-b convert SRC
DST`` writes a standard checkpoint of ours once.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import sys
from pathlib import Path

import torch

logger = logging.getLogger(__name__)

#: Release config fields and the AveyBConfig fields they set.
RELEASE_CONFIG_FIELDS = {
    "vocab_size": "vocab_size",
    "d_embed": "hidden_size",
    "n_layers": "num_hidden_layers",
    "chunk_size": "split_size",
    "k": "num_retrieved_splits",
}
#: Release fields that are copies of mapped ones, or informational (checked, then dropped).
RELEASE_REDUNDANT_FIELDS = {"hidden_size", "max_position_embeddings", "eps"}
#: Standard transformers fields passed through unchanged.
HF_STANDARD_FIELDS = {
    "model_type", "architectures", "auto_map", "transformers_version", "torch_dtype", "dtype", "id2label",
    "label2id", "num_labels", "problem_type", "pad_token_id", "bos_token_id", "eos_token_id", "sep_token_id",
    "cls_token_id", "mask_token_id", "tie_word_embeddings", "_name_or_path", "name_or_path",
}


class ReleaseConversionError(ValueError):
    """A release checkpoint that cannot be mapped exactly (the message names every offending key)."""


def is_release_config(config_dict: dict) -> bool:
    """True for the authors' ``config.json`` (``model_type: "avey-b"`` with ``d_embed``/``chunk_size``)."""
    return (config_dict.get("model_type") == "avey-b" and "split_size" not in config_dict
            and ("chunk_size" in config_dict or "d_embed" in config_dict))


def release_config_to_ours(config_dict: dict) -> dict:
    """Our config dict (``avey_b1`` parameterization) for a release ``config.json`` dict."""
    from .presets import AVEY_B1_ARCHITECTURE

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
    ours.update({k: v for k, v in config_dict.items() if k in HF_STANDARD_FIELDS and k not in ("auto_map",)})
    ours["model_type"] = "avey-b"
    ours.pop("architectures", None)  # the release's class names are not ours; save_pretrained writes ours
    unknown = sorted(set(config_dict) - set(RELEASE_CONFIG_FIELDS) - RELEASE_REDUNDANT_FIELDS - HF_STANDARD_FIELDS)
    if unknown:
        logger.warning("release config.json fields not used by this library (no effect on the model): %s",
                       ", ".join(unknown))
    return ours


_LAYER_KEY = re.compile(r"^layers\.(\d+)\.(norm\.weight|enricher\.weight|enricher\.bias|fuser\.weight|fuser\.bias|"
                        r"alpha|spatial_proj)$")
_HEAD_KEY = re.compile(r"^(dense\.\d+\.(weight|bias)|classifier\.(weight|bias))$")


def release_head(state_dict: dict[str, torch.Tensor]) -> str:
    """Which release class wrote the weights: "masked_lm", "sequence_classification" or "token_classification"."""
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
    raise ReleaseConversionError(f"dense.0.weight has shape {tuple(first.shape)}; expected ({2 * d}, {d}) or ({d}, {d})")


def release_state_dict_to_ours(state_dict: dict[str, torch.Tensor], config) -> dict[str, torch.Tensor]:
    """Rename the release's weights to ours and check every name and shape against a model built from ``config``."""
    from .heads import AveyBForMaskedLM, AveyBForSequenceClassification, AveyBForTokenClassification

    out, unknown = {}, []
    for key, value in state_dict.items():
        if key == "embed.weight":
            out["model.embed_tokens.weight"] = value
        elif key == "ranker.down_proj":
            out["model.compressor.weight"] = value
        elif m := _LAYER_KEY.match(key):
            i, name = m.groups()
            if name == "spatial_proj":
                name = "mixer.weight"
            out[f"model.layers.{i}.{name}"] = value
        elif _HEAD_KEY.match(key):
            out[key] = value
        else:
            unknown.append(key)
    if unknown:
        raise ReleaseConversionError(f"unknown key(s) in the release checkpoint: {', '.join(sorted(unknown))}")

    head = release_head(state_dict)
    cls = {"masked_lm": AveyBForMaskedLM, "sequence_classification": AveyBForSequenceClassification,
           "token_classification": AveyBForTokenClassification}[head]
    if head != "masked_lm":
        config.num_labels = state_dict["classifier.weight"].shape[0]
    with torch.device("meta"):
        expected = {k: v.shape for k, v in cls(config).state_dict().items()}
    expected.pop("decoder.weight", None)  # tied to the embedding
    missing = sorted(set(expected) - set(out))
    if missing:
        raise ReleaseConversionError(f"the release checkpoint lacks weight(s) for: {', '.join(missing)}")
    extra = sorted(set(out) - set(expected))
    if extra:  # e.g. spatial_proj on a dynamic layer
        raise ReleaseConversionError(f"release weight(s) with no place in this architecture: {', '.join(extra)}")
    bad = [f"{k}: release {tuple(v.shape)} vs expected {tuple(expected[k])}" for k, v in out.items()
           if tuple(v.shape) != tuple(expected[k])]
    if bad:
        raise ReleaseConversionError("shape mismatch: " + "; ".join(bad))
    return out


def _load_release_weights(directory: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    files = sorted(directory.glob("*.safetensors"))
    if not files:
        raise ReleaseConversionError(f"no *.safetensors weights in {directory}")
    state = {}
    for f in files:
        state.update(load_file(str(f)))
    return state


def resolve_release_directory(name_or_path: str | os.PathLike, **hub_kwargs) -> Path | None:
    """The local directory of a release checkpoint (downloading a hub repo's files if needed), or None when
    ``name_or_path`` is not a release checkpoint."""
    path = Path(name_or_path)
    if path.is_dir():
        cfg = path / "config.json"
        if not cfg.exists():
            return None
        return path if is_release_config(json.loads(cfg.read_text())) else None
    from transformers.utils import cached_file

    keep = {k: hub_kwargs[k] for k in ("cache_dir", "force_download", "proxies", "token", "revision",
                                       "local_files_only", "subfolder") if k in hub_kwargs}
    cfg_file = cached_file(str(name_or_path), "config.json", _raise_exceptions_for_missing_entries=False, **keep)
    if cfg_file is None or not is_release_config(json.loads(Path(cfg_file).read_text())):
        return None
    weights = cached_file(str(name_or_path), "model.safetensors", **keep)
    return Path(weights).parent


def convert_release_checkpoint(src: str | os.PathLike, dst: str | os.PathLike, **hub_kwargs) -> str:
    """Convert a release checkpoint (repo id or directory) into a standard checkpoint of ours in ``dst``.

    Returns the head it holds ("masked_lm", "sequence_classification" or "token_classification"). Tokenizer
    files found next to the weights are copied along.
    """
    from .configuration import AveyBConfig
    from .heads import AveyBForMaskedLM, AveyBForSequenceClassification, AveyBForTokenClassification

    directory = resolve_release_directory(src, **hub_kwargs)
    if directory is None:
        raise ReleaseConversionError(f"{src} is not an Avey-B release checkpoint (config.json with d_embed/chunk_size)")
    config = AveyBConfig(**release_config_to_ours(json.loads((directory / "config.json").read_text())))
    release = _load_release_weights(directory)
    ours = release_state_dict_to_ours(release, config)
    head = release_head(release)
    cls = {"masked_lm": AveyBForMaskedLM, "sequence_classification": AveyBForSequenceClassification,
           "token_classification": AveyBForTokenClassification}[head]
    model = cls(config)
    result = model.load_state_dict(ours, strict=False)
    # the tied decoder is the only thing a strict load may miss
    if set(result.missing_keys) - {"decoder.weight"} or result.unexpected_keys:
        raise ReleaseConversionError(f"load mismatch: missing {result.missing_keys}, unexpected {result.unexpected_keys}")
    model.save_pretrained(dst)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json", "merges.txt"):
        if (directory / name).exists():
            (Path(dst) / name).write_bytes((directory / name).read_bytes())
    return head


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="avey-b convert", description="Convert an authors' release Avey-B checkpoint "
                                "(hub repo id or local directory) into this library's format.")
    p.add_argument("src", help="release checkpoint: e.g. avey-ai/avey-b1-base-exp or a local download of it")
    p.add_argument("dst", help="output directory (save_pretrained format)")
    p.add_argument("--revision", default=None)
    p.add_argument("--local-files-only", action="store_true")
    args = p.parse_args(argv)
    try:
        head = convert_release_checkpoint(args.src, args.dst, revision=args.revision,
                                          local_files_only=args.local_files_only)
    except ReleaseConversionError as e:
        print(f"avey-b convert: {e}", file=sys.stderr)
        return 1
    print(f"converted {args.src} ({head}) -> {args.dst}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
