"""Own-data benchmark, classifier and tagger part: ``avey-b finetune --task text-classification`` on SST-2 with
string labels and ``--task token-classification`` on CoNLL-2003 read from its columns, Avey-B beside a BERT of the
same parameter count, through the same commands, 3 seeds each, scored on held-out rows beside the baselines.

    python benchmarks/own_data/run_classification.py --shared ../shared/data --work runs/own_data --threads 2

Steps (a finished run is not redone: each output directory's results.json means finished):

1. data, written under ``--work`` (the shared files are not copied into the repository):
   ``sst2_strings.tsv``: the first ``--sst2-rows`` sentences of ``sst2/train.tsv`` with labels 0/1 rewritten as
   ``negative`` / ``positive``; ``finetune`` holds out 20% of them (seed 0, the same rows for every run) and trains on
   the rest. ``conll_dev.txt``: the first ``--conll-dev`` sentences of ``conll2003/eng.testa``; training reads
   ``eng.train`` as it is (word first, NER tag last) capped by ``--max-train-examples``;
2. one byte-level BPE tokenizer (8,192 tokens) trained on the training texts only (SST-2 training rows, CoNLL
   ``eng.train`` words), shared by both models;
3. two models from scratch (no pretraining: this part measures the command, not pretraining): Avey-B of the
   learning benchmark's shape at half its width (d=128, 4 layers, S=16, k=3) and a 2-layer BERT of width 128 whose
   FFN width is chosen to match Avey-B's parameter count (``avey_b.utils.model_spec.matched_width``);
4. ``avey-b finetune`` for each task x model x seed with the same options, run in this process through its Python
   form (``avey_b.finetuning.finetune(OwnDataOptions(...))``, what the command calls; the command printed for each
   run is its exact command-line equivalent): a fresh ``python -m avey_b.cli`` per run spent about a minute and a
   half importing torch and transformers on the shared, loaded CPU; results gathered into ``classification.jsonl``
   and ``classification.md`` beside this script.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
AVEY = {"hidden_size": 128, "num_hidden_layers": 4, "split_size": 16, "num_retrieved_splits": 3}
BERT = {"hidden_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "max_position_embeddings": 512}


def write_sst2(src: Path, dest: Path, rows: int) -> None:
    names = {"0": "negative", "1": "positive"}
    with open(src, encoding="utf-8") as f, open(dest, "w", encoding="utf-8") as out:
        out.write("sentence\tsentiment\n")
        next(f)
        for i, line in enumerate(f):
            if i == rows:
                break
            text, label = line.rstrip("\n").rsplit("\t", 1)
            out.write(f"{text.strip()}\t{names[label]}\n")


def write_conll_head(src: Path, dest: Path, sentences: int) -> None:
    n, inside = 0, False
    with open(src, encoding="utf-8") as f, open(dest, "w", encoding="utf-8") as out:
        for line in f:
            if not line.strip():
                if inside:
                    n += 1
                    inside = False
                    if n == sentences:
                        break
            elif not line.startswith("-DOCSTART-"):
                inside = True
            out.write(line)


def tokenizer_texts(sst2: Path, conll: Path, sst2_rows: int, conll_sentences: int):
    """The training texts only: the SST-2 rows finetune trains on (the held-out 20% excluded) and the CoNLL
    training sentences."""
    from avey_b.data.conll import read_conll
    from avey_b.finetuning.data import hold_out, read_table

    table = read_table(str(sst2), {"text": "sentence"}, task="text-classification")
    train, _ = hold_out(table, 0.2)
    texts = [r["sentence"] for r in train.rows]
    texts += [" ".join(s.tokens) for s in read_conll(str(conll))[:conll_sentences]]
    return texts


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shared", default="../shared/data")
    p.add_argument("--work", default="runs/own_data")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--sst2-rows", type=int, default=2000, help="SST-2 sentences used (20%% held out)")
    p.add_argument("--conll-train", type=int, default=800, help="CoNLL training sentences (--max-train-examples)")
    p.add_argument("--conll-dev", type=int, default=400, help="CoNLL eng.testa sentences scored")
    p.add_argument("--epochs", type=float, default=1)
    p.add_argument("--lrs", type=float, nargs="+", default=[2e-3, 5e-4],
                   help="learning rates, each with every seed; the table reports each and marks the better")
    p.add_argument("--smoke", action="store_true", help="tiny sizes, results under --work only")
    args = p.parse_args()
    if args.smoke:
        args.sst2_rows, args.conll_train, args.conll_dev, args.seeds, args.epochs = 200, 60, 40, 1, 1
    shared, work = Path(args.shared), Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    from avey_b.utils.records import Envelope

    t0, env = time.time(), Envelope.begin()

    sst2, conll_dev = work / "sst2_strings.tsv", work / "conll_dev.txt"
    conll_train = shared / "conll2003" / "eng.train"
    write_sst2(shared / "sst2" / "train.tsv", sst2, args.sst2_rows)
    write_conll_head(shared / "conll2003" / "eng.testa", conll_dev, args.conll_dev)

    import torch
    from transformers import AutoConfig, BertForMaskedLM

    import avey_b  # noqa: F401  (registers Avey-B)
    from avey_b.configs import from_args
    from avey_b.data.tokenization import train_bpe_tokenizer
    from avey_b.finetuning import OwnDataOptions, finetune
    from avey_b.finetuning.options import finetune_parser
    from avey_b.model import presets
    from avey_b.model.auto import AveyBForMaskedLM
    from avey_b.utils.model_spec import masked_lm_parameters, matched_width

    models = {"avey-b": work / "models" / "avey-b", "bert": work / "models" / "bert"}
    if not all((d / "config.json").exists() for d in models.values()):
        tok = train_bpe_tokenizer(tokenizer_texts(sst2, conll_train, args.sst2_rows, args.conll_train), 8192)
        avey_cfg = presets.tiny(**AVEY, vocab_size=len(tok), pad_token_id=tok.pad_token_id)
        torch.manual_seed(0)
        AveyBForMaskedLM(avey_cfg).save_pretrained(models["avey-b"])
        over = matched_width("bert", masked_lm_parameters(avey_cfg), vocab_size=len(tok),
                             pad_token_id=tok.pad_token_id, **BERT)
        torch.manual_seed(0)
        BertForMaskedLM(AutoConfig.for_model("bert", **over)).save_pretrained(models["bert"])
        for d in models.values():
            tok.save_pretrained(d)
    sizes = {name: masked_lm_parameters(AutoConfig.from_pretrained(d)) for name, d in models.items()}

    tasks = {
        "sst2 (text-classification)": ["--task", "text-classification", "--train-file", str(sst2),
                                       "--text-column", "sentence", "--label-column", "sentiment",
                                       "--validation-fraction", "0.2"],
        "conll2003 (token-classification)": ["--task", "token-classification", "--train-file", str(conll_train),
                                             "--validation-file", str(conll_dev),
                                             "--max-train-examples", str(args.conll_train)],
    }
    common = ["--epochs", f"{args.epochs:g}", "--batch-size", "32", "--device", "cpu", "--threads", str(args.threads)]
    records = []
    for task, flags in tasks.items():
        for name, model in models.items():
            for lr, seed in ((lr, seed) for lr in args.lrs for seed in range(args.seeds)):
                out = work / "runs" / f"{task.split()[0]}-{name}-lr{lr:g}-seed{seed}"
                argv = ["finetune", *flags, "--model", str(model), "--output-dir", str(out), "--seed", str(seed),
                        "--lr", f"{lr:g}", "--overwrite", *common]
                if not (out / "results.json").exists():
                    print("$ avey-b", " ".join(argv), flush=True)
                    finetune(from_args(OwnDataOptions, finetune_parser().parse_args(argv[1:])))
                rec = json.loads((out / "results.json").read_text())
                records.append({"task": task, "model": name, "seed": seed, **{k: rec[k] for k in (
                    "metric", "score", "baseline_score", "baseline_name", "metrics", "baseline", "n_train",
                    "n_validation", "train_seconds", "lr", "epochs")}})
                print(json.dumps(records[-1]), flush=True)

    dest = work if args.smoke else HERE
    with open(dest / "classification.jsonl", "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in records)
    (dest / "classification.md").write_text(report(records, sizes, args, time.time() - t0, env))
    print((dest / "classification.md").read_text())


def report(records: list[dict], sizes: dict[str, int], args, seconds: float, env) -> str:
    """The Markdown report; ``env``: the run's :class:`~avey_b.utils.records.Envelope`, ended here."""
    env.end()
    lines = ["# Own data: a classifier and a tagger from your files (Avey-B beside a BERT of the same size)", "",
             "```", f"python benchmarks/own_data/run_classification.py {' '.join(sys.argv[1:])}", "```", "",
             f"Machine: {env.line()}; {args.threads} threads, shared with other engineers' jobs; "
             f"the whole benchmark took {seconds / 60:.1f} min.", "",
             "Models from scratch (no pretraining), one shared BPE tokenizer trained on the training texts: "
             + ", ".join(f"{k} {v / 1e6:.2f}M parameters" for k, v in sizes.items())
             + f" (masked-LM model). Same flags for both: --epochs {args.epochs:g} --batch-size 32, --lr "
             + " and ".join(f"{lr:g}" for lr in args.lrs) + " (each with every seed; **bold**: the model's better "
             "learning rate on that task by median).",
             "",
             "| task | model | lr | score (median of seeds) | spread: sd [min, max] | seeds | baseline | held-out | "
             "trained on |", "|---|---|---|---:|---|---|---:|---:|---:|"]
    groups: dict[tuple[str, str, float], list[dict]] = {}
    for r in records:
        groups.setdefault((r["task"], r["model"], r["lr"]), []).append(r)
    best = {}
    for (task, model, lr), rs in groups.items():
        median = statistics.median(r["score"] for r in rs)
        if median > best.get((task, model), (None, -1.0))[1]:
            best[(task, model)] = (lr, median)
    for (task, model, lr), rs in groups.items():
        scores = [r["score"] for r in rs]
        spread = f"{statistics.stdev(scores):.2f} [{min(scores):.2f}, {max(scores):.2f}]" if len(scores) > 1 else "-"
        median = f"{rs[0]['metric']} {statistics.median(scores):.2f}"
        if best[(task, model)][0] == lr:
            median = f"**{median}**"
        lines.append(f"| {task} | {model} | {lr:g} | {median} | {spread} | "
                     f"{', '.join(f'{s:.2f}' for s in scores)} | "
                     f"{rs[0]['baseline_name']} {rs[0]['baseline_score']:.2f} | "
                     f"{rs[0]['n_validation']} | {rs[0]['n_train']} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
