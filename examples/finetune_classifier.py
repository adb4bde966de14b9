"""Fine-tune a classifier on your own CSV (a text column and a label column, string labels), score it on held-out
rows beside the majority class, then use it through transformers' pipeline, which answers with your label names.

    python examples/finetune_classifier.py --model runs/quickstart/model --csv reviews.csv \
        --text-column review --label-column sentiment
    python examples/finetune_classifier.py --small          # a tiny model and a made-up CSV

The same as ``avey-b finetune --task text-classification --model MODEL --train-file reviews.csv --text-column
review --label-column sentiment --output-dir runs/sentiment``.
"""

import argparse
import csv
import random
import tempfile

from transformers import pipeline

from avey_b.finetuning import OwnDataOptions, finetune

parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("--model", default="runs/quickstart/model", help="the encoder to start from")
parser.add_argument("--csv", help="your data: a CSV with a header row")
parser.add_argument("--text-column", default="text")
parser.add_argument("--label-column", default="label")
parser.add_argument("--output-dir", help="where the model goes (default: a temporary directory)")
parser.add_argument("--small", action="store_true", help="a tiny random model and a made-up CSV")
args = parser.parse_args()

if args.small:
    from _small import tiny_model

    args.model = tiny_model()
    args.csv = tempfile.mktemp(suffix=".csv")
    rng = random.Random(0)
    with open(args.csv, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["text", "label"])
        for _ in range(200):
            label = rng.choice(["positive", "negative", "neutral"])
            word = {"positive": "great", "negative": "awful", "neutral": "fine"}[label]
            writer.writerow([f"the film was {word} and the cast met in Paris", label])

record = finetune(OwnDataOptions(
    model=args.model, task="text-classification", train_file=args.csv, text_column=args.text_column,
    label_column=args.label_column, output_dir=args.output_dir or tempfile.mkdtemp(prefix="avey-b-clf-"),
    overwrite=True, epochs=1 if args.small else 3))
print("held out:", record["metrics"], "baseline:", record["baseline"])

classify = pipeline("text-classification", model=record["output_dir"])
print(classify("the film was great and the cast met in Paris"))
