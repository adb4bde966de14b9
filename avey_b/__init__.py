"""Avey-B: the attention-free bidirectional encoder (ICLR 2026) for PyTorch and Hugging Face transformers.

The front door: the model classes (``AveyBModel``, its heads, ``AveyBConfig``, ``presets``, ...) and, for
inference, ``Encoder`` and ``LoadOptions`` (:mod:`avey_b.inference`): ``Encoder(path).encode(texts)`` gives the
embeddings of a list of texts in one call.

Importing the package registers ``model_type="avey-b"`` with the transformers Auto classes
(:mod:`avey_b.model.auto`). One process is the exception: the ``avey-b`` command line, which imports the model (and
torch) only when a verb runs, so that ``avey-b --help`` answers at once; there the names below load on first use.
``Encoder`` and ``LoadOptions`` always load on first use.

The package's folders: ``model/`` (the model, and only the model), ``utils/`` (files, records, progress, devices,
batching, clusters, model specs, counting), ``configs/`` (configs as data and the shipped recipes), ``data/``,
``training/``, ``finetuning/``, ``evaluation/``, ``benchmarking/``, ``inference/`` (``Encoder``, ``LoadOptions``),
``apps/`` (serve, embed, export, quantize, convert, analyze, demo, ablation) and ``cli.py``, the one command line.
"""

import os as _os
import sys as _sys

__version__ = "0.1.0"

from .model import PUBLIC as __all__  # noqa: E402  (the model's folder imports nothing)

_MODEL_NAMES = __all__
__all__ += ("Encoder", "LoadOptions")  # noqa: F405  (avey_b.inference's, by __getattr__ on first use: torch)


def __getattr__(name: str):
    """The public names, imported on first use: the inference names always, the model's where the package was
    imported by the command line."""
    if name == "Encoder":
        from .inference.encoder import Encoder

        return Encoder
    if name == "LoadOptions":
        from .inference.options import LoadOptions

        return LoadOptions
    if name not in _MODEL_NAMES:
        raise AttributeError(f"module 'avey_b' has no attribute {name!r}")
    from .model import auto

    return getattr(auto, name)


def _imported_by_the_command_line() -> bool:
    return bool(_sys.argv) and _os.path.basename(_sys.argv[0]) in ("avey-b", "avey-b.exe")


if not _imported_by_the_command_line():
    from .model.auto import *  # noqa: E402, F403  (registers Avey-B with the Auto classes)
