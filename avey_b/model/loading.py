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

The saving rule for sentence-transformers (:func:`sentence_transformers_files`), one for every directory the library
writes (pretraining, checkpoints, fine-tuning, ``avey-b export``, a user's ``save_pretrained``): the directory is
also a sentence-transformers model of the kind its head is for, tokenizer included.

* A one-label sequence classifier (``AveyBForSequenceClassification``, ``num_labels=1``: a reranker) is a
  ``CrossEncoder``: pairs encoded whole with the tokenizer's pair encoding, one score each (the logit; ``CrossEncoder``
  applies its sigmoid, which keeps the order).
* A masked-LM (``AveyBForMaskedLM``) whose ``config.embedding_kind`` is ``"sparse"`` (what ``avey-b finetune --task
  sparse-embedding`` saves) is a SPLADE ``SparseEncoder``: sentence-transformers' own ``Transformer`` module with
  the ``fill-mask`` task, whose ``modality_config`` names the head's ``splade`` method, so ``SparseEncoder(dir)``
  runs the library's chunked SPLADE max (:mod:`avey_b.model.sparse`) and gives the vocabulary-sized vectors of
  ``Encoder.sparse``, ``/embed_sparse`` and ``embed --outputs sparse``. ``embedding_kind="sparse"`` on another head
  is an error when saving: SPLADE needs the masked-LM head.
* The multi-vector head (``AveyBForMultiVector``) is a ``MultiVectorEncoder``: the backbone's last hidden state, the
  head's projection as a token-level ``Dense`` (its weights written into ``1_Dense/`` too, from the same tensor), a
  ``MultiVectorMask`` that keeps every real token and a token-level ``Normalize``: the head's ``embeddings`` at the
  real tokens.
