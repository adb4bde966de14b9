"""Which int8 MatMuls move an Avey-B model's outputs, and what keeping some in fp32 costs in speed.

    python benchmarks/quantization/drift.py --text runs/english.txt --model avey-b-base --lengths 128 512 2048 8192
    python benchmarks/quantization/drift.py --text runs/english.txt --model runs/pretrain/model --variants default \\
        skip:fuser.mix

The model (``avey_b.utils.model_spec`` spec with random weights, seed 0, or a trained checkpoint directory) is exported
as ``avey-b export`` does, and quantized once per *variant* with :func:`avey_b.apps.quantize.quantize_onnx`:

* ``default``: what ``avey-b export --quantize int8`` writes; ``all``: every weight MatMul (no exclusion);
* ``only:G`` / ``skip:G``: only the MatMuls of group ``G`` quantized / every weight MatMul but those; a group is
  a block of a layer's weights (paper §4.2) in every layer — ``enricher.bypass``, ``enricher.gate``,
  ``enricher.context`` (the three row blocks of the enricher: ``Z_h``, ``Z_tl``, ``Z_tr``), ``fuser.bypass``,
  ``fuser.mix`` (the fuser's column blocks reading ``Z_h`` and the mixed ``c``) — or ``layerI`` (all of layer
  ``I``'s), ``static`` / ``dynamic`` (all of the layers of that mixer type), ``head`` (the head's);
* ``reduce_range``, ``per_tensor``, ``weight_asym`` (``WeightSymmetric=False``), ``act_sym``
  (``ActivationSymmetric=True``): onnxruntime's options on every weight MatMul.

For each variant, on real-text ids at batch 1 (a checkpoint with a tokenizer: its own tokenization of the text,
so the trained embeddings see the words they were trained on; a spec: cl100k ids renumbered into the vocabulary,
:mod:`avey_b.benchmarking.inputs`), the cosine of every token's output with the eager fp32 model's (smallest,
mean) at each length, and the time of the fp32 and the int8 ONNX models alternated in this process at
``--time-length`` tokens (``--rounds`` turns each, onnxruntime threads not spinning between runs). One JSON line
per variant goes to ``--out``, with the load average before and after.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
from functools import partial
from pathlib import Path

import onnx
import torch
from run import cosines, export_any  # this benchmark's own helpers (the script's directory is on sys.path)

from avey_b.apps.quantize import default_exclusions, matmul_groups, quantize_onnx, weight_matmuls
from avey_b.benchmarking.inputs import text_ids
from avey_b.benchmarking.timing import alternate
from avey_b.utils.model_spec import build_config, random_model
from avey_b.utils.records import Envelope, append_jsonl

GROUPS = ("enricher.bypass", "enricher.gate", "enricher.context", "fuser.bypass", "fuser.mix")
OPTIONS = {"reduce_range": {"reduce_range": True}, "per_tensor": {"per_channel": False},
           "weight_asym": {"extra_options": {"WeightSymmetric": False}},
           "act_sym": {"extra_options": {"ActivationSymmetric": True}}}


def variant_options(variant: str, groups: dict[str, set[str]], default_exclude: set[str]) -> dict:
    everything = set().union(*groups.values())
    if variant == "default":
        return {"exclude": default_exclude}
    if variant == "all":
        return {"exclude": set()}
    if variant in OPTIONS:
        return {"exclude": set(), **OPTIONS[variant]}
    kind, _, group = variant.partition(":")
    if kind not in ("only", "skip") or group not in groups:
        raise SystemExit(f"unknown variant {variant!r}: default, all, {', '.join(OPTIONS)}, only:G or skip:G with "
                         f"G in {sorted(groups)}")
    return {"exclude": everything - groups[group] if kind == "only" else groups[group]}


def main() -> None:
    import onnxruntime as ort
    from transformers import AutoModel, AutoTokenizer

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="avey-b-base", help="a model spec (random weights) or a checkpoint directory")
    p.add_argument("--text", nargs="+", required=True, help="text files (see avey_b/benchmarking/english_text.py)")
    p.add_argument("--lengths", type=int, nargs="+", default=[128, 512, 2048, 8192])
    p.add_argument("--variants", nargs="+", default=None, help="default: default, all, each option, only:G and "
                   "skip:G for every block group")
    p.add_argument("--time-length", type=int, default=512)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", default=str(Path(__file__).with_name("drift.jsonl")))
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    work = Path(tempfile.mkdtemp(prefix="avey-drift-"))
    if os.path.isdir(args.model):
        model = AutoModel.from_pretrained(args.model).eval()
        tok = AutoTokenizer.from_pretrained(args.model)
        text = "\n".join(Path(f).read_text(encoding="utf-8") for f in args.text)
        all_ids = torch.tensor(tok(text[:4_000_000], add_special_tokens=False)["input_ids"])
        weights, ids_source = f"trained ({args.model})", f"{args.model}'s tokenizer on {', '.join(args.text)}"

        def batch(n):
            return all_ids[None, :n], torch.ones(1, n, dtype=torch.long)
    else:
        torch.manual_seed(0)
        model = random_model(build_config(args.model)).eval()
        text = text_ids(args.text)
        weights, ids_source = "random (seed 0)", text.source

        def batch(n):
            return text.batch(model.config.vocab_size, 1, n)[:2]
    fp32_path = export_any(model, work / "model.onnx")
    proto = onnx.load(str(fp32_path), load_external_data=False)
    groups = matmul_groups(proto, model.config)
    variants = args.variants or ["default", "all", *OPTIONS, *(f"{k}:{g}" for g in GROUPS for k in ("skip", "only"))]
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = args.threads, 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    fp32 = ort.InferenceSession(str(fp32_path), options, providers=["CPUExecutionProvider"])
    inputs = {n: batch(n) for n in args.lengths}
    with torch.no_grad():
        reference = {n: model(input_ids=i, attention_mask=m).last_hidden_state for n, (i, m) in inputs.items()}
    time_ids, time_mask = batch(args.time_length)
    time_feed = {"input_ids": time_ids.numpy(), "attention_mask": time_mask.numpy()}
    for variant in variants:
        kwargs = variant_options(variant, groups, default_exclusions(proto, model.config))
        path = quantize_onnx(fp32_path, model.config, work / f"{variant.replace(':', '_')}.onnx", **kwargs)
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        accuracy = {}
        for n, (ids, mask) in inputs.items():
            cos = cosines(session.run(None, {"input_ids": ids.numpy(), "attention_mask": mask.numpy()})[0],
                          reference[n])
            accuracy[n] = {"cosine_min": float(cos.min()), "cosine_mean": float(cos.mean())}
        env = Envelope.begin("onnxruntime")
        for s in (fp32, session):
            s.run(None, time_feed)
        timed = alternate({name: partial(s.run, None, time_feed) for name, s in (("onnx_fp32", fp32),
                                                                                ("onnx_int8", session))}, args.rounds)
        times = {name: t.times_s for name, t in timed.items()}
        median = {k: statistics.median(v) for k, v in times.items()}
        excluded = kwargs["exclude"]
        rec = {"model": args.model, "weights": weights, "ids": ids_source, "variant": variant,
               "int8_matmuls": len(weight_matmuls(proto)) - len(excluded), "fp32_matmuls": len(excluded),
               "accuracy": accuracy, "time_length": args.time_length, "seconds": times, "median_s": median,
               "speedup_int8_over_fp32": median["onnx_fp32"] / median["onnx_int8"],
               "threads": args.threads, **env.end()}
        append_jsonl(args.out, rec, echo=False)
        worst = min(a["cosine_min"] for a in accuracy.values())
        print(f"{variant:24s} int8 {rec['int8_matmuls']:3d}  cos_min " +
              " ".join(f"{n}:{a['cosine_min']:.5f}" for n, a in accuracy.items()) +
              f"  worst {worst:.5f}  speed x{rec['speedup_int8_over_fp32']:.2f}  load {env.load_before[0]:.1f}",
              flush=True)


if __name__ == "__main__":
    main()
