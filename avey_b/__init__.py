"""Avey-B: the attention-free bidirectional encoder (ICLR 2026) for PyTorch and Hugging Face transformers.

The front door: the model classes (``AveyBModel``, its heads, ``AveyBConfig``, ``presets``, ...) and, for
inference, ``Encoder`` and ``LoadOptions`` (:mod:`avey_b.inference`): ``Encoder(path).encode(texts)`` gives the
embeddings of a list of texts in one call.

Importing the package imports neither torch nor the model, in every program (the ``avey-b`` command line's
``--help`` answers at once): the names below load on first use. It registers ``model_type="avey-b"`` with the
transformers Auto classes (:mod:`avey_b.model.auto`) all the same: at once where transformers' Auto classes are
loaded already, else the moment they load (``from transformers import AutoModel`` loads them), by a finder on
``sys.meta_path`` that registers and leaves (:class:`_RegisterWithTransformers`).

The package's folders: ``model/`` (the model, and only the model), ``utils/`` (files, records, progress, devices,
batching, clusters, model specs, counting), ``configs/`` (configs as data and the shipped recipes), ``data/``,
``training/``, ``finetuning/``, ``evaluation/``, ``benchmarking/``, ``inference/`` (``Encoder``, ``LoadOptions``),
``apps/`` (serve, embed, export, quantize, convert, analyze, demo, ablation) and ``cli.py``, the one command line.
"""

import sys as _sys

__version__ = "0.1.0"

from .model import PUBLIC as __all__  # noqa: E402  (the model's folder imports nothing)

_MODEL_NAMES = __all__
__all__ += ("Encoder", "LoadOptions")  # noqa: F405  (avey_b.inference's, by __getattr__ on first use: torch)


def __getattr__(name: str):
    """The public names, imported on first use (the model's import torch and transformers)."""
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


class _ThenRegister:
    """A module's own loader, counting the modules it is running (:attr:`_RegisterWithTransformers.running`): when
    the outermost of them has run, :meth:`_RegisterWithTransformers.register`."""

    def __init__(self, loader, finder: "_RegisterWithTransformers"):
        self.loader, self.finder = loader, finder

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        running = self.finder.running
        running.depth = getattr(running, "depth", 0) + 1
        try:
            self.loader.exec_module(module)
        finally:
            running.depth -= 1
        if not running.depth:
            self.finder.register()

    def __getattr__(self, attribute):  # get_source, get_resource_reader, is_package, ...: the module's own loader's
        return getattr(self.loader, attribute)


class _RegisterWithTransformers:
    """A ``sys.meta_path`` finder that registers Avey-B with the transformers Auto classes (imports
    :mod:`avey_b.model.auto`) as soon as that can run, then leaves ``sys.meta_path``: once transformers' module of
    the Auto classes (``transformers.models.auto``) is loaded and no module of transformers or of this package's model
    is halfway through its import (their names are not all defined then: transformers' modules import one another,
    and the model's import transformers). It finds no module itself: it gives those modules' own specs, their
    loaders wrapped by :class:`_ThenRegister`, which count the ones running in each thread (``running``)."""

    AUTO = "transformers.models.auto"

    def __init__(self):
        import threading

        self.running = threading.local()

    def find_spec(self, fullname, path=None, target=None):
        if "avey_b.model.auto" in _sys.modules:  # registered (or registering) by an import of its own
            self.leave()
            return None
        if fullname.split(".")[0] != "transformers" and not fullname.startswith(f"{__name__}.model."):
            return None
        for finder in _sys.meta_path:
            if finder is not self and hasattr(finder, "find_spec"):
                spec = finder.find_spec(fullname, path, target)
                if spec is not None:
                    if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                        spec.loader = _ThenRegister(spec.loader, self)
                    return spec
        return None

    def register(self) -> None:
        """Register now, where transformers' Auto classes are loaded (and not yet registered)."""
        if self.AUTO in _sys.modules and "avey_b.model.auto" not in _sys.modules:
            self.leave()
            from .model import auto  # noqa: F401  (registers Avey-B with the Auto classes)

    def leave(self) -> None:
        if self in _sys.meta_path:
            _sys.meta_path.remove(self)


if "transformers.models.auto" in _sys.modules:
    from .model import auto as _auto  # noqa: E402, F401  (registers Avey-B with the Auto classes)
elif not any(isinstance(f, _RegisterWithTransformers) for f in _sys.meta_path):
    _sys.meta_path.insert(0, _RegisterWithTransformers())