* Every other head, and the bare backbone, is a ``SentenceTransformer`` whose vectors are the ones ``avey-b serve``
  and ``avey-b embed`` give for the directory: the backbone's last hidden state, mean-pooled over the real tokens,
  L2-normalized when ``config.normalize_embeddings`` (True by default) -- ``heads.sentence_embedding``,
  ``AveyBForSentenceEmbedding``'s ``pooler_output``. A pretrained masked-LM (``embedding_kind="dense"``, the
  default) is one of these: its ``Encoder`` still gives sparse vectors, but sentence-transformers reads one
  ``model_type`` per directory (``config_sentence_transformers.json``), so the directory is either a
  ``SentenceTransformer`` or a ``SparseEncoder``, never both. Each loads in the other class by
  sentence-transformers' conversion, which says so (``Converting SentenceTransformer model ... to SparseEncoder``)
  and builds another model: a ``SparseEncoder`` of a dense directory is a CSR autoencoder over the dense vector,
  not SPLADE; a ``SentenceTransformer`` of a sparse directory is the backbone's mean-pooled vector, not
  L2-normalized (``encode(..., normalize_embeddings=True)`` gives ``serve``'s vectors). To load a pretrained
  masked-LM as SPLADE, save it with ``model.config.embedding_kind = "sparse"``.
* Neither cuts inputs: the saved ``max_seq_length`` is one billion tokens.
* A sentence-transformers model saving itself (``MultiVectorEncoder.save``, ``SentenceTransformer.save``, their
  trainers' checkpoints) writes its own files for the modules it holds: the backbone's ``save_pretrained`` that it
  calls writes the weights and the code only (:func:`inside_sentence_transformers_save`), so the directory reloads
  as the model that was saved.
* The tokenizer: a model loaded from a local directory that holds one, saved where none is, takes a copy of it
  (``AveyBForSentenceEmbedding.from_pretrained(pretrained).save_pretrained(d)`` gives a directory that loads
  everywhere). A model built from a config has no tokenizer to copy: save yours beside it
  (``tokenizer.save_pretrained(d)``), as transformers asks of every model.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
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

    Weights are never unpickled: safetensors, or a ``.bin`` read by ``torch.load(weights_only=True)`` (tensors
    only; a file that needs more is refused), and ``weights_only=False`` is refused.
    """
    if kwargs.get("weights_only", True) is not True:
        raise ValueError("weights_only=False would unpickle the checkpoint (running any code it holds): Avey-B "
                         "loads safetensors, or a .bin with weights_only=True only")
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

    Where the package is installed, its modules are written (:func:`avey_b.model.remote_code.write`); where this file
    runs as saved beside a model, without the package, transformers writes only the code files the loaded class
    needed (no heads after ``AutoModel``) while ``auto_map`` names every head: the other saved files are copied
    along.

    Called by a sentence-transformers model saving itself (:func:`inside_sentence_transformers_save`), it writes
    the weights and the code only: that model writes its own directory files and tokenizer."""
    whole_directory = kwargs.get("is_main_process", True) and not inside_sentence_transformers_save()
    try:
        from avey_b.model import remote_code
    except ImportError:  # this file as saved beside a model, run without the package
        save(save_directory, *args, **kwargs)
        _copy_saved_code(model.config, save_directory)
        if whole_directory:
            write_sentence_transformers_files(model, save_directory)
        return
    model.config.auto_map = remote_code.auto_map()
    save(save_directory, *args, **kwargs)
    if kwargs.get("is_main_process", True):
        remote_code.write(save_directory)
        if whole_directory:
            write_sentence_transformers_files(model, save_directory)
            _copy_tokenizer(model.config, save_directory)
        honour_umask(*Path(save_directory).glob("*.safetensors"))


def inside_sentence_transformers_save() -> bool:
    """Whether this call runs inside a sentence-transformers ``save`` (its ``Transformer`` module saving the
    backbone it wraps, as ``SentenceTransformer.save``, ``MultiVectorEncoder.save``, ``CrossEncoder.save`` and
    their trainers' checkpoints do). Such a save writes the directory's sentence-transformers files itself, for the
    modules it holds: ``config_sentence_transformers.json`` before the backbone's ``save_pretrained``,
    ``modules.json``, ``sentence_bert_config.json``, the other modules' folders and the tokenizer after. The files
    of :func:`sentence_transformers_files` describe the backbone's own class (a bare ``AveyBModel`` is a mean-pooling
    ``SentenceTransformer``), so written there they would overwrite the model's type and leave modules it lacks."""
    if "sentence_transformers" not in sys.modules:
        return False
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "save" and frame.f_globals.get("__name__", "").startswith("sentence_transformers."):
            return True
        frame = frame.f_back
    return False


def _copy_saved_code(config, directory) -> None:
    """Copy the ``avey_b_*.py`` files that ``directory`` lacks from where this code and the model came from."""
    for source in (os.path.dirname(os.path.abspath(__file__)), str(getattr(config, "_name_or_path", "") or "")):
        if not source or not os.path.isdir(source):
            continue
        for name in os.listdir(source):
            target = os.path.join(str(directory), name)
            if name.startswith("avey_b_") and name.endswith(".py") and not os.path.exists(target):
                shutil.copyfile(os.path.join(source, name), target)


#: sentence-transformers truncates inputs to its ``max_seq_length``; Avey-B has no length limit, so a saved directory
#: says one billion tokens (its ``null`` would fall back to the tokenizer's, often 512).
SENTENCE_TRANSFORMERS_MAX_LENGTH = 1_000_000_000
#: The text method of a SPLADE directory's ``Transformer`` module (sentence-transformers' ``modality_config``): the
#: masked-LM head's chunked ``splade``, whose ``sparse_embedding`` is the module's ``sentence_embedding``.
SPLADE_MODALITY = {"text": {"method": "splade", "method_output_name": "sparse_embedding"}}
#: Files that say a directory holds a tokenizer (transformers writes ``tokenizer_config.json`` for every one).
TOKENIZER_FILES = ("tokenizer_config.json", "tokenizer.json")


def is_cross_encoder(model) -> bool:
    """Whether ``model`` (a saved head) is a reranker: a sequence classifier with one label."""
    return type(model).__name__ == "AveyBForSequenceClassification" and model.config.num_labels == 1


def is_multi_vector(model) -> bool:
    """Whether ``model`` (a saved head) is the multi-vector head (:mod:`avey_b.model.multivector`)."""
    return type(model).__name__ == "AveyBForMultiVector"


def _multi_vector_files(model) -> dict[str, object]:
    """A ``MultiVectorEncoder`` as sentence-transformers 6 writes one for a plain transformer and a projection (the
    ``Dense`` weights: :func:`write_sentence_transformers_files`)."""
    module = "sentence_transformers.{}"
    modules = [("", "base.modules.transformer.Transformer"), ("1_Dense", "base.modules.dense.Dense"),
               ("2_MultiVectorMask", "multi_vector_encoder.modules.multi_vector_mask.MultiVectorMask"),
               ("3_Normalize", "base.modules.normalize.Normalize")]
    tokens = {"module_input_name": "token_embeddings", "module_output_name": "token_embeddings"}
    return {
        "modules.json": [{"idx": i, "name": str(i), "path": path, "type": module.format(kind)}
                         for i, (path, kind) in enumerate(modules)],
        "sentence_bert_config.json": {
            "transformer_task": "feature-extraction",
            "modality_config": {"text": {"method": "forward", "method_output_name": "last_hidden_state"}},
            "module_output_name": "token_embeddings", "max_seq_length": SENTENCE_TRANSFORMERS_MAX_LENGTH},
        "config_sentence_transformers.json": {"model_type": "MultiVectorEncoder", "similarity_fn_name": "maxsim"},
        "1_Dense/config.json": {"in_features": model.config.hidden_size, "out_features": model.config.multivector_dim,
                                "bias": False, "activation_function": "torch.nn.modules.linear.Identity", **tokens},
        "2_MultiVectorMask/config.json": {"skiplist_words": [], "skiplist_tasks": ["document"],
                                          "keep_only_token_ids": None},
        "3_Normalize/config.json": tokens,
    }


def sentence_transformers_files(model) -> dict[str, object]:
    """The sentence-transformers files (name -> JSON content) that make ``model``'s saved directory load in the
    class of its kind, with what ``serve`` and ``embed`` compute (the module docstring states the rule).

    A ``SentenceTransformer`` is written in the format sentence-transformers has read since its 2.x releases
    (``modules.json``, ``1_Pooling/``, ``2_Normalize/``, ``sentence_bert_config.json``); a ``CrossEncoder`` as
    sentence-transformers 6 writes one (``model_type`` in ``config_sentence_transformers.json``, the transformer's
    task in ``sentence_bert_config.json``; earlier versions load a cross-encoder from ``config.json`` alone); a
    ``MultiVectorEncoder`` as sentence-transformers 6 writes one (the class is new in 6)."""
    if is_cross_encoder(model):
        return {
            "modules.json": [{"idx": 0, "name": "0", "path": "",
                              "type": "sentence_transformers.base.modules.transformer.Transformer"}],
            "sentence_bert_config.json": {
                "transformer_task": "sequence-classification",
                "modality_config": {"text": {"method": "forward", "method_output_name": "logits"}},
                "module_output_name": "scores", "max_seq_length": SENTENCE_TRANSFORMERS_MAX_LENGTH},
            "config_sentence_transformers.json": {"model_type": "CrossEncoder",
                                                  "activation_fn": "torch.nn.modules.activation.Sigmoid"},
        }
    if getattr(model.config, "embedding_kind", "dense") == "sparse":
        return sparse_encoder_files(model)
    if is_multi_vector(model):
        return _multi_vector_files(model)
    normalize = bool(model.config.normalize_embeddings)
    modules = [("", "Transformer"), ("1_Pooling", "Pooling")] + ([("2_Normalize", "Normalize")] if normalize else [])
    files = {
        "modules.json": [{"idx": i, "name": str(i), "path": path, "type": f"sentence_transformers.models.{kind}"}
                         for i, (path, kind) in enumerate(modules)],
        "sentence_bert_config.json": {"max_seq_length": SENTENCE_TRANSFORMERS_MAX_LENGTH, "do_lower_case": False},
        "config_sentence_transformers.json": {"model_type": "SentenceTransformer", "similarity_fn_name": "cosine"},
        "1_Pooling/config.json": {"word_embedding_dimension": model.config.hidden_size,
                                  "pooling_mode_mean_tokens": True, "pooling_mode_cls_token": False,
                                  "pooling_mode_max_tokens": False, "pooling_mode_mean_sqrt_len_tokens": False,
                                  "pooling_mode_weightedmean_tokens": False, "pooling_mode_lasttoken": False,
                                  "include_prompt": True},
    }
    if normalize:
        files["2_Normalize/config.json"] = {}
    return files


def sparse_encoder_files(model) -> dict[str, object]:
    """A SPLADE ``SparseEncoder``'s files for a masked-LM (the module docstring states the rule): one ``Transformer``
    module whose text method is the head's ``splade`` (``sparse_embedding``: the chunked max of
    :func:`avey_b.model.sparse.splade_max`), dot-product scoring as SPLADE's."""
    if type(model).__name__ != "AveyBForMaskedLM":
        raise ValueError(f"config.embedding_kind='sparse' needs the masked-LM head (AveyBForMaskedLM) for SPLADE; "
                         f"a {type(model).__name__} has none: save it with embedding_kind='dense'")
    return {
        "modules.json": [{"idx": 0, "name": "0", "path": "",
                          "type": "sentence_transformers.base.modules.transformer.Transformer"}],
        "sentence_bert_config.json": {
            "transformer_task": "fill-mask",
            "modality_config": SPLADE_MODALITY,
            "module_output_name": "sentence_embedding", "max_seq_length": SENTENCE_TRANSFORMERS_MAX_LENGTH},
        "config_sentence_transformers.json": {"model_type": "SparseEncoder", "similarity_fn_name": "dot"},
    }


def write_sentence_transformers_files(model, directory) -> None:
    """Write :func:`sentence_transformers_files` into ``directory`` (a model directory ``save_pretrained`` filled).
    Files of the other kind, left by an earlier save of another head into the same directory, are removed. A
    multi-vector head's projection is written as the ``Dense`` module's weights (``1_Dense/model.safetensors``)."""
    from safetensors.torch import save_file

    directory = Path(directory)
    files = sentence_transformers_files(model)
    for stale in ("1_Pooling/config.json", "2_Normalize/config.json", "1_Dense/config.json",
                  "1_Dense/model.safetensors", "2_MultiVectorMask/config.json", "3_Normalize/config.json"):
        if stale.replace("model.safetensors", "config.json") not in files and (directory / stale).is_file():
            (directory / stale).unlink()
    for name, content in files.items():
        (directory / name).parent.mkdir(parents=True, exist_ok=True)
        (directory / name).write_text(json.dumps(content, indent=2) + "\n")
    if is_multi_vector(model):
        weight = model.projection.weight.detach().to("cpu", torch.float32).contiguous()
        save_file({"linear.weight": weight}, str(directory / "1_Dense" / "model.safetensors"))


def _copy_tokenizer(config, directory) -> None:
    """Save the tokenizer of the local directory the model was loaded from into ``directory`` when ``directory``
    holds none (see the module docstring)."""
    source = str(getattr(config, "_name_or_path", "") or "")
    directory = Path(directory)
    if (not source or not os.path.isdir(source) or Path(source).resolve() == directory.resolve()
            or any((directory / f).is_file() for f in TOKENIZER_FILES)
            or not any(os.path.isfile(os.path.join(source, f)) for f in TOKENIZER_FILES)):
        return
    from transformers import AutoTokenizer

    AutoTokenizer.from_pretrained(source).save_pretrained(directory)
