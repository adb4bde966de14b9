"""A fine-tuned model's score in fp32 and int8: eager, ONNX fp32 and ONNX int8 on the same held-out examples.

    avey-b finetune --model PRETRAINED --task sst2 --train-file sst2/train.tsv --holdout 0.03 \\
        --max-train-examples 8000 --lr 1e-3 --output-dir runs/sst2 --save-model runs/sst2/model
    python benchmarks/quantization/downstream.py --task sst2 --model runs/sst2/model \\
        --train-file sst2/train.tsv --holdout 0.03

    avey-b finetune --model PRETRAINED --task conll2003 --train-file conll2003/eng.train \\
        --eval-file conll2003/eng.testa --max-train-examples 6000 --lr 1e-3 --output-dir runs/ner \\
        --save-model runs/ner/model
    python benchmarks/quantization/downstream.py --task conll2003 --model runs/ner/model \\
        --train-file conll2003/eng.train --eval-file conll2003/eng.testa

The model (``--save-model`` of ``avey-b finetune``: SST-2 accuracy or CoNLL-2003 entity F1) is scored by the
task's own code (:mod:`avey_b.evaluation.tasks`: the same examples ``avey-b finetune`` scores with the same data
flags, the same preprocessing and metric — seqeval's entity F1 for CoNLL) three times: the eager model, and its
ONNX models exported as ``avey-b export --head sequence-classification`` / ``token-classification`` does and
quantized as ``--quantize int8`` does (and, as ``onnx_int8_all``, with every weight MatMul int8, the fuser's
mixed block too), run by onnxruntime in place of the model. Inputs go one at a time by
default (``--eval-batch-size``), as a server answers short requests: int8 activations are scaled per batch.
Prints one JSON line (the score of each variant, the share of predictions — sentences or tokens — that int8
changes against ONNX fp32, the logits' cosine with the eager model and the identical ranker choices) and appends
it to ``--out``.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from types import SimpleNamespace

import torch

from avey_b.benchmarking.timing import timed_call
from avey_b.utils.records import Envelope, append_jsonl


class Scored:
    """What the tasks' scoring calls as a model — ``model(input_ids=..., attention_mask=...).logits`` and
    ``next(model.parameters()).device`` — over the eager model or an onnxruntime session; keeps each call's
    predictions (argmax over the real tokens, or per sentence) to compare variants."""

    def __init__(self, run):
        self.run, self.predictions = run, []

    def parameters(self):
        yield torch.zeros(())  # on the CPU, where every variant runs

    def __call__(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> SimpleNamespace:
        logits = self.run(input_ids, attention_mask)
        pred = logits.argmax(-1)
        self.predictions.append(pred[attention_mask.bool()] if pred.dim() == 2 else pred)
        return SimpleNamespace(logits=logits)


def main() -> None:
    import onnxruntime as ort

    from avey_b.apps.export import Exportable, export_onnx
    from avey_b.apps.quantize import compare_quantized, quantize_onnx
    from avey_b.evaluation.finetune import load_data
    from avey_b.evaluation.tasks import get_task
    from avey_b.evaluation.tasks.base import DataFiles, RunConfig, load_model, load_task_tokenizer

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--task", choices=("sst2", "conll2003"), required=True)
    p.add_argument("--model", required=True, help="a fine-tuned Avey-B directory (with its tokenizer)")
    p.add_argument("--train-file", help="the task's training file (what --holdout splits, and CoNLL's label set)")
    p.add_argument("--eval-file", help="the evaluation file (or --holdout)")
    p.add_argument("--holdout", type=float, help="score on this fraction of the training data, as finetune does")
    p.add_argument("--max-eval-examples", type=int, default=None)
    p.add_argument("--eval-batch-size", type=int, default=1)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", default=str(Path(__file__).with_name("downstream.jsonl")))
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    task = get_task(args.task)
    cfg = RunConfig(eval_batch_size=args.eval_batch_size, max_eval_examples=args.max_eval_examples,
                    precision="fp32", device="cpu")
    train, evaluation = load_data(task, DataFiles(train=args.train_file, eval=args.eval_file,
                                                  holdout=args.holdout), cfg)
    tok = load_task_tokenizer(args.model, cfg)
    model = load_model(args.model, task.head(cfg), cfg).eval()
    labels = task.model_kwargs(train, evaluation, cfg).get("id2label")
    if labels is not None and {int(k): v for k, v in model.config.id2label.items()} != labels:
        raise SystemExit(f"{args.model}: its labels {model.config.id2label} are not the data's {labels}: pass the "
                         "data flags it was fine-tuned with")
    work = Path(tempfile.mkdtemp(prefix="avey-downstream-"))
    fp32 = export_onnx(model, work / "model.onnx", "logits")
    int8 = quantize_onnx(fp32, model.config)
    int8_all = quantize_onnx(fp32, model.config, work / "model.all.int8.onnx", exclude=())
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = args.threads, 1
    sessions = {k: ort.InferenceSession(str(f), options, providers=["CPUExecutionProvider"])
                for k, f in (("onnx_fp32", fp32), ("onnx_int8", int8), ("onnx_int8_all", int8_all))}

    def eager(ids, mask):
        with torch.no_grad():
            return model(input_ids=ids, attention_mask=mask).logits

    def onnx_run(session):
        return lambda ids, mask: torch.from_numpy(
            session.run(["logits"], {"input_ids": ids.numpy(), "attention_mask": mask.numpy()})[0])

    variants = {"eager_fp32": Scored(eager), **{k: Scored(onnx_run(s)) for k, s in sessions.items()}}
    scores, seconds, env = {}, {}, Envelope.begin("onnxruntime")
    for name, scored in variants.items():
        seconds[name], _, result = timed_call(lambda scored=scored: task.evaluate(scored, tok, evaluation, cfg))
        scores[name] = result[task.metric]
    changed = [torch.cat(variants[k].predictions) for k in ("onnx_fp32", "onnx_int8")]
    features = task.train_features(evaluation[:200], tok, cfg)  # the task's own encoding of the inputs
    check = compare_quantized(int8, fp32, Exportable(model, "logits"),
                              [(torch.tensor([f["input_ids"]]), torch.tensor([f["attention_mask"]])) for f in features])
    rec = {"task": args.task, "metric": task.metric, "model": args.model,
           "data": {"train_file": args.train_file, "eval_file": args.eval_file, "holdout": args.holdout},
           "examples": len(evaluation), "eval_batch_size": args.eval_batch_size, "score": scores,
           "int8_minus_fp32": scores["onnx_int8"] - scores["eager_fp32"],
           "int8_changed_predictions": float((changed[0] != changed[1]).float().mean()),
           "predictions_compared": int(changed[0].numel()),
           "int8_logits_cosine_min": check["cosine"], "int8_logits_cosine_mean": check["mean_cosine"],
           "int8_identical_ranker_choices": check["identical_choices"],
           "seconds_total": seconds, "threads": args.threads, **env.end()}
    append_jsonl(args.out, rec, echo=True)
    print(f"{args.task} {task.metric}: " + ", ".join(f"{k} {v:.2f}" for k, v in scores.items()) +
          f"; int8 changes {rec['int8_changed_predictions']:.2%} of {rec['predictions_compared']} predictions")


if __name__ == "__main__":
    main()
