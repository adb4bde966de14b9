"""One way in for inference: :class:`Encoder` loads a saved Avey-B (any head, or the bare backbone) and its
tokenizer once, and answers what the checkpoint can do — embeddings, token-level hidden states, logits — from the
eager PyTorch model or from an exported ONNX model run by onnxruntime. ``avey-b serve``, ``export`` and ``analyze``
load through it.

    from avey_b.apps.encoder import Encoder
    from avey_b.apps.options import LoadOptions

    encoder = Encoder("runs/quickstart/model", LoadOptions(precision="fp32")).load()
    batch, mask = encoder.pad(encoder.tokenize(["a good film", "bad"])["input_ids"])
    vectors = encoder.embed(batch, mask)                       # (2, d): the embedding head's vectors

Embeddings, whatever the head: the masked mean of the backbone's last hidden state, L2-normalized when the config
says ``normalize_embeddings`` (:func:`avey_b.model.heads.sentence_embedding`; for an embedding checkpoint exactly
its ``pooler_output``). An ONNX model embeds from its ``sentence_embedding`` output (``avey-b export --head
embedding``), else pools its ``last_hidden_state`` the same way.

The weights load on :meth:`Encoder.load` (or the first call that needs them), not in the constructor, which reads
only the config and checks it: a job can check its settings before paying for the weights, and a worker process
(embed's Ray actors) can build the encoder and load the weights once there.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from pathlib import Path

import torch
from transformers import AutoConfig, AutoTokenizer

from avey_b.apps.options import LoadOptions
from avey_b.model import auto
from avey_b.model.configuration import is_avey_b
from avey_b.model.heads import sentence_embedding
from avey_b.utils.batching import pad_right
from avey_b.utils.device import autocast, pick_device, runtime_line, set_cpu_threads, usable_cpus, use_bf16
from avey_b.utils.files import model_source
from avey_b.utils.shared_cpu import SharedCpuWatch, shared_cpu_message

#: What a head answers besides embeddings (every checkpoint embeds), from its logits.
LOGIT_KINDS = {"AveyBForMaskedLM": "fill", "AveyBForSequenceClassification": "classify"}
#: The heads whose output has ``logits``.
LOGIT_HEADS = ("AveyBForMaskedLM", "AveyBForSequenceClassification", "AveyBForTokenClassification")
ONNX_INPUTS = ["input_ids", "attention_mask"]


class EagerRuntime:
    """The PyTorch model on a device, in float32 weights, run under bf16 autocast where ``bf16`` says so. Outputs:
    ``last_hidden_state`` (the backbone's), and ``logits`` for a head that has them."""

    def __init__(self, path: str, cls: type, device: torch.device, bf16: bool):
        self.path, self.cls, self.device, self.bf16 = path, cls, device, bf16
        self.outputs = ("last_hidden_state", "logits") if cls.__name__ in LOGIT_HEADS else ("last_hidden_state",)
        self.model = None

    def load(self) -> None:
        if self.model is None:
            with model_source(self.path):
                self.model = self.cls.from_pretrained(self.path, dtype=torch.float32).to(self.device).eval()

    @torch.no_grad()
    def run(self, output: str, batch: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        self.load()
        module = self.model.base_model if output == "last_hidden_state" else self.model
        with autocast(self.device, self.bf16):
            return getattr(module(input_ids=batch.to(self.device), attention_mask=mask.to(self.device)), output)


class OnnxRuntime:
    """An exported ONNX model (``avey-b export``, fp32 or ``--quantize int8``) run by onnxruntime on the CPU, in its
    own precision. Outputs: the graph's (``last_hidden_state``, ``sentence_embedding``, ``logits``)."""

    def __init__(self, path: str, file: str, threads: int):
        self.file = Path(file) if file else Path(path) / "onnx" / "model.onnx"
        if not self.file.is_file():
            raise FileNotFoundError(f"no ONNX model at {self.file}" + ("" if file else
                                    f" (write one with `avey-b export {path} {path} --head embedding`, or name the "
                                    "file: --onnx FILE)"))
        self.threads, self.session = threads, None

    def load(self) -> None:
        import onnxruntime as ort

        if self.session is not None:
            return
        options = ort.SessionOptions()
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

    def run(self, output: str, batch: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        self.load()
        feed = {"input_ids": batch.cpu().numpy(), "attention_mask": mask.cpu().numpy()}
        return torch.from_numpy(self.session.run([output], feed)[0])


class Encoder:
    """A saved Avey-B and its tokenizer, loaded once, for inference.

    ``path``: a local directory or a Hub id (the authors' release checkpoints too). ``options``: device, precision,
    threads, runtime (:class:`avey_b.apps.options.LoadOptions`). ``architecture``: the class to load instead of the
    checkpoint's own (``config.architectures[0]``): ``"AveyBModel"`` for the backbone of any head's checkpoint,
    ``"AveyBForSentenceEmbedding"`` for a masked-LM's backbone with the embedding head, ...

    What it answers (``kinds``): ``embed`` (every checkpoint; with ONNX, a graph with ``sentence_embedding`` or
    ``last_hidden_state``), ``fill`` (a masked-LM's logits) and ``classify`` (a sequence classifier's logits).
    """

    def __init__(self, path: str | Path, options: LoadOptions | None = None, *, architecture: str | None = None):
        options = options or LoadOptions()
        self.path, self.name, self.options = Path(path), str(path), options
        with model_source(self.name):
            config = AutoConfig.from_pretrained(self.name)
        if not is_avey_b(config):
            raise ValueError(f"{self.name} holds a {getattr(config, 'model_type', None)!r} model "
                             f"({', '.join(config.architectures or [type(config).__name__])}), not an Avey-B: this "
                             "loads Avey-B checkpoints only")
        self.config = config
        self.architecture = architecture or (config.architectures or ["AveyBModel"])[0]
        cls = getattr(auto, self.architecture, None)
        if not (isinstance(cls, type) and issubclass(cls, auto.AveyBPreTrainedModel)):
            if architecture:
                raise ValueError(f"no Avey-B class {architecture!r}: use AveyBModel or one of its heads "
                                 f"({', '.join(n for n in auto.__all__ if n.startswith('AveyBFor'))})")
            self.architecture, cls = "AveyBModel", auto.AveyBModel  # a saved class this package does not have
        if options.onnx is not None:
            if options.device not in ("auto", "cpu") or options.precision == "bf16":
                raise ValueError("an ONNX model runs on the CPU in its own precision (onnxruntime): drop the device "
                                 "and bf16 precision")
            self.device, self.bf16 = torch.device("cpu"), False
            self.threads = options.threads or usable_cpus()
            self.runtime = OnnxRuntime(self.name, options.onnx, self.threads)
        else:
            self.device = pick_device(options.device)
            self.bf16 = use_bf16(options.precision, self.device)
            self.threads = set_cpu_threads(options.threads)  # PyTorch's CPU threads (for its CPU work on a GPU too)
            self.runtime = EagerRuntime(self.name, cls, self.device, self.bf16)
        self._watch: tuple[SharedCpuWatch, Callable[[str], None], str] | None = None

    def __repr__(self) -> str:
        return f"Encoder({self.name!r}, {self.architecture}, {self.runtime_name}, kinds={self.kinds})"

    # ------------------------------------------------------------------ loading
    def load(self) -> Encoder:
        """Load the weights (the eager model) or start the ONNX session, once; returns the encoder."""
        self.runtime.load()
        return self

    @property
    def model(self) -> torch.nn.Module:
        """The eager module (loaded on first use), for export and analysis."""
        if not isinstance(self.runtime, EagerRuntime):
            raise ValueError(f"{self.name} runs as the ONNX model {self.onnx_file}: there is no eager module")
        self.runtime.load()
        return self.runtime.model

    @property
    def runtime_name(self) -> str:
        return f"onnxruntime: {self.onnx_file}" if self.onnx_file else "eager"

    @property
    def onnx_file(self) -> Path | None:
        return self.runtime.file if isinstance(self.runtime, OnnxRuntime) else None

    def describe(self) -> str:
        """The start line of a verb that runs this encoder (:func:`avey_b.utils.device.runtime_line`): runtime,
        device, precision and CPU threads."""
        if self.onnx_file:
            precision = "int8" if ".int8." in self.onnx_file.name else "the ONNX model's precision"
            return runtime_line("cpu", precision, self.threads, runtime=f"onnxruntime ({self.onnx_file.name})")
        return runtime_line(self.device, "bf16 autocast" if self.bf16 else "fp32", self.threads)

    def watch_shared_cpu(self, report: Callable[[str], None], advice: str) -> None:
        """From now on, time every forward and say once, through ``report``, when they run far slower than the same
        work ran earlier (:class:`avey_b.utils.shared_cpu.SharedCpuWatch`: a CPU shared with other processes);
        ``advice``: how the verb changes its threads. Only on the CPU with several threads (one has nothing to
        change)."""
        if self.device.type == "cpu" and self.threads > 1:
            self._watch = (SharedCpuWatch(), report, advice)

    def _run(self, output: str, batch: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """The runtime's ``output`` for a padded batch, timed for the shared-CPU watch when one is on."""
        if self._watch is None:
            return self.runtime.run(output, batch, mask)
        t0 = time.perf_counter()
        result = self.runtime.run(output, batch, mask)
        watch, report, advice = self._watch
        rows, length = batch.shape
        if found := watch.add(float(mask.sum()), time.perf_counter() - t0, (rows.bit_length(), length.bit_length())):
            report(shared_cpu_message(*found, self.threads, "the model", advice))
        return result

    @functools.cached_property
    def kinds(self) -> list[str]:
        """What this checkpoint answers in this runtime: ``embed``, ``fill``, ``classify`` (in that order), and
        ``rerank`` for a sequence classifier with one label (``num_labels=1``), which scores (query, document) pairs
        as a cross-encoder."""
        outputs = self.runtime.outputs
        kinds = ["embed"] if {"sentence_embedding", "last_hidden_state"} & set(outputs) else []
        if "logits" in outputs and self.architecture in LOGIT_KINDS:
            kinds.append(LOGIT_KINDS[self.architecture])
            if kinds[-1] == "classify" and self.config.num_labels == 1:
                kinds.append("rerank")  # one score per input: a cross-encoder (sentence-transformers' CrossEncoder)
        if not kinds:
            raise ValueError(f"{self.onnx_file}: outputs {outputs} answer nothing for a {self.architecture}: export "
                             "it with --head embedding (embeddings), masked-lm or sequence-classification")
        return kinds

    @functools.cached_property
    def tokenizer(self):
        """The checkpoint's tokenizer (loaded on first use: export and analysis need none)."""
        with model_source(self.name, "tokenizer"):
            return AutoTokenizer.from_pretrained(self.name)

    # ------------------------------------------------------------------ inputs
    def tokenize(self, texts: list[str], offsets: bool = False):
        """The tokenizer's encoding of ``texts``, never truncated; ``offsets``: with each token's character span
        (``offset_mapping``, a fast tokenizer's) and the ``special_tokens_mask``."""
        if offsets and not self.tokenizer.is_fast:
            raise ValueError("character offsets need a fast tokenizer; this model's tokenizer is not a fast one")
        return self.tokenizer(texts, truncation=False, verbose=False, return_offsets_mapping=offsets,
                              return_special_tokens_mask=offsets)

    def check_ids(self, ids: list[list[int]]) -> None:
        """Token ids given by a client must index the model's embedding table (``ValueError`` naming the first
        that does not)."""
        vocab = self.config.vocab_size
        for i, row in enumerate(ids):
            if not row:
                raise ValueError(f"input {i} holds no token ids")
            for token in row:
                if not 0 <= token < vocab:
                    raise ValueError(f"input {i}: token id {token} is outside this model's vocabulary of {vocab:,} "
                                     f"ids (0 to {vocab - 1:,})")

    def pad(self, ids: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        """A right-padded batch of token-id rows and its attention mask (CPU)."""
        return pad_right(ids, self.tokenizer.pad_token_id)

    # ------------------------------------------------------------------ outputs
    def hidden_states(self, batch: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """(B, N, d) last hidden state of the backbone for a padded batch, on ``device`` (bf16 under bf16
        autocast): what late chunking pools per chunk."""
        if "last_hidden_state" not in self.runtime.outputs:
            raise ValueError(f"{self.onnx_file} has no last_hidden_state output: export it with --head base or "
                             "embedding")
        return self._run("last_hidden_state", batch.to(self.device), mask.to(self.device))

    def embed(self, batch: torch.Tensor, mask: torch.Tensor, normalize: bool | None = None) -> torch.Tensor:
        """(B, d) float32 embeddings of a padded batch, on ``device`` (see the module docstring). ``normalize``:
        L2-normalize or not, whatever the config says (None: as the config says)."""
        mask = mask.to(self.device)
        configured = bool(getattr(self.config, "normalize_embeddings", True))
        normalize = configured if normalize is None else normalize
        outputs = self.runtime.outputs
        if "sentence_embedding" in outputs and (normalize == configured or "last_hidden_state" not in outputs):
            if normalize != configured:
                raise ValueError(f"{self.onnx_file} gives only sentence_embedding, "
                                 f"{'' if configured else 'not '}normalized: export it with --head embedding")
            return self._run("sentence_embedding", batch, mask).float()
        hidden = self.hidden_states(batch, mask)
        return sentence_embedding(hidden.float(), mask, normalize)

    def logits(self, batch: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """The head's float32 logits of a padded batch, on the CPU."""
        if "logits" not in self.runtime.outputs:
            raise ValueError(f"{self.onnx_file} has no logits output: export it with --head masked-lm or "
                             "sequence-classification")
        return self._run("logits", batch.to(self.device), mask.to(self.device)).float().cpu()
