"""Minimal reproduction: onnxruntime's symbolic shape inference stops with a TypeError on an opset-18 graph.

    python benchmarks/quantization/symbolic_shape_repro.py   # onnxruntime 1.32.0, onnx 1.23.2

``SymbolicShapeInference`` (run by ``python -m onnxruntime.quantization.preprocess``) infers no shape for
``ReduceL2`` when its axes are an input (opset 18): ``_onnx_infer_single_node`` passes initializers to onnx's
inference only for ``Unsqueeze``, and only ``ReduceSum`` / ``ReduceMean`` / ``ReduceProd`` have handlers of their
own (``ReduceMax``, ``ReduceL1``, ``ReduceSumSquare``, ... likewise). A following ``Expand`` then reads the missing
shape: ``_broadcast_shapes`` -> ``len(None)`` -> ``TypeError: object of type 'NoneType' has no len()``. The graph
is valid and onnx's own shape inference (strict) handles it. Every Avey-B export has this pattern
(``F.normalize``: ``ReduceL2`` -> ``Clip`` -> ``Expand``). Open upstream fix of the missing shapes:
microsoft/onnxruntime#32376 (seen 2026-11-25). ``avey-b export --quantize int8`` does not need the pre-processing.
"""

import onnx
from onnx import TensorProto, helper
from onnxruntime.tools.symbolic_shape_infer import SymbolicShapeInference

graph = helper.make_graph(
    [helper.make_node("ReduceL2", ["x", "axes"], ["norm"], keepdims=1),
     helper.make_node("Shape", ["x"], ["shape"]),
     helper.make_node("Expand", ["norm", "shape"], ["y"])],
    "repro",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])],
    [helper.make_tensor("axes", TensorProto.INT64, [1], [1])])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
onnx.checker.check_model(model, full_check=True)  # valid
print("onnx shape inference: ok", onnx.shape_inference.infer_shapes(model, strict_mode=True) is not None)
SymbolicShapeInference.infer_shapes(model, auto_merge=True)  # TypeError: object of type 'NoneType' has no len()
