"""``avey-b convert SRC DST``: write an authors' release checkpoint (``avey-ai/avey-b1-*``, a hub repo id or
a local download) once as a standard checkpoint of this library.

The mapping itself lives in :mod:`avey_b.model.release`; ``from_pretrained`` also reads release checkpoints
directly, converting in memory. This writer picks the head class from the release's weights (masked LM,
sequence or token classification), checks every weight name and shape against it, saves with
``save_pretrained`` and copies the tokenizer files found next to the weights.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from pathlib import Path

import torch
from transformers.utils import cached_file

from avey_b import configs
from avey_b.model import release
from avey_b.model.configuration import AveyBConfig
from avey_b.model.heads import AveyBForMaskedLM, AveyBForSequenceClassification, AveyBForTokenClassification
from avey_b.model.release import ReleaseConversionError
from avey_b.utils.files import model_source

from .convert_options import ConvertOptions

HEAD_CLASSES = {"masked_lm": AveyBForMaskedLM, "sequence_classification": AveyBForSequenceClassification,
                "token_classification": AveyBForTokenClassification}
RELEASE_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json",
                           "merges.txt")


def convert_release_checkpoint(src: str | os.PathLike, dst: str | os.PathLike,
                               options: ConvertOptions | None = None) -> str:
    """Convert a release checkpoint (repo id or directory) into a standard checkpoint of ours in ``dst``.

    Returns the head it holds (one of ``avey_b.model.release.RELEASE_HEADS``).
    """
    hub = dataclasses.asdict(options or ConvertOptions())  # revision, local_files_only: the Hub's own keywords
    with model_source(src, "release checkpoint", local_files_only=hub["local_files_only"]):
        if not os.path.isdir(src):  # a Hub id: fetch its config.json first, so that the Hub's answer is reported
            cached_file(str(src), "config.json", **hub)
        directory = release.resolve_release_directory(src, **hub)
    if directory is None:
        raise ReleaseConversionError(f"{src} is not an Avey-B release checkpoint (config.json with d_embed/chunk_size)")
    config = AveyBConfig(**release.release_config_to_ours(release.read_release_config(directory)))
    weights = release.load_release_weights(directory)
    head = release.release_head(weights)
    if head != "masked_lm":
        config.num_labels = release.release_num_labels(weights)
    ours = release.release_state_dict_to_ours(weights)
    cls = HEAD_CLASSES[head]
    with torch.device("meta"):
        expected = {k: v.shape for k, v in cls(config).state_dict().items()}
    release.check_weights(ours, expected, strict=True)
    model = cls(config)
    model.load_state_dict(ours, strict=False)  # strict check above; the tied decoder is the only key left out
    model.save_pretrained(dst)
    for name in RELEASE_TOKENIZER_FILES:
        if (directory / name).exists():
            (Path(dst) / name).write_bytes((directory / name).read_bytes())
    return head


def run(args: argparse.Namespace) -> int:
    """The runner of ``avey-b convert SRC DST`` (:mod:`avey_b.cli`; its options: :class:`.options.ConvertOptions`)."""
    head = convert_release_checkpoint(args.src, args.dst, configs.from_args(ConvertOptions, args))
    print(f"converted {args.src} ({head}) -> {args.dst}")
    return 0
