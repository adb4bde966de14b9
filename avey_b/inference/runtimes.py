"""The two runtimes an :class:`avey_b.inference.encoder.Encoder` runs a padded batch in: the eager PyTorch model
(:class:`EagerRuntime`) or an exported ONNX model run by onnxruntime (:class:`OnnxRuntime`). Each answers the same
two questions: which outputs it has (``outputs``), and one output for a padded batch (``run``).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import torch

from avey_b.utils.device import autocast
from avey_b.utils.files import model_source

if TYPE_CHECKING:
    import onnxruntime

#: The one table of what a head gives: its class -> (the output its forward adds to the backbone's
#: ``last_hidden_state``, the kinds of answer read from that output). Every checkpoint also answers ``embed`` (from the
#: last hidden state, or an ONNX graph's ``sentence_embedding``); :attr:`avey_b.Encoder.kinds` derives from this,
#: where ``sparse`` needs the eager runtime and ``rerank`` a classifier with one label.
HEADS = {"AveyBForMaskedLM": ("logits", ("fill", "sparse")),
         "AveyBForSequenceClassification": ("logits", ("classify", "rerank")),
         "AveyBForTokenClassification": ("logits", ()),
         "AveyBForMultiVector": ("embeddings", ("multivector",)),
         # a query scored after a document of any length: rerank, by Encoder.score (the query's splits alone)
         "AveyBForQueryLastScoring": ("logits", ("rerank",))}
#: What each kind of answer but ``embed`` needs of the checkpoint, in words: what a refusal says.
NEEDS = {"classify": "a sequence-classification checkpoint (AveyBForSequenceClassification)",
         "rerank": "a cross-encoder: a sequence-classification checkpoint with one label (num_labels=1)",
         "fill": "a masked-LM checkpoint (AveyBForMaskedLM)",
         "sparse": "a masked-LM head for SPLADE's sparse vectors (an AveyBForMaskedLM: a pretrained Avey-B, or one "
                   "trained with `avey-b finetune --task sparse-embedding`; eager runtime, not --onnx)",
         "multivector": "a multi-vector head (AveyBForMultiVector: a token vector per token, scored by MaxSim), which "
                        "this model lacks: train one with `avey-b finetune --task multi-vector`"}
#: The inputs of an ``avey-b export`` graph, in order.
ONNX_INPUTS = ["input_ids", "attention_mask"]


class EagerRuntime:
    """The PyTorch model on a device, in float32 weights, run under bf16 autocast where ``bf16`` says so. Outputs:
    ``last_hidden_state`` (the backbone's), ``logits`` for a head that has them and ``embeddings`` (token vectors)
    for the multi-vector head."""

    def __init__(self, path: str, cls: type, device: torch.device, bf16: bool):
        self.path, self.cls, self.device, self.bf16 = path, cls, device, bf16
        self.outputs = ("last_hidden_state",) + ((HEADS[cls.__name__][0],) if cls.__name__ in HEADS else ())
        self.model = None

    def load(self) -> None:
        if self.model is None:
            with model_source(self.path):
                self.model = self.cls.from_pretrained(self.path, dtype=torch.float32).to(self.device).eval()

    @torch.no_grad()
    def run(self, output: str, batch: torch.Tensor, mask: torch.Tensor, fp32: bool = False) -> torch.Tensor:
        """``output`` for a padded batch, under bf16 autocast where ``bf16`` says so unless ``fp32``."""
        self.load()
        module = self.model.base_model if output == "last_hidden_state" else self.model
        with autocast(self.device, self.bf16 and not fp32):
            return getattr(module(input_ids=batch.to(self.device), attention_mask=mask.to(self.device)), output)


class OnnxRuntime:
    """An exported ONNX model (``avey-b export``, fp32 or ``--quantize int8``) run by onnxruntime on the CPU, in its
    own precision. Outputs: the graph's (``last_hidden_state``, ``sentence_embedding``, ``logits``).

    ``session_options``: the ``onnxruntime.SessionOptions`` the session starts with (default: onnxruntime's), its
    intra-op threads set to ``threads`` whatever they were."""

    def __init__(self, path: str, file: str, threads: int, session_options: onnxruntime.SessionOptions | None = None):
        self.file = Path(file) if file else Path(path) / "onnx" / "model.onnx"
        if not self.file.is_file():
            raise FileNotFoundError(f"no ONNX model at {self.file}" + ("" if file else
                                    f" (write one with `avey-b export {path} {path} --head embedding`, or name the "
                                    "file: --onnx FILE)"))
        self.threads, self.session_options, self.session = threads, session_options, None

    def load(self) -> None:
        import onnxruntime as ort

        if self.session is not None:
            return
        options = self.session_options or ort.SessionOptions()
        options.intra_op_num_threads = self.threads
        session = ort.InferenceSession(str(self.file), options, providers=["CPUExecutionProvider"])
        inputs = [i.name for i in session.get_inputs()]
        if inputs != ONNX_INPUTS:
            raise ValueError(f"{self.file}: inputs {inputs}, not input_ids and attention_mask: not an `avey-b "
                             "export` model")
        self.session = session

    @property
    def outputs(self) -> list[str]:
        self.load()
        return [o.name for o in self.session.get_outputs()]

    def run(self, output: str, batch: torch.Tensor, mask: torch.Tensor, fp32: bool = False) -> torch.Tensor:
        """``output`` for a padded batch, in the graph's own precision (``fp32``: for the eager runtime's sake)."""
        self.load()
        feed = {"input_ids": batch.cpu().numpy(), "attention_mask": mask.cpu().numpy()}
        return torch.from_numpy(self.session.run([output], feed)[0])
