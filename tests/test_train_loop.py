"""The pretraining loop on CPU: a short run lowers the held-out loss (Avey-B and a BERT baseline), resuming
from a checkpoint reproduces the uninterrupted run bit for bit, a 2-process gloo torchrun run equals a
1-process run with the same global batch, SIGTERM leaves a loadable checkpoint, and bad inputs fail clearly.
Everything is built inside the tests: a small JSONL corpus, a BPE trained on it, tiny models."""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from avey_b import cli
from avey_b.data.tokenization import train_bpe_tokenizer
from avey_b.training.checkpoint import TrainState, list_checkpoints, load_train_state
from avey_b.training.config import load_config
from avey_b.training.pretrain import took, train

SUBJECTS = ["the cat", "a dog", "the bird", "my friend", "the teacher", "a child"]
VERBS = ["reads", "writes", "sees", "likes", "finds", "carries"]
OBJECTS = ["a book", "the letter", "a red ball", "the old map", "a green leaf", "the small box"]
ROOT = Path(__file__).resolve().parent.parent


def main(argv):
    """``avey-b pretrain ARGV``, its errors raised (``--debug``) so that the tests see their type."""
    return cli.main(["--debug", "pretrain", *argv])


def sentences(n, seed=0):
    g = torch.Generator().manual_seed(seed)
    pick = lambda xs: xs[int(torch.randint(len(xs), (1,), generator=g))]
    return [" ".join(f"{pick(SUBJECTS)} {pick(VERBS)} {pick(OBJECTS)}." for _ in range(3 + i % 5)) for i in range(n)]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    d = tmp_path_factory.mktemp("corpus")
    with open(d / "docs.jsonl", "w") as f:
        for t in sentences(400):
            f.write(json.dumps({"text": t}) + "\n")
    tok = train_bpe_tokenizer(sentences(400), 320)
    tok.save_pretrained(d / "tokenizer")
    return d


def overrides(corpus, run_dir, steps=6, **extra):
    base = {
        "run_dir": str(run_dir), "data.train": str(corpus / "docs.jsonl"), "tokenizer.path": str(corpus / "tokenizer"),
        "model.arch": "avey-b", "model.preset": "tiny",
        "model.overrides": "{hidden_size: 32, num_hidden_layers: 2, split_size: 8, num_retrieved_splits: 2}",
        "data.seq_len": 32, "data.num_workers": 0, "data.eval_fraction": 0.1,
        "train.global_batch_tokens": 256, "train.micro_batch_size": 4, "train.max_steps": steps, "train.threads": 1,
        "train.precision": "fp32",  # the equivalence tests compare runs exactly
        "optim.lr": 3e-3, "optim.warmup": 0.1, "eval.every": 0, "eval.max_sequences": 16, "eval.at_start": False,
        "checkpoint.every": 3, "checkpoint.keep_last": 5, "logging.every": 1, "logging.progress": False,
    }
    base.update(extra)
    return [f"{k}={v}" for k, v in base.items()]


def losses(run_dir):
    rows = [json.loads(x) for x in open(Path(run_dir) / "metrics.jsonl")]
    return {r["step"]: r["loss"] for r in rows if "loss" in r}


def params(path):
    return load_file(str(Path(path) / "model.safetensors"))


@pytest.mark.parametrize("arch", ["avey-b", "bert"])
def test_short_run_lowers_heldout_loss_and_checkpoint_loads(corpus, tmp_path, arch):
    extra = {"eval.at_start": True, "train.max_steps": 30, "checkpoint.every": 0}
    if arch == "bert":
        extra.update({"model.arch": "bert", "model.overrides": "{hidden_size: 32, num_hidden_layers: 2, "
                      "num_attention_heads: 2, intermediate_size: 64, max_position_embeddings: 64}"})
    extra["eval.fill_examples"] = '[{text: "the cat reads [MASK] book.", answer: a}, "a dog [MASK] the [MASK]."]'
    cfg = load_config(None, overrides(corpus, tmp_path / arch, **extra))
    res = train(cfg)
    assert res["final"]["eval_loss"] < res["untrained"]["eval_loss"] - 1.0
    assert res["final"]["eval_accuracy"] > res["untrained"]["eval_accuracy"]
    scored, plain = res["fill"]
    assert scored["answer"] == "a" and scored["hit"] == ("a" in scored["top5"][0].split("|"))
    assert plain["answer"] is None and plain["hit"] is None and len(plain["top5"]) == 2  # two [MASK]s

    from transformers import AutoModelForMaskedLM, pipeline

    import avey_b  # noqa: F401

    model_dir = tmp_path / arch / "model"
    model = AutoModelForMaskedLM.from_pretrained(model_dir)
    assert model.config.vocab_size % 64 == 0
    fill = pipeline("fill-mask", model=str(model_dir), tokenizer=str(model_dir), device="cpu")
    preds = fill("the cat reads [MASK] book.")
    assert len(preds) == 5 and all("token_str" in p for p in preds)
    assert (tmp_path / arch / "config.yaml").exists() and (tmp_path / arch / "metrics.csv").exists()


@pytest.mark.parametrize("examples,message", [
    ('["no mask here"]', "has no \\[MASK\\]"),
    ('[{text: "a [MASK] b [MASK]", answer: x}]', "exactly one"),
    ('[{text: "a [MASK] b", answr: x}]', "must be a sentence or"),
])
def test_fill_examples_are_checked_before_training(corpus, tmp_path, examples, message):
    with pytest.raises(ValueError, match=message):
        load_config(None, overrides(corpus, tmp_path, **{"eval.fill_examples": examples})).validate()


