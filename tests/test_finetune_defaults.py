"""What ``avey-b finetune`` does by default so that a run learns, and what it says when one does not: the default
learning rate by the model's width, one progress bar instead of the trainer's log dictionaries, and the line that
says a held-out score is not above its baseline. Tiny Avey-B built in the test."""

import json

import numpy as np
import pytest
from transformers import AutoConfig

from avey_b import testing as toy
from avey_b.cli import main
from avey_b.finetuning import OwnDataOptions, default_lr
from avey_b.finetuning.common import above_baseline, below_baseline
from avey_b.finetuning.options import DEFAULT_LR_BY_WIDTH, SPARSE_LR_BY_WIDTH


def options(**kw):
    return OwnDataOptions(**{"model": "m", "task": "text-classification", "train_file": "t", "output_dir": "o", **kw})


def test_the_default_learning_rate_falls_with_the_width_from_the_measured_rate_to_berts():
    (narrow, high), (wide, low) = DEFAULT_LR_BY_WIDTH
    assert (narrow, high) == (256, 5e-4) and (wide, low) == (768, 5e-5)
    assert default_lr(64) == default_lr(128) == default_lr(256) == 5e-4  # the quickstart's width and below
    assert default_lr(768) == default_lr(1024) == 5e-5  # BERT-base's width and up: BERT's recommendation
    between = [default_lr(w) for w in (320, 384, 512, 640)]
    assert 5e-4 > between[0] and all(a > b for a, b in zip(between, between[1:], strict=False)) and between[-1] > 5e-5
    assert default_lr(512) == 1.2e-4  # a power of the width, to two significant digits
    assert default_lr(None) == 5e-5  # a config without hidden_size: BERT's


def test_sparse_embedding_takes_its_own_measured_rate_epochs_and_regularizer_weights():
    """SPLADE on the quickstart model learned and sparsified only at 2e-3 over 10 epochs with FLOPS weights 100
    times sentence-transformers' (benchmarks/finetune_defaults/sparse.md): its defaults, and every other task's
    left as they were."""
    assert SPARSE_LR_BY_WIDTH == ((256, 2e-3), (768, 5e-5))
    assert default_lr(256, "sparse-embedding") == 2e-3 and default_lr(768, "sparse-embedding") == 5e-5
    assert default_lr(256, "embedding") == default_lr(256) == 5e-4
    sparse = options(task="sparse-embedding")
    lr, source = sparse.learning_rate(256)
    assert lr == 2e-3 and "sparse-embedding's rule" in source
    assert sparse.epochs == 10 and options().epochs == options(task="embedding").epochs == 3
    assert options(task="sparse-embedding", epochs=2).epochs == 2  # given: kept
    assert (sparse.query_regularizer_weight, sparse.document_regularizer_weight) == (5e-3, 3e-3)


def test_the_learning_rate_says_where_it_comes_from():
    lr, source = options().learning_rate(256)
    assert lr == 5e-4 and source.startswith("default for width 256 (hidden_size)")
    assert "benchmarks/finetune_defaults" in source and "Devlin" in source
    lr, source = options().learning_rate(None)
    assert lr == 5e-5 and "names no hidden_size" in source
    assert options(lr=1e-3).learning_rate(256) == (1e-3, "--lr")


@pytest.mark.parametrize(("record", "above"), [
    ({"metric": "accuracy", "score": 70.0, "baseline_score": 56.33}, True),
    ({"metric": "accuracy", "score": 56.0, "baseline_score": 56.33}, False),
    ({"metric": "ndcg@10", "score": 12.9, "baseline_score": 12.9}, False),  # equal is not above
    ({"metric": "mse", "score": 0.2, "baseline_score": 1.5}, True),  # lower is better
    ({"metric": "mse", "score": 1.5, "baseline_score": 1.5}, False),
    ({"metric": "pearson", "score": None, "baseline_score": None}, None),
])
def test_below_baseline_names_both_scores_and_what_to_try(record, above):
    record = record | {"lr": 5e-5, "epochs": 3.0, "baseline_name": "majority class"}
    assert above_baseline(record) is above
    if record["score"] is not None:  # a score of numpy's (seqeval's) gives a bool results.json can hold
        assert above_baseline(record | {"score": np.float64(record["score"])}) is above
    line = below_baseline(record)
    if above is not False:
        assert line is None
        return
    worse = "not below" if record["metric"] == "mse" else "not above"
    assert line.startswith(f"warning: the held-out {record['metric']} {record['score']} is {worse} the baseline's "
                           f"{record['baseline_score']} (majority class)")
    assert "--lr (this run: 5e-05)" in line and "--epochs (this run: 3)" in line and "more training data" in line


@pytest.mark.parametrize("record", [{"metric": "ndcg@10", "score": 100.0, "baseline_score": 100.0},
                                    {"metric": "accuracy", "score": 50.0, "baseline_score": 100.0},
                                    {"metric": "mse", "score": 0.0, "baseline_score": 0.0}])
def test_a_baseline_at_the_best_score_there_is_asks_for_harder_held_out_examples_not_a_higher_lr(record):
    """The retrieval tutorial's first run: a baseline at the ceiling (ndcg@10 100.0 on 2 held-out rows) leaves no
    room above it, so the warning says the held-out rows cannot tell, not that the run did not learn."""
    line = below_baseline(record | {"lr": 5e-5, "epochs": 3.0, "baseline_name": "untrained", "n_validation": 2})
    assert line.startswith(f"warning: the held-out {record['metric']} {record['score']} is ")
    assert "the best there is: the 2 held-out examples cannot show whether this run learned" in line
    assert "--validation-file" in line and "--lr" not in line


def test_a_run_that_cannot_beat_its_baseline_says_so_and_shows_one_progress_bar(tmp_path, capfd):
    """Rigged: every held-out review is of the training rows' majority class, so the majority class scores 100% and
    no classifier can score above it. No --lr: the default for the tiny model's width."""
    models = toy.encoders(tmp_path / "models")
    train, dev = tmp_path / "train.csv", tmp_path / "dev.csv"
    rows = [("good", "pos"), ("lovely", "pos"), ("bad", "neg")] * 8
    train.write_text("review,sentiment\n" + "".join(f"the film was very {adj},{label}\n" for adj, label in rows))
    dev.write_text("review,sentiment\n" + "the film was very great,pos\n" * 4)
    out = tmp_path / "out"
    assert main(["finetune", "--task", "text-classification", "--model", models["avey"], "--train-file", str(train),
                 "--validation-file", str(dev), "--text-column", "review", "--label-column", "sentiment",
                 "--output-dir", str(out), "--batch-size", "8", "--epochs", "1", "--device", "cpu"]) == 0
    said = capfd.readouterr()
    record = json.loads((out / "results.json").read_text())
    assert record["baseline_score"] == 100.0 and record["above_baseline"] is False
    width = AutoConfig.from_pretrained(models["avey"]).hidden_size
    assert record["lr"] == default_lr(width) and record["lr_source"].startswith(f"default for width {width}")
    assert (f"warning: the held-out accuracy {record['score']} is not above the baseline's 100.0 (majority class), "
            "the best there is: the 4 held-out examples cannot show whether this run learned" in said.out)
    # one progress line (a log, not a terminal: the plain form, at its end) and none of the trainer's dictionaries
    assert "finetune text-classification: 3/3 steps (100%)" in said.err
    assert "{'loss'" not in said.out + said.err and "'train_runtime'" not in said.out + said.err
