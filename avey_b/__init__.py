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


def _initializing(name: str) -> bool:
    module = _sys.modules.get(name)
    return module is not None and bool(getattr(getattr(module, "__spec__", None), "_initializing", False))


class _ThenRegister:
    """A module's own loader, then :meth:`_RegisterWithTransformers.register` once the module has run."""

    def __init__(self, loader, finder: "_RegisterWithTransformers", name: str):
        self.loader, self.finder, self.name = loader, finder, name

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        self.loader.exec_module(module)
        self.finder.register(done=self.name)

    def __getattr__(self, attribute):  # get_source, get_resource_reader, is_package, ...: the module's own loader's
        return getattr(self.loader, attribute)


class _RegisterWithTransformers:
    """A ``sys.meta_path`` finder that registers Avey-B with the transformers Auto classes (imports
    :mod:`avey_b.model.auto`) as soon as that can run, then leaves ``sys.meta_path``: right after transformers'
    module of the Auto classes (``transformers.models.auto``) has run, or, where a module of this package's model was
    halfway through its own import then (its names are not all defined yet: the model's modules import transformers,
    which imports its Auto classes), right after that module has run. It finds no module itself: it gives these
    modules' own specs, their loaders wrapped by :class:`_ThenRegister`."""

    AUTO = "transformers.models.auto"

    def find_spec(self, fullname, path=None, target=None):
        if "avey_b.model.auto" in _sys.modules:  # registered (or registering) by an import of its own
            self.leave()
            return None
        if fullname != self.AUTO and not (fullname.startswith(f"{__name__}.model.") and fullname.count(".") == 2):
            return None
        for finder in _sys.meta_path:
            if finder is not self and hasattr(finder, "find_spec"):
                spec = finder.find_spec(fullname, path, target)
                if spec is not None:
                    if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                        spec.loader = _ThenRegister(spec.loader, self, fullname)
                    return spec
        return None

    def register(self, done: str) -> None:
        """Register now unless transformers' Auto classes are not loaded or a model module is halfway through its
        import (``done``, which has just run, is not)."""
        if self.AUTO not in _sys.modules or "avey_b.model.auto" in _sys.modules:
            return
        prefix = f"{__name__}.model."
        if any(_initializing(name) for name in list(_sys.modules) if name.startswith(prefix) and name != done):
            return
        self.leave()
        from .model import auto  # noqa: F401  (registers Avey-B with the Auto classes)

    def leave(self) -> None:
        if self in _sys.meta_path:
            _sys.meta_path.remove(self)


if "transformers.models.auto" in _sys.modules:
    from .model import auto as _auto  # noqa: E402, F401  (registers Avey-B with the Auto classes)
elif not any(isinstance(f, _RegisterWithTransformers) for f in _sys.meta_path):
    _sys.meta_path.insert(0, _RegisterWithTransformers())