def test_resume_equals_uninterrupted_run(corpus, tmp_path, capsys):
    """Run 6 steps (checkpoints at 3 and 6); resume a second run from step 3: same losses, same weights; the
    resumed run reports its own time and the run's over both sessions."""
    full = tmp_path / "full"
    assert main(overrides(corpus, full)) == 0
    ckpts = list_checkpoints(full)
    assert [p.name for p in ckpts] == ["step_00000003", "step_00000006"]
    first = load_train_state(ckpts[0])
    assert first["sessions"] == 1 and first["run_seconds"] > 0
    assert re.search(r"finished in \d+\.\d min;", capsys.readouterr().out)
    resumed = tmp_path / "resumed"
    assert main(["--resume", str(ckpts[0])] + overrides(corpus, resumed)) == 0
    assert re.search(r"finished in \d+\.\d min \(\d+\.\d min over 2 sessions\);", capsys.readouterr().out)
    last = load_train_state(list_checkpoints(resumed)[-1])
    assert last["sessions"] == 2 and last["run_seconds"] > first["run_seconds"]
    a, b = losses(full), losses(resumed)
    assert sorted(b) == [4, 5, 6]
    assert all(a[s] == b[s] for s in b), (a, b)  # bit for bit
    pa, pb = params(ckpts[1]), params(list_checkpoints(resumed)[-1])
    assert all(torch.equal(pa[k], pb[k]) for k in pa)
    assert load_train_state(ckpts[1])["data"]["seq"] == load_train_state(list_checkpoints(resumed)[-1])["data"]["seq"]


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def one_process_run(corpus, tmp_path_factory):
    run = tmp_path_factory.mktemp("one")
    assert main(overrides(corpus, run, steps=3, **{"checkpoint.every": 0})) == 0
    return run


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_two_process_gloo_equals_one_process(corpus, tmp_path, one_process_run, strategy):
    """Same global batch (8 sequences): 1 rank x 2 accumulation vs 2 ranks x 1 (DDP, or FSDP2 sharding): the
    same parameters and losses."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    two = overrides(corpus, tmp_path / "two", steps=3, **{"checkpoint.every": 0, "distributed.strategy": strategy})
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(_free_port()),
           "-m", "avey_b.training.pretrain"] + two
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "4 seq x 1 accumulation x 2 rank(s)" in proc.stdout
    p1, p2 = params(one_process_run / "model"), params(tmp_path / "two" / "model")
    assert p1.keys() == p2.keys()
    for k in p1:
        torch.testing.assert_close(p1[k], p2[k], rtol=1e-4, atol=1e-5, msg=k)
    l1, l2 = losses(one_process_run), losses(tmp_path / "two")
    assert all(abs(l1[s] - l2[s]) < 1e-4 for s in l1)


@pytest.mark.slow
def test_sigterm_leaves_a_loadable_checkpoint(corpus, tmp_path):
    run = tmp_path / "killed"
    # a tokenizer worker process too, and the signal goes to the whole process group (as Ctrl-C or a
    # cluster scheduler would send it): the worker must not die before the trainer has saved
    cmd = [sys.executable, "-m", "avey_b.training.pretrain"] + overrides(
        corpus, run, steps=10_000, **{"checkpoint.every": 0, "data.num_workers": 1})
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
                            env={**os.environ, "OMP_NUM_THREADS": "1"}, start_new_session=True)
    deadline = time.time() + 90
    for line in proc.stdout:
        if line.startswith("step") and "loss" in line:  # training is under way
            break
        assert time.time() < deadline
    os.killpg(proc.pid, signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, out[-2000:]
    ckpt = list_checkpoints(run)[-1]
    state = load_train_state(ckpt)
    assert 1 <= state["step"] < 10_000
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    import avey_b  # noqa: F401

    AutoModelForMaskedLM.from_pretrained(ckpt)
    AutoTokenizer.from_pretrained(ckpt)
    assert not any(p.name.startswith(".tmp") for p in (run / "checkpoints").iterdir())


def test_missing_and_empty_corpora_fail_clearly(corpus, tmp_path):
    with pytest.raises(FileNotFoundError, match="no_such_dir"):
        main(overrides(corpus, tmp_path / "a", **{"data.train": str(tmp_path / "no_such_dir")}))
    (tmp_path / "empty.jsonl").write_text("")
    with pytest.raises(ValueError, match="no documents"):
        main(overrides(corpus, tmp_path / "b", **{"data.train": str(tmp_path / "empty.jsonl")}))
    with pytest.raises(KeyError, match="train.max_step'"):
        main(overrides(corpus, tmp_path / "c") + ["train.max_step=3"])


def test_a_resumed_run_reports_this_sessions_time_and_the_whole_runs():
    now = time.time()
    assert took(TrainState(started=now - 54)) == "0.9 min"
    assert took(TrainState(started=now - 54, session=2, earlier_s=642.0)) == "0.9 min (11.6 min over 2 sessions)"
    assert took(TrainState(started=now - 54, session=3, earlier_s=None)) == (
        "0.9 min (session 3 of the run; the checkpoint it resumed from does not record the earlier sessions' time)")


def test_help_works(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0
    assert "optim.lr" in capsys.readouterr().out


def test_auto_precision_uses_bf16_only_where_it_is_native(monkeypatch):
    from avey_b.utils import device

    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    monkeypatch.setattr(device, "cpu_has_native_bf16", lambda: False)
    assert not device.use_bf16("auto", cpu) and device.use_bf16("auto", cuda)
    assert device.use_bf16("bf16", cpu) and not device.use_bf16("fp32", cuda)
    monkeypatch.setattr(device, "cpu_has_native_bf16", lambda: True)
    assert device.use_bf16("auto", cpu) and not device.use_bf16("fp32", cpu)
