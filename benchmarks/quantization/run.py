"""int8 on CPU, alternated in one process: eager fp32, eager int8 (torchao), ONNX fp32 and ONNX int8 of each model.

    python benchmarks/quantization/run.py --text runs/english.txt --models avey-b-small avey-b-base modernbert-base \\
        --lengths 128 512 2048 8192

Each model (``avey_b.utils.model_spec`` specs, random weights, seed 0) is exported as ``avey-b export`` does (ONNX fp32,
weights folded into the layout MatMul reads) and quantized as ``avey-b export --quantize int8`` does
(:func:`avey_b.apps.quantize.quantize_onnx`, per-channel weights; ``--per-tensor`` adds per-tensor weights, ``--qdq``
onnxruntime's static QDQ form calibrated on the timed input itself, its best case); ModernBERT through the same
functions (its ``last_hidden_state``). At each length, batch ``--batch``, on real-text ids (cl100k, renumbered
into the model's vocabulary, :mod:`avey_b.benchmarking.inputs`), every variant runs once to warm up and then in
turns — A, B, C, D, A, B, ... — for ``--rounds`` rounds (onnxruntime's threads do not spin between runs, so that
they leave the cores to the next variant), with an fp32 GEMM rate taken in the same process before
and after and the load average recorded (the machine is shared). Accuracy of each int8 variant on the same ids:
the cosine of every token's output with the eager fp32 model's (smallest and mean) and, for Avey-B's ONNX int8
model, the share of ranker choices identical to the ONNX fp32 model's. One JSON line per (model, length) goes to
``--out``.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import tempfile
from functools import partial
from pathlib import Path

import numpy as np
import torch

from avey_b.apps.export import Exportable, _dynamic, export_onnx, fold_weight_layouts
from avey_b.apps.quantize import compare_quantized, quantize_eager_int8, quantize_onnx
from avey_b.benchmarking.inputs import text_ids
from avey_b.benchmarking.timing import alternate, gemm_rate, timed_call
from avey_b.utils.model_spec import build_config, random_model
from avey_b.utils.records import Envelope, append_jsonl


def export_any(model, path: Path, opset: int | None = None) -> Path:
    """``avey-b export``'s ONNX model of an Avey-B model; for another encoder the same exporter, dynamic shapes and
    weight folding on its ``last_hidden_state``, at ONNX opset ``opset`` (None: the exporter's default, 18; from 23
    ``scaled_dot_product_attention`` becomes one ONNX ``Attention`` node instead of MatMul / Softmax nodes that
    hold every head's scores at once)."""
    if getattr(model.config, "model_type", None) == "avey-b":
        return export_onnx(model, path)
    ids = torch.randint(5, model.config.vocab_size, (2, 64), generator=torch.Generator().manual_seed(0))
    program = torch.onnx.export(Exportable(model.eval(), "last_hidden_state").eval(), (ids, torch.ones_like(ids)),
                                dynamo=True, dynamic_shapes=_dynamic(), input_names=["input_ids", "attention_mask"],
                                output_names=["last_hidden_state"], opset_version=opset)
    fold_weight_layouts(program.model)
    path.parent.mkdir(parents=True, exist_ok=True)
    program.save(str(path))
    return path


def quantize_qdq(path: Path, calibration: tuple[torch.Tensor, torch.Tensor]) -> Path:
    """onnxruntime's QDQ form (static: activation ranges calibrated on ``calibration``) of the same weight MatMuls."""
    import onnx
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    from avey_b.apps.quantize import weight_matmuls

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.feeds = iter([{"input_ids": calibration[0].numpy(), "attention_mask": calibration[1].numpy()}])

        def get_next(self):
            return next(self.feeds, None)

    out = path.with_name("model.qdq.int8.onnx")
    quantize_static(str(path), str(out), Reader(), quant_format=QuantFormat.QDQ, op_types_to_quantize=["MatMul"],
                    nodes_to_quantize=weight_matmuls(onnx.load(str(path))), per_channel=True,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
    return out


def export_files(model, config, directory: Path, args, text) -> dict[str, Path]:
    """The ONNX files of ``model`` in ``directory``: fp32, int8 (per-channel weights) and those ``args`` ask for
    (per-tensor int8 weights, static QDQ int8 calibrated on ``text``)."""
    fp32_path = export_any(model, directory / "model.onnx", args.opset)
    files = {"onnx_fp32": fp32_path, "onnx_int8": quantize_onnx(fp32_path, config)}
    if args.per_tensor:
        files["onnx_int8_per_tensor"] = quantize_onnx(fp32_path, config, fp32_path.with_name("model.pt.int8.onnx"),
                                                       False)
    if args.qdq:
        files["onnx_int8_qdq_static"] = quantize_qdq(fp32_path, text.batch(config.vocab_size, 1, args.qdq)[:2])
    return files


def cosines(got: np.ndarray, want: torch.Tensor) -> np.ndarray:
    g, w = got.reshape(-1, got.shape[-1]), want.float().numpy().reshape(-1, got.shape[-1])
    return (g * w).sum(-1) / np.maximum(np.linalg.norm(g, axis=-1) * np.linalg.norm(w, axis=-1), 1e-12)


def main() -> None:
    import onnxruntime as ort

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--text", nargs="+", required=True, help="text files (see avey_b/benchmarking/english_text.py)")
    p.add_argument("--models", nargs="+", default=["avey-b-small", "avey-b-base", "modernbert-base"])
    p.add_argument("--lengths", type=int, nargs="+", default=[128, 512, 2048, 8192])
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--per-tensor", action="store_true", help="also time per-tensor int8 weights")
    p.add_argument("--qdq", type=int, default=None, metavar="LENGTH",
                   help="also time the static QDQ form, calibrated on the real-text input of this length")
    p.add_argument("--no-torchao", action="store_true", help="skip the eager int8 (torchao) variant")
    p.add_argument("--opset", type=int, default=None, help="ONNX opset of the non-Avey-B exports (23: attention "
                   "as one Attention node, which ModernBERT-base needs to run 8,192 tokens in under 24 GB)")
    p.add_argument("--workdir", default=None, help="where the ONNX models are written (default: a temporary dir)")
    p.add_argument("--out", default=str(Path(__file__).with_name("results.jsonl")))
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    text = text_ids(args.text)
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="avey-quant-"))
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = args.threads, 1
    # no spinning after a run: the pool's spinning threads would take the cores from the variant timed next
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    for spec in args.models:
        torch.manual_seed(0)
        config = build_config(spec)
        model = random_model(config, attn_implementation="sdpa").eval()
        export_s, _, files = timed_call(partial(export_files, model, config, workdir / spec, args, text))
        fp32_path = files["onnx_fp32"]
        sessions = {k: ort.InferenceSession(str(f), options, providers=["CPUExecutionProvider"])
                    for k, f in files.items()}
        eager = {"eager_fp32": model}
        if not args.no_torchao:
            eager["eager_int8_torchao"] = quantize_eager_int8(copy.deepcopy(model))
        for n in args.lengths:
            ids, mask, facts = text.batch(config.vocab_size, args.batch, n)
            feed = {"input_ids": ids.numpy(), "attention_mask": mask.numpy()}

            def run(name, ids=ids, mask=mask, feed=feed, sessions=sessions, eager=eager):
                if name in sessions:
                    return sessions[name].run(None, feed)[0]
                with torch.no_grad():
                    return eager[name](input_ids=ids, attention_mask=mask).last_hidden_state

            names = list(eager) + list(sessions)
            env, g0 = Envelope.begin("onnxruntime", "torchao"), gemm_rate(torch.float32)
            outputs = {name: run(name) for name in names}  # warm-up, and the outputs compared below
            timed = alternate({name: partial(run, name) for name in names}, args.rounds)
            times = {name: t.times_s for name, t in timed.items()}
            g1 = gemm_rate(torch.float32)
            reference = outputs["eager_fp32"]
            accuracy = {}
            for name in names:
                if "int8" in name:
                    out = outputs[name]
                    cos = cosines(out if isinstance(out, np.ndarray) else out.float().numpy(), reference)
                    accuracy[name] = {"cosine_min": float(cos.min()), "cosine_mean": float(cos.mean())}
            if config.model_type == "avey-b":
                for name in files:
                    if name != "onnx_fp32":
                        accuracy[name]["identical_ranker_choices"] = compare_quantized(
                            files[name], fp32_path, Exportable(model, "last_hidden_state"), [(ids, mask)]
                        )["identical_choices"]
            median = {name: statistics.median(v) for name, v in times.items()}
            rec = {"model": spec, "length": n, "batch": args.batch, "ids": text.source, **facts,
                   "threads": args.threads, "opset": args.opset, "seconds": times, "median_s": median,
                   "speedup_onnx_int8_over_onnx_fp32": median["onnx_fp32"] / median["onnx_int8"],
                   "speedup_onnx_int8_over_eager_fp32": median["eager_fp32"] / median["onnx_int8"],
                   "accuracy": accuracy, "export_and_quantize_s": export_s,
                   "gemm_fp32_flop_s": (g0 + g1) / 2, **env.end()}
            append_jsonl(args.out, rec, echo=True)


if __name__ == "__main__":
    main()
