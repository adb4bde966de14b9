"""The authors' own model code, timed beside this library's (``avey-b bench run --release-code DIR``).

``DIR`` is a copy of the release's ``modeling_avey.py`` and ``configuration_avey.py`` (github.com/rimads/avey-b,
``avey_b/``; the Hub repos ``avey-ai/avey-b1-*`` load the same files as remote code) that the user points to: the
package ships none of it and imports it only from there. The release decorates each layer's ``forward`` with
``@torch.compile`` when the module is imported, so it is imported twice, under two package names: as it is (the
``compile-layers`` series, the release's own compilation) and with ``torch.compile`` an identity while importing
(``eager``; ``compile`` compiles that eager model whole, as for this library's).

The release model (``AveyModel``, random weights by its own initialization) takes the shape of the Avey-B spec it is
timed for (:func:`release_config`): ``vocab_size``, ``d_embed`` = ``hidden_size``, ``n_layers`` =
``num_hidden_layers``, ``chunk_size`` = ``split_size`` (S), ``k`` = ``num_retrieved_splits``, ``eps`` =
``norm_eps``; its own architecture (the ``avey_b1`` parameterization) whatever the spec's. Its records are the
series ``release:<spec>`` with ``code`` naming the directory.
"""

from __future__ import annotations

import importlib
import sys
import types
from pathlib import Path

import torch

from .options import check_release_directory

#: The model label prefix of the release's series.
RELEASE_PREFIX = "release:"


def load_release(directory: str | Path, compiled: bool = False) -> types.ModuleType:
    """The release's ``modeling_avey`` module from ``directory``, imported as a package of its own: with its layers'
    ``@torch.compile`` (``compiled``) or with ``torch.compile`` an identity while importing (eager vs eager)."""
    path = check_release_directory(directory)
    name = "avey_release_compiled" if compiled else "avey_release"
    if f"{name}.modeling_avey" in sys.modules and sys.modules[name].__path__ == [str(path)]:
        return sys.modules[f"{name}.modeling_avey"]
    for key in [k for k in sys.modules if k == name or k.startswith(name + ".")]:
        del sys.modules[key]  # another directory imported before
    compile_ = torch.compile
    if not compiled:
        torch.compile = lambda fn=None, **kw: fn if fn is not None else (lambda f: f)
    try:
        package = types.ModuleType(name)
        package.__path__ = [str(path)]
        sys.modules[name] = package
        return importlib.import_module(f"{name}.modeling_avey")
    finally:
        torch.compile = compile_


def release_config(module: types.ModuleType, config):
    """The release's ``AveyConfig`` of the shape of ``config`` (an ``AveyBConfig``; module docstring)."""
    return importlib.import_module(module.__name__.rsplit(".", 1)[0] + ".configuration_avey").AveyConfig(
        vocab_size=config.vocab_size, d_embed=config.hidden_size, n_layers=config.num_hidden_layers,
        chunk_size=config.split_size, k=config.num_retrieved_splits, eps=config.norm_eps)


def release_model(directory: str | Path, config, mode: str) -> torch.nn.Module:
    """The release's ``AveyModel`` of ``config``'s shape, random weights, for a series of ``mode`` (``compile-layers``:
    its own compiled layers; ``eager`` and ``compile``: the eager import)."""
    module = load_release(directory, compiled=mode == "compile-layers")
    return module.AveyModel(release_config(module, config)).eval()
