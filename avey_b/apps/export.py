"""``avey-b export``: an Avey-B checkpoint as an ONNX model (or a ``torch.export`` program) for every length.

    avey-b export runs/quickstart/model model.onnx                      # encoder: last_hidden_state
    avey-b export runs/quickstart/model mlm.onnx --head masked-lm       # logits
    avey-b export runs/quickstart/model model.pt2 --format torch        # torch.export program
    avey-b export runs/quickstart/model served/ --head embedding        # a directory for ONNX-based servers

``--head embedding`` writes a directory: ``onnx/model.onnx`` (outputs ``last_hidden_state`` and
``sentence_embedding``, the embedding head's masked mean pooling and L2 normalization) beside ``config.json``, the
weights, the tokenizer files and the sentence-transformers configuration (``modules.json``, ``1_Pooling/``).

The exported graph takes ``input_ids`` and ``attention_mask`` of shape (batch, length) with both dimensions
dynamic, and runs at every length (1 token, fewer than ``k + 1`` splits, many ranker blocks) and batch size,
with padding on any side. Inside the graph the ranker's choice is one loop-free computation over all splits:
with the default ``ranker_algorithm`` it factors MaxSim through the batch's ``U`` distinct token ids, so it holds
``U × N`` similarities, where ``ranker_algorithm="dense"`` holds ``N²`` (measurements:
benchmarks/vocabulary_ranker/README.md); export for the lengths a deployment serves, and use the eager or
``torch.compile`` model (capped ranker memory) for longer inputs.

Every weight is stored in the layout its MatMul reads (:func:`fold_weight_layouts`: no run-time Split or
Transpose of a weight), so that onnxruntime's quantizer sees the weights; ``--quantize int8`` also writes
``model.int8.onnx`` beside the model (:mod:`avey_b.apps.quantize`).

After writing, the ONNX model is run with onnxruntime at a few lengths and compared with the eager model
(``--no-verify`` skips it). TorchScript-based export (``torch.onnx.export(..., dynamo=False)``) is refused by the
model with an error: a trace would freeze the split count.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import warnings
from pathlib import Path

import numpy as np
import torch
import torch.export

from avey_b import configs
from avey_b.apps.export_options import ExportOptions
from avey_b.apps.quantize import MIN_MEAN_COSINE, compare_quantized, quantize_onnx
from avey_b.inference.encoder import Encoder
from avey_b.inference.options import LoadOptions

#: --head (avey_b.apps.export_options.EXPORT_HEADS) -> (the class that loads the checkpoint, {graph output name: model
#: output field})
EXPORT_HEADS = {"base": ("AveyBModel", {"last_hidden_state": "last_hidden_state"}),
                "masked-lm": ("AveyBForMaskedLM", {"logits": "logits"}),
                "sequence-classification": ("AveyBForSequenceClassification", {"logits": "logits"}),
                "token-classification": ("AveyBForTokenClassification", {"logits": "logits"}),
                "embedding": ("AveyBForSentenceEmbedding", {"last_hidden_state": "last_hidden_state",
                                                            "sentence_embedding": "pooler_output"})}
VERIFY_LENGTHS = (1, 7, 100, 1100)


#: What the exporter's stack reports on every Avey-B export that is known and harmless to its user, silenced
#: during the export: (logger, start of the message) for log records, (category, message regex) for warnings.
#: Everything else it reports still shows.
HARMLESS_LOG_RECORDS = [
    # torch.onnx registers torchvision's operators when torchvision is installed; Avey-B uses none of them
    ("torch.onnx._internal.exporter._registration", "torchvision is not installed. Skipping"),
    # onnxscript's optimizer leaves constant Split nodes (several outputs) unfolded: a
    # missed optimization, not an error (the graph is checked against the eager model after writing)
    ("onnxscript.optimizer._constant_folding", "Skipping constant folding for op %s with multiple outputs"),
]
HARMLESS_WARNINGS = [
    # torch's own pytree code still uses its deprecated LeafSpec while exporting: nothing the user can change
    (FutureWarning, r"`isinstance\(treespec, LeafSpec\)` is deprecated"),
    # input_ids and attention_mask share the `batch` and `length` axes, named once: the graph's inputs and outputs
    # carry those names (the warning is about not naming them twice)
    (UserWarning, r"# The axis name: (batch|length) will not be used, since it shares the same shape constraints"),
]


class _DropRecords(logging.Filter):
    def __init__(self, starts: str):
        super().__init__()
        self.starts = starts

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(self.starts)


@contextlib.contextmanager
def quiet_known_exporter_noise():
    """Silence :data:`HARMLESS_LOG_RECORDS` and :data:`HARMLESS_WARNINGS` (and nothing else) inside the block."""
    filters = [(logging.getLogger(name), _DropRecords(starts)) for name, starts in HARMLESS_LOG_RECORDS]
    with warnings.catch_warnings():
        for category, message in HARMLESS_WARNINGS:
            warnings.filterwarnings("ignore", message=message, category=category)
        for logger, f in filters:
            logger.addFilter(f)
        try:
            yield
        finally:
            for logger, f in filters:
                logger.removeFilter(f)


def _outputs(output: str | dict[str, str]) -> dict[str, str]:
    return {output: output} if isinstance(output, str) else dict(output)


class Exportable(torch.nn.Module):
    """``(input_ids, attention_mask) -> tensor(s)`` around any Avey-B model (the interface of the export).
    ``output``: a model output field, or {graph output name: field} for several outputs (returned in that order)."""

    def __init__(self, model: torch.nn.Module, output: str | dict[str, str]):
        super().__init__()
        self.model, self.fields = model, list(_outputs(output).values())

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor):
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, return_dict=True)
        values = tuple(getattr(out, field) for field in self.fields)
        return values[0] if len(values) == 1 else values


def _example(model) -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.randint(0, model.config.vocab_size, (2, 3 * model.config.split_size + 1),
                        generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[1, ids.shape[1] // 2:] = 0
    return ids, mask


def _dynamic():
    batch, length = torch.export.Dim("batch", min=1), torch.export.Dim("length", min=1)
    return {"input_ids": {0: batch, 1: length}, "attention_mask": {0: batch, 1: length}}


def export_program(model: torch.nn.Module, output: str = "last_hidden_state") -> torch.export.ExportedProgram:
    """A ``torch.export`` program of ``model`` with dynamic batch and length."""
    wrapped = Exportable(model.eval(), output).eval()
    with quiet_known_exporter_noise():
        return torch.export.export(wrapped, _example(model), dynamic_shapes=_dynamic())


def fold_weight_layouts(model) -> int:
    """Store each weight in the layout its consumer reads: every ``Split`` or ``Transpose`` node whose input is an
    initializer (the processor splits the enricher and fuser weights into blocks, and ``F.linear`` transposes each
    block) becomes the initializers it would compute, named ``<weight>.split<i>`` / ``<weight>.T``. The exporter's
    own constant folding skips multi-output ``Split`` nodes, which leaves every weight reaching its MatMul through
    run-time ops; onnxruntime's quantizer only quantizes a MatMul whose ``B`` is an initializer. ``model``: an
    ``onnx_ir`` model (``ONNXProgram.model``), changed in place. Returns the number of nodes folded. A weight also
    read as it is (the masked-LM decoder tied to the embedding table) is then stored in both layouts."""
    import onnx_ir as ir
    from onnx_ir.passes.common import RemoveUnusedNodesPass

    graph, folded = model.graph, 0
    for node in list(graph):  # topological order: a Transpose of a folded Split output is folded next
        if node.domain not in ("", "ai.onnx") or node.op_type not in ("Split", "Transpose"):
            continue
        x = node.inputs[0]
        if x is None or not x.is_initializer() or x.const_value is None or any(
                out.is_graph_output() for out in node.outputs):
            continue
        weight = x.const_value.numpy()
        if node.op_type == "Transpose":
            perm = node.attributes.get_ints("perm", tuple(reversed(range(weight.ndim))))
            arrays, names = [weight.transpose(perm)], [f"{x.name}.T"]
        else:
            sizes = node.inputs[1] if len(node.inputs) > 1 else None
            if sizes is None or sizes.const_value is None:
                continue  # equal parts (num_outputs): the exporter writes sizes for torch's split
            arrays = np.split(weight, np.cumsum(sizes.const_value.numpy())[:-1],
                              axis=node.attributes.get_int("axis", 0))
            names = [f"{x.name}.split{i}" for i in range(len(arrays))]
        for out, array, name in zip(node.outputs, arrays, names, strict=True):
            array = np.ascontiguousarray(array)
            value = ir.Value(name=name, shape=ir.Shape(array.shape), type=ir.TensorType(x.dtype),
                             const_value=ir.tensor(array, name=name))
            graph.register_initializer(value)
            out.replace_all_uses_with(value)
        graph.remove(node, safe=True)
        folded += 1
    RemoveUnusedNodesPass()(model)  # the unsplit weights, now unused
    return folded


def export_onnx(model: torch.nn.Module, path: str | Path, output: str | dict[str, str] = "last_hidden_state") -> Path:
    """Write ``model`` as ONNX (dynamo exporter) with dynamic ``batch`` and ``length`` axes; ``output`` as in
    :class:`Exportable` (its names are the graph's output names). Weights are stored in the layout their MatMul
    reads (:func:`fold_weight_layouts`)."""
    wrapped = Exportable(model.eval(), output).eval()
    with quiet_known_exporter_noise():
        program = torch.onnx.export(wrapped, _example(model), dynamo=True, dynamic_shapes=_dynamic(),
                                    input_names=["input_ids", "attention_mask"], output_names=list(_outputs(output)))
    fold_weight_layouts(program.model)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    program.save(str(path))
    return path


def verifiable_lengths(model, lengths=VERIFY_LENGTHS) -> list[int]:
    """The ``lengths`` :func:`verify_onnx` checks: those a row of distinct non-padding ids can fill (so that no two
    splits tie exactly in the ranker)."""
    return [n for n in lengths if n <= model.config.vocab_size - 1]


def verification_inputs(model, lengths=VERIFY_LENGTHS) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The inputs :func:`verify_onnx` runs: at each of :func:`verifiable_lengths`, 2 rows of distinct non-padding ids
    (seeded by the length), the second half padding."""
    inputs = []
    for n in verifiable_lengths(model, lengths):
        gen = torch.Generator().manual_seed(n)
        ids = torch.stack([torch.randperm(model.config.vocab_size - 1, generator=gen)[:n] + 1 for _ in range(2)])
        mask = torch.ones_like(ids)
        mask[1, max(1, n // 2):] = 0
        inputs.append((ids, mask))
    return inputs


def verify_onnx(path: str | Path, model: torch.nn.Module, output: str | dict[str, str], lengths=VERIFY_LENGTHS,
                atol: float = 1e-4) -> float:
    """Largest |ONNX - eager| over every output (per-token outputs: real tokens only) at ``lengths`` (batch 2, one
    row half padding); raises past ``atol``. Inputs use distinct token ids, so that no two splits tie exactly in
    the ranker."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    worst = 0.0
    for ids, mask in verification_inputs(model, lengths):
        n = ids.shape[1]
        got = session.run(list(_outputs(output)), {"input_ids": ids.numpy(), "attention_mask": mask.numpy()})
        with torch.no_grad():
            want = Exportable(model, output)(ids, mask)
        real = mask.bool().numpy()
        for name, g, w in zip(_outputs(output), got, want if isinstance(want, tuple) else (want,), strict=True):
            diff = np.abs(g - w.numpy())
            err = float((diff[real] if diff.ndim == 3 else diff).max())
            if err > atol:
                raise AssertionError(f"{path}: ONNX output {name!r} differs from the eager model by {err:.2e} at "
                                     f"length {n}")
            worst = max(worst, err)
    return worst


def export_embedding_directory(encoder: Encoder, directory: str | Path) -> Path:
    """A directory ONNX-based servers and loaders read: ``onnx/model.onnx`` (``last_hidden_state`` and
    ``sentence_embedding``) beside what ``save_pretrained`` writes for the embedding head (config, weights, code,
    sentence-transformers configuration) and the checkpoint's tokenizer when it has one. ``encoder``: the
    checkpoint loaded as ``AveyBForSentenceEmbedding``. Returns the ONNX path."""
    directory = Path(directory)
    encoder.model.save_pretrained(directory)
    try:
        encoder.tokenizer.save_pretrained(directory)
    except (OSError, ValueError):
        print(f"note: {encoder.name} has no tokenizer; add its files to {directory} before serving")
    return export_onnx(encoder.model, directory / "onnx" / "model.onnx", EXPORT_HEADS["embedding"][1])


def check_quantized(quantized: str | Path, reference: str | Path, model, output) -> dict:
    """:func:`avey_b.apps.quantize.compare_quantized` on the inputs :func:`verify_onnx` runs; raises when a ranker
    choice differs from the fp32 model's (the ranker must stay fp32) or the mean cosine is below
    :data:`avey_b.apps.quantize.MIN_MEAN_COSINE`."""
    check = compare_quantized(quantized, reference, Exportable(model, output), verification_inputs(model))
    if check["identical_choices"] < 1.0:
        raise AssertionError(f"{quantized}: {1 - check['identical_choices']:.2%} of the ranker choices differ from "
                             f"the fp32 model's {reference}")
    if check["mean_cosine"] < MIN_MEAN_COSINE:
        raise AssertionError(f"{quantized}: mean cosine with the eager model {check['mean_cosine']:.4f} < "
                             f"{MIN_MEAN_COSINE}")
    return check


def export(model: str, out: str, options: ExportOptions) -> Path:
    """Write the checkpoint ``model`` (a directory or Hub id) as ``options`` say to ``out``; returns the path
    written (the ONNX model's, for ``--head embedding`` inside the directory ``out``)."""
    loader, output = EXPORT_HEADS[options.head]
    encoder = Encoder(model, LoadOptions(device="cpu", precision="fp32"), architecture=loader)
    module = encoder.model
    if options.format == "torch":
        torch.export.save(export_program(module, output), out)
        print(f"wrote {out} (torch.export program; dynamic batch and length)")
        return Path(out)
    if options.head == "embedding":
        path = export_embedding_directory(encoder, out)
    else:
        path = export_onnx(module, out, output)
    print(f"wrote {path} (ONNX; inputs input_ids, attention_mask: (batch, length), both dynamic; outputs "
          f"{', '.join(output)})")
    if options.verify:
        err = verify_onnx(path, module, output)
        print(f"onnxruntime matches the eager model at lengths {verifiable_lengths(module)}: max |diff| {err:.1e}")
    if options.quantize:
        quantized = quantize_onnx(path, module.config)
        print(f"wrote {quantized} (int8 weight MatMuls but the fuser's mixed-context block; embedding and ranker "
              "in fp32)")
        if options.verify:
            check = check_quantized(quantized, path, module, output)
            print(f"int8 against the eager model at lengths {verifiable_lengths(module)}: cosine min "
                  f"{check['cosine']:.4f}, mean {check['mean_cosine']:.5f}; ranker choices identical to the fp32 "
                  f"model's: {check['identical_choices']:.1%}")
    return path


def run(args: argparse.Namespace) -> int:
    """``avey-b export MODEL OUT``."""
    export(args.model, args.out, configs.from_args(ExportOptions, args))
    return 0
