"""int8 inference on CPU: an exported Avey-B ONNX model quantized by onnxruntime, checked against the eager model.

    avey-b export runs/quickstart/model served/ --head embedding --quantize int8   # onnx/model.onnx + model.int8.onnx

:func:`quantize_onnx` applies onnxruntime's dynamic quantization (``quantize_dynamic``: int8 weights, scaled once
at export, and uint8 activations, scaled per call from their range) to the model's weight MatMuls — the enricher
and fuser of every layer (§4.2) and the heads' projections, every ``MatMul`` whose ``B`` is a weight (the export
stores weights in the layout MatMul reads, :func:`avey_b.apps.export.fold_weight_layouts`) — but one block per layer:
the fuser's columns that read the mixed context ``c = Z_tl ⊙ σ(mix(Z_tr))`` (:data:`FP32_GROUPS`). ``c`` is a
product of two activations, so a few of its features are far larger than the rest, and a dynamic int8 scale (one
per call for the whole tensor) set by them rounds the others away: on a trained small model this block alone
moves the outputs to a cosine of 0.974 at 8,192 tokens, every other block together to 0.9992
(``benchmarks/quantization/drift.py``). Everything else stays
fp32: the embedding table and the ranker's similarity products (§3.1), so the retrieved splits are those of the
fp32 model; the static layers' ``V · Z`` and the compressor, whose weight is the left operand (onnxruntime's
quantizer reads only a right-hand weight); the dynamic layers' cosine products, which have no weight.

onnxruntime quantizes dynamically only in its "QOperator" form (``DynamicQuantizeMatMul`` / ``MatMulInteger``
nodes); the QDQ form takes calibrated, static activation ranges. ``benchmarks/quantization/`` records the
measurements behind these choices (per-channel weights, QOperator form).

onnxruntime's symbolic shape inference, which its pre-processing step (``python -m
onnxruntime.quantization.preprocess``) runs, stops on these graphs with a ``TypeError`` in ``_infer_Expand``: it
infers no shape for ``ReduceL2`` / ``ReduceMax`` with their axes as an input (opset 18) and then reads the
missing shape. The quantizer does not need it: :func:`quantize_onnx` quantizes the exported graph directly.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import torch

from avey_b.model.configuration import is_avey_b

# the blocks of a layer's weights (paper §4.2), in each enricher layout's order
from avey_b.model.layers import ENRICHER_BLOCKS, FUSER_BLOCKS

#: `avey-b export --quantize int8` fails below this mean cosine between int8 and eager outputs (trained models
#: measure 0.999+, benchmarks/quantization/); the smallest cosine is printed, not checked: a random tiny model has
#: single tokens whose output nearly cancels, where int8 noise turns the vector
MIN_MEAN_COSINE = 0.99
#: quantized file name beside the fp32 model: model.onnx -> model.int8.onnx
SUFFIX = ".int8.onnx"
#: onnxruntime ops that compute a MatMul on int8 operands (what the quantizer turns a weight MatMul into)
INTEGER_MATMULS = ("DynamicQuantizeMatMul", "MatMulInteger", "MatMulIntegerToFloat", "QLinearMatMul")


def quantized_path(path: str | Path) -> Path:
    """Where :func:`quantize_onnx` writes the int8 model of ``path``: ``model.onnx`` -> ``model.int8.onnx``."""
    path = Path(path)
    return path.with_name(path.name.removesuffix(".onnx") + SUFFIX)


def weight_matmuls(model) -> list[str]:
    """Names of the ``MatMul`` nodes of ``model`` (an ``onnx.ModelProto``) whose ``B`` is an initializer."""
    weights = {i.name for i in model.graph.initializer}
    return [n.name for n in model.graph.node if n.op_type == "MatMul" and n.input[1] in weights]


#: the weight MatMul groups :func:`quantize_onnx` keeps in fp32 by default (module docstring)
FP32_GROUPS = ("fuser.mix",)


def matmul_groups(model, config) -> dict[str, set[str]]:
    """The weight MatMul nodes of ``model`` (an ``onnx.ModelProto`` exported from an Avey-B model with ``config``)
    by group: ``enricher.bypass`` / ``enricher.gate`` / ``enricher.context`` (the enricher's row blocks computing
    ``Z_h``, ``Z_tl``, ``Z_tr``), ``fuser.bypass`` / ``fuser.mix`` (the fuser's column blocks reading ``Z_h`` and
    the mixed ``c``), each over every layer; ``layer<i>`` (all of layer ``i``'s); ``static`` / ``dynamic`` (the
    layers of that mixer); ``head`` (every other weight MatMul)."""
    layout = getattr(config, "enricher_layout", "paper")
    weight_of = {n.name: n.input[1] for n in model.graph.node if n.op_type == "MatMul"}
    groups: dict[str, set[str]] = {}
    for node in weight_matmuls(model):
        m = re.search(r"layers\.(\d+)\.(enricher|fuser)\.weight\.split(\d)", weight_of[node])
        if m is None:
            names = ["head"]
        else:
            layer, module = int(m[1]), m[2]
            part = (ENRICHER_BLOCKS if module == "enricher" else FUSER_BLOCKS)[layout][int(m[3])]
            names = [f"{module}.{part}", f"layer{layer}", config.mixer_types[layer]]
        for name in names:
            groups.setdefault(name, set()).add(node)
    return groups


def default_exclusions(model, config) -> set[str]:
    """The weight MatMuls of ``model`` (an ``onnx.ModelProto`` exported from an Avey-B model with ``config``) that
    :func:`quantize_onnx` keeps in fp32 by default: those of :data:`FP32_GROUPS` (module docstring)."""
    groups = matmul_groups(model, config)
    return set().union(*(groups.get(g, set()) for g in FP32_GROUPS))


def quantize_onnx(path: str | Path, config, out: str | Path | None = None, per_channel: bool = True,
                  exclude: Iterable[str] | None = None, reduce_range: bool = False,
                  extra_options: dict | None = None) -> Path:
    """Write the int8 model of the ONNX model ``path`` (exported from a model with ``config``; default output
    :func:`quantized_path`): every weight MatMul dynamically quantized but ``exclude`` (names of weight MatMul
    nodes kept in fp32; default: :func:`default_exclusions` for an Avey-B ``config``, none for another encoder's),
    nothing else (module docstring). ``per_channel``: one weight scale per output feature (as fast as one per
    matrix here, and closer to the fp32 model). ``reduce_range`` and ``extra_options`` go to onnxruntime's
    ``quantize_dynamic`` (``MatMulConstBOnly`` is always set). Returns the written path."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    path = Path(path)
    out = quantized_path(path) if out is None else Path(out)
    proto = onnx.load(str(path), load_external_data=False)
    nodes = weight_matmuls(proto)
    if not nodes:
        raise ValueError(f"{path}: no MatMul reads a weight initializer; export it with `avey-b export` (which "
                         "stores weights in the layout MatMul reads)")
    if exclude is None:
        exclude = default_exclusions(proto, config) if is_avey_b(config) else set()
    exclude = set(exclude)
    unknown = exclude - set(nodes)
    if unknown:
        raise ValueError(f"{path}: exclude names nodes that are not weight MatMuls: {sorted(unknown)}")
    nodes = [n for n in nodes if n not in exclude]
    if not nodes:  # onnxruntime reads an empty nodes_to_quantize as "every node"
        raise ValueError(f"{path}: exclude leaves no weight MatMul to quantize")
    root = logging.getLogger()  # the quantizer advises its pre-processing on the root logger (see module docstring)
    level = root.level
    root.setLevel(max(level, logging.ERROR))
    try:
        quantize_dynamic(path, out, weight_type=QuantType.QInt8, per_channel=per_channel,
                         op_types_to_quantize=["MatMul"],
                         nodes_to_quantize=nodes, reduce_range=reduce_range,
                         extra_options={**(extra_options or {}), "MatMulConstBOnly": True})
    finally:
        root.setLevel(level)
    return out


def _with_ranker_choice(path: str | Path) -> bytes:
    """The model at ``path`` with the indices of its ranker's ``TopK`` (the retrieved splits) as extra outputs
    named ``ranker_choice<i>``, serialized for an onnxruntime session."""
    import onnx

    model = onnx.load(str(path))
    topk = [n for n in model.graph.node if n.op_type == "TopK"]
    for i, node in enumerate(topk):
        name = f"ranker_choice{i}"
        model.graph.node.append(onnx.helper.make_node("Identity", [node.output[1]], [name]))
        model.graph.output.append(onnx.helper.make_tensor_value_info(name, onnx.TensorProto.INT64, None))
    return model.SerializeToString()


def compare_quantized(quantized: str | Path, reference: str | Path, eager, inputs) -> dict:
    """The int8 model ``quantized`` against the eager model and the fp32 ONNX model ``reference`` on ``inputs`` (a
    list of ``(input_ids, attention_mask)`` tensors): ``cosine`` (the smallest cosine between an int8 and an eager
    output vector: a real token's, or a pooled embedding's), ``mean_cosine``, ``median_cosine`` and
    ``identical_choices`` (the share of ranker choices, over every split of every input, equal to the fp32 ONNX
    model's). ``eager(input_ids, attention_mask)`` returns the ONNX model's outputs, in its order, from the eager
    model: :class:`avey_b.apps.export.Exportable` of the exported model and head."""
    import onnxruntime as ort

    sessions = [ort.InferenceSession(_with_ranker_choice(p), providers=["CPUExecutionProvider"])
                for p in (quantized, reference)]
    outputs = [o.name for o in sessions[0].get_outputs()]
    names = [n for n in outputs if not n.startswith("ranker_choice")]
    choice_names = [n for n in outputs if n.startswith("ranker_choice")]
    cosines, same, total = [], 0, 0
    for ids, mask in inputs:
        feed = {"input_ids": ids.numpy(), "attention_mask": mask.numpy()}
        got, want_choice = (s.run(names + choice_names, feed) for s in sessions)
        with torch.no_grad():
            want = eager(ids, mask)
        real = mask.bool().numpy()
        for g, w in zip(got[:len(names)], want if isinstance(want, tuple) else (want,), strict=False):
            g, w = (g[real], w.numpy()[real]) if g.ndim == 3 else (g, w.numpy())
            cos = (g * w).sum(-1) / np.maximum(np.linalg.norm(g, axis=-1) * np.linalg.norm(w, axis=-1), 1e-12)
            cosines.append(cos)
        for a, b in zip(got[len(names):], want_choice[len(names):], strict=True):
            same, total = same + int((a == b).sum()), total + a.size
    cos = np.concatenate(cosines)
    return {"cosine": float(cos.min()), "mean_cosine": float(cos.mean()), "median_cosine": float(np.median(cos)),
            "identical_choices": same / total if total else 1.0}


def quantize_eager_int8(model: torch.nn.Module) -> torch.nn.Module:
    """The eager model with int8 dynamic-activation / int8-weight linear layers (torchao's
    ``Int8DynamicActivationInt8WeightConfig``, the maintained successor of ``torch.ao``'s dynamic quantization):
    every ``nn.Linear`` (the enricher and fuser of every layer, the heads), in place; the embedding, the ranker, the
    static ``V`` and the compressor stay fp32. Needs ``pip install torchao``. Returns ``model``."""
    try:
        from torchao.quantization import Int8DynamicActivationInt8WeightConfig, quantize_
    except ImportError as e:
        raise ImportError("eager int8 needs torchao: pip install \"avey-b[torchao]\" (or torchao)") from e
    quantize_(model.eval(), Int8DynamicActivationInt8WeightConfig())
    return model
