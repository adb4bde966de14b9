"""A fine-tuned classifier's accuracy in fp32 and int8: eager, ONNX fp32 and ONNX int8 on the same held-out sentences.

    avey-b finetune --model PRETRAINED --task sst2 --train-file train.tsv --eval-file eval.tsv --lr 1e-3 \\
        --output-dir runs/sst2 --save-model runs/sst2/model
    python benchmarks/quantization/downstream.py --model runs/sst2/model --eval-file eval.tsv

The classifier (``--save-model`` of ``avey-b finetune``, a GLUE-style TSV with ``sentence`` and ``label``
columns) is exported as ``avey-b export --head sequence-classification`` does and quantized as ``--quantize int8``
does; each variant predicts every sentence of ``--eval-file`` (one at a time, as a server answers short requests).
Prints one JSON line (accuracy of each variant, the share of predictions int8 changes, the logits' cosine and the
identical ranker choices of int8 against fp32) and appends it to ``--out``.
"""

from __future__ import annotations

import argparse
import csv
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from avey_b.records import append_jsonl


def main() -> None:
    import onnxruntime as ort
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    import avey_b  # noqa: F401  (registers Avey-B with the Auto classes)
    from avey_b.export import Exportable, export_onnx
    from avey_b.quantize import compare_quantized, quantize_onnx

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="a fine-tuned Avey-B classifier directory (with its tokenizer)")
    p.add_argument("--eval-file", required=True, help="TSV with a header: sentence, label")
    p.add_argument("--max-examples", type=int, default=None)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", default=str(Path(__file__).with_name("downstream.jsonl")))
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    with open(args.eval_file, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    if not rows or not {"sentence", "label"} <= set(rows[0]):
        raise SystemExit(f"{args.eval_file}: needs a header with 'sentence' and 'label' columns")
    rows = rows[:args.max_examples]
    tok = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForSequenceClassification.from_pretrained(args.model).eval()
    work = Path(tempfile.mkdtemp(prefix="avey-downstream-"))
    fp32 = export_onnx(model, work / "model.onnx", "logits")
    int8 = quantize_onnx(fp32)
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = args.threads, 1
    sessions = {k: ort.InferenceSession(str(f), options, providers=["CPUExecutionProvider"])
                for k, f in (("onnx_fp32", fp32), ("onnx_int8", int8))}
    labels = np.array([int(r["label"]) for r in rows])
    encoded = [tok(r["sentence"], return_tensors="pt") for r in rows]
    logits, seconds = {k: [] for k in ("eager_fp32", *sessions)}, {k: 0.0 for k in ("eager_fp32", *sessions)}
    for enc in encoded:
        ids, mask = enc["input_ids"], enc["attention_mask"]
        t = time.perf_counter()
        with torch.no_grad():
            logits["eager_fp32"].append(model(input_ids=ids, attention_mask=mask).logits[0].numpy())
        seconds["eager_fp32"] += time.perf_counter() - t
        for k, s in sessions.items():
            t = time.perf_counter()
            logits[k].append(s.run(None, {"input_ids": ids.numpy(), "attention_mask": mask.numpy()})[0][0])
            seconds[k] += time.perf_counter() - t
    preds = {k: np.stack(v).argmax(-1) for k, v in logits.items()}
    check = compare_quantized(int8, fp32, Exportable(model, "logits"),
                              [(e["input_ids"], e["attention_mask"]) for e in encoded[:200]])
    rec = {"model": args.model, "eval_file": args.eval_file, "examples": len(rows),
           "accuracy": {k: float((v == labels).mean()) for k, v in preds.items()},
           "int8_changed_predictions": float((preds["onnx_int8"] != preds["onnx_fp32"]).mean()),
           "int8_logits_cosine_min": check["cosine"], "int8_identical_ranker_choices": check["identical_choices"],
           "seconds_total": seconds, "threads": args.threads,
           "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    append_jsonl(args.out, rec, echo=True)


if __name__ == "__main__":
    main()
