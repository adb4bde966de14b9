"""``avey-b export``: an Avey-B checkpoint as an ONNX model (or a ``torch.export`` program) for every length.

    avey-b export runs/quickstart/model model.onnx                      # encoder: last_hidden_state
    avey-b export runs/quickstart/model mlm.onnx --head masked-lm       # logits
    avey-b export runs/quickstart/model model.pt2 --format torch        # torch.export program

The exported graph takes ``input_ids`` and ``attention_mask`` of shape (batch, length) with both dimensions
dynamic, and runs at every length (1 token, fewer than ``k + 1`` splits, many ranker blocks) and batch size,
with padding on any side. Inside the graph the ranker's choice is one loop-free computation over all splits:
with the default ``ranker_algorithm`` it factors MaxSim through the batch's ``U`` distinct token ids, so it holds
``U × N`` similarities (the small config on 16K tokens of English text: 0.7 GB peak and 0.84 s in onnxruntime,
against 3.2 GB and 7.97 s for ``ranker_algorithm="dense"``, which holds ``N²``); export for the lengths a deployment serves, and use the eager
or ``torch.compile`` model (capped ranker memory) for longer inputs.

After writing, the ONNX model is run with onnxruntime at a few lengths and compared with the eager model
(``--no-verify`` skips it). TorchScript-based export (``torch.onnx.export(..., dynamo=False)``) is refused by the
model with an error: a trace would freeze the split count.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

HEADS = {"base": ("AutoModel", "last_hidden_state"), "masked-lm": ("AutoModelForMaskedLM", "logits"),
         "sequence-classification": ("AutoModelForSequenceClassification", "logits"),
         "token-classification": ("AutoModelForTokenClassification", "logits")}
VERIFY_LENGTHS = (1, 7, 100, 1100)


class Exportable(torch.nn.Module):
    """``(input_ids, attention_mask) -> one tensor`` around any Avey-B model (the interface of the export)."""

    def __init__(self, model: torch.nn.Module, output: str):
        super().__init__()
        self.model, self.output = model, output

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return getattr(self.model(input_ids=input_ids, attention_mask=attention_mask, return_dict=True), self.output)


def _example(model) -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.randint(0, model.config.vocab_size, (2, 3 * model.config.split_size + 1),
                        generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[1, ids.shape[1] // 2:] = 0
    return ids, mask


def _dynamic():
    from torch.export import Dim

    batch, length = Dim("batch", min=1), Dim("length", min=1)
    return {"input_ids": {0: batch, 1: length}, "attention_mask": {0: batch, 1: length}}


def export_program(model: torch.nn.Module, output: str = "last_hidden_state") -> torch.export.ExportedProgram:
    """A ``torch.export`` program of ``model`` with dynamic batch and length."""
    wrapped = Exportable(model.eval(), output).eval()
    return torch.export.export(wrapped, _example(model), dynamic_shapes=_dynamic())


def export_onnx(model: torch.nn.Module, path: str | Path, output: str = "last_hidden_state") -> Path:
    """Write ``model`` as ONNX (dynamo exporter) with dynamic ``batch`` and ``length`` axes."""
    wrapped = Exportable(model.eval(), output).eval()
    program = torch.onnx.export(wrapped, _example(model), dynamo=True, dynamic_shapes=_dynamic(),
                                input_names=["input_ids", "attention_mask"], output_names=[output])
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    program.save(str(path))
    return path


def verify_onnx(path: str | Path, model: torch.nn.Module, output: str, lengths=VERIFY_LENGTHS,
                atol: float = 1e-4) -> float:
    """Largest |ONNX - eager| over real tokens at ``lengths`` (batch 2, one row half padding); raises past ``atol``.
    Inputs use distinct token ids, so that no two splits tie exactly in the ranker."""
    import numpy as np
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    worst = 0.0
    for n in lengths:
        if n > model.config.vocab_size - 1:
            continue
        gen = torch.Generator().manual_seed(n)
        ids = torch.stack([torch.randperm(model.config.vocab_size - 1, generator=gen)[:n] + 1 for _ in range(2)])
        mask = torch.ones_like(ids)
        mask[1, max(1, n // 2):] = 0
        got = session.run(None, {"input_ids": ids.numpy(), "attention_mask": mask.numpy()})[0]
        with torch.no_grad():
            want = Exportable(model, output)(ids, mask).numpy()
        real = mask.bool().numpy()
        err = float(np.abs(got - want)[real].max())
        if err > atol:
            raise AssertionError(f"{path}: ONNX output differs from the eager model by {err:.2e} at length {n}")
        worst = max(worst, err)
    return worst


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="avey-b export", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("model", help="an Avey-B checkpoint (local directory or Hub id; release checkpoints too)")
    p.add_argument("out", help="output file (.onnx, or .pt2 with --format torch)")
    p.add_argument("--head", choices=list(HEADS), default="base", help="which model and output to export")
    p.add_argument("--format", choices=("onnx", "torch"), default="onnx")
    p.add_argument("--no-verify", action="store_true", help="skip the onnxruntime comparison with the eager model")
    args = p.parse_args(argv)

    import transformers

    import avey_b  # noqa: F401  (registers Avey-B with the Auto classes)

    auto, output = HEADS[args.head]
    model = getattr(transformers, auto).from_pretrained(args.model).eval()
    if getattr(model.config, "model_type", None) != "avey-b":
        raise ValueError(f"{args.model} is a {model.config.model_type!r} model: `avey-b export` exports Avey-B")
    if args.format == "torch":
        torch.export.save(export_program(model, output), args.out)
        print(f"wrote {args.out} (torch.export program; dynamic batch and length)")
        return 0
    path = export_onnx(model, args.out, output)
    print(f"wrote {path} (ONNX; inputs input_ids, attention_mask: (batch, length), both dynamic)")
    if not args.no_verify:
        err = verify_onnx(path, model, output)
        print(f"onnxruntime matches the eager model at lengths {list(VERIFY_LENGTHS)}: max |diff| {err:.1e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
