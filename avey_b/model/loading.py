"""Loading and saving an Avey-B model: what ``from_pretrained`` and ``save_pretrained`` add to transformers'.

``AveyBPreTrainedModel.from_pretrained`` and ``save_pretrained`` call :func:`from_pretrained` and
:func:`save_pretrained` here, handing over transformers' own method as ``load`` / ``save``; the model file keeps
only the model.

Loading (:func:`from_pretrained`):

* **The authors' release checkpoints** (``avey-ai/avey-b1-*``, a hub repo id or a local download) load directly:
  the format is recognized and converted in memory by :mod:`avey_b.model.release` (config, weight names, the
  architecture switches that reproduce the release's forward pass); backbone weights are checked by name and shape,
  and a head the checkpoint lacks starts fresh, as transformers does for any encoder.
* **Another architecture's checkpoint** given to an Avey-B class is an error naming what the directory holds
  (transformers would warn and build an Avey-B model from the foreign config).
* **A damaged weights file** (cut short, overwritten) is named in the error, with what to do.

Saving (:func:`save_pretrained`): the model's code goes beside its weights (``avey_b_*.py``, recorded in the config's
``auto_map``; :mod:`avey_b.model.remote_code`), so that the directory loads with ``trust_remote_code=True`` where this
package is not installed. This module is saved there too: without the package, it copies the saved code along.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open

from . import release
from .configuration import is_avey_b
from .file_modes import honour_umask


def from_pretrained(cls, load: Callable, name_or_path, *model_args, **kwargs):
    """``cls.from_pretrained(name_or_path, *model_args, **kwargs)``, where ``load`` is transformers'
    ``PreTrainedModel.from_pretrained`` bound to ``cls``.

    A release checkpoint's config comes from its ``config.json`` (its number of labels from the classifier's
    weights); keyword arguments naming config fields override it (e.g. ``num_labels=5`` with
    ``ignore_mismatched_sizes=True``).
    """
    directory = None if name_or_path is None else release.resolve_release_directory(name_or_path, **kwargs)
    if directory is not None:
        config, state_dict = _release_config_and_weights(cls, directory, kwargs)
        return load(None, *model_args, config=config, state_dict=state_dict, **kwargs)
    if name_or_path is not None and kwargs.get("config") is None:
        _refuse_other_model_types(cls, name_or_path, kwargs)
    try:
        return load(name_or_path, *model_args, **kwargs)
    except SafetensorError as error:
        name = _damaged_weights_file(name_or_path, kwargs.get("subfolder") or "")
        raise OSError(f"{name}: cannot be read as safetensors ({error}); the file is damaged or was cut short: "
                      "save or download it again") from error


def _release_config_and_weights(cls, directory, kwargs: dict) -> tuple[object, dict[str, torch.Tensor]]:
    """The config and the state dict (our names) that build ``cls`` from the release checkpoint in ``directory``.
    Pops from ``kwargs`` the ``config`` and every keyword naming a config field (they are applied to the config)."""
    weights = release.load_release_weights(directory)
    config = cls.config_class(**release.release_config_to_ours(release.read_release_config(directory)))
    if (num_labels := release.release_num_labels(weights)) is not None:
        config.num_labels = num_labels
    # A `config` the Auto classes built from the release's config.json lacks the number of labels: replaced.
    kwargs.pop("config", None)
    for key in [k for k in kwargs if hasattr(config, k) and k not in ("dtype", "torch_dtype")]:
        setattr(config, key, kwargs.pop(key))
    ours = release.release_state_dict_to_ours(weights)
    with torch.device("meta"):
        backbone = cls(config).base_model  # the backbone, whether `cls` is a head or the backbone itself
    prefix = cls.base_model_prefix
    expected = {f"{prefix}.{k}": v.shape for k, v in backbone.state_dict().items()}
    release.check_weights({k: v for k, v in ours.items() if k.startswith(prefix + ".")}, expected, strict=True)
    return config, ours


def _refuse_other_model_types(cls, name_or_path, kwargs: dict) -> None:
    """An Avey-B class asked to load another architecture's checkpoint is an error, not a warning followed by a
    model built from a foreign config."""
    hub = {k: kwargs[k] for k in release.HUB_OPTIONS if k in kwargs}
    config_dict, _ = cls.config_class.get_config_dict(name_or_path, **hub)
    model_type = config_dict.get("model_type")
    if model_type is not None and not is_avey_b(config_dict):
        raise ValueError(f"{name_or_path} holds a {model_type!r} model, not Avey-B: load it with the transformers "
                         f"Auto classes (e.g. AutoModel.from_pretrained), not {cls.__name__}")


def _damaged_weights_file(name_or_path, subfolder: str) -> str:
    """The weights file of a local model directory that safetensors cannot open (else the name as given)."""
    directory = os.path.join(str(name_or_path), subfolder)
    if not os.path.isdir(directory):
        return str(name_or_path)
    for name in sorted(f for f in os.listdir(directory) if f.endswith(".safetensors")):
        try:
            with safe_open(os.path.join(directory, name), "pt") as f:
                for key in f.keys():
                    f.get_slice(key)
        except Exception:  # noqa: BLE001 -- this is the file that failed, whatever the error
            return os.path.join(directory, name)
    return directory


def save_pretrained(model, save: Callable, save_directory, *args, **kwargs) -> None:
    """``model.save_pretrained(save_directory, *args, **kwargs)``, where ``save`` is transformers'
    ``PreTrainedModel.save_pretrained`` bound to ``model``, plus the model's code beside the weights.

    Where the package is installed, its modules are written (:func:`avey_b.model.remote_code.write`); where this file runs
    as saved beside a model, without the package, transformers writes only the code files the loaded class needed
    (no heads after ``AutoModel``) while ``auto_map`` names every head: the other saved files are copied along."""
    try:
        from avey_b.model import remote_code
    except ImportError:  # this file as saved beside a model, run without the package
        save(save_directory, *args, **kwargs)
        _copy_saved_code(model.config, save_directory)
        return
    model.config.auto_map = remote_code.auto_map()
    save(save_directory, *args, **kwargs)
    if kwargs.get("is_main_process", True):
        remote_code.write(save_directory)
        honour_umask(*Path(save_directory).glob("*.safetensors"))


def _copy_saved_code(config, directory) -> None:
    """Copy the ``avey_b_*.py`` files that ``directory`` lacks from where this code and the model came from."""
    for source in (os.path.dirname(os.path.abspath(__file__)), str(getattr(config, "_name_or_path", "") or "")):
        if not source or not os.path.isdir(source):
            continue
        for name in os.listdir(source):
            target = os.path.join(str(directory), name)
            if name.startswith("avey_b_") and name.endswith(".py") and not os.path.exists(target):
                shutil.copyfile(os.path.join(source, name), target)
