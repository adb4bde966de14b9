"""`avey-b niah evaluate`: fine-tunes through the shared QA harness and reports EM/F1 per length, with
lengths past a model's maximum recorded as "—" and OOM recorded as data. Tiny models (random weights, a few
steps: the scores are not meaningful, the bookkeeping is) and a tokenizer built in the test."""

import json

import pytest
from test_niah_generator import bpe_tokenizer

from avey_b.evaluation import niah


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("niah")
    tok = bpe_tokenizer()
    tok.save_pretrained(root / "tok")
    niah.main(
        [
            "generate",
            "--tokenizer",
            str(root / "tok"),
            "--out",
            str(root / "data"),
            "--tasks",
            "niah-2",
            "--lengths",
            "128",
            "256",
            "640",
            "--train-lengths",
            "128",
            "--n-train",
            "40",
            "--n-test",
            "10",
            "--format",
            "jsonl",
        ]
    )
    return root


def _evaluate(data, out, *models, extra=()):
    return niah.main(
        [
            "evaluate",
            "--data",
            str(data / "data"),
            "--models",
            *models,
            "--tokenizer",
            str(data / "tok"),
            "--tasks",
            "niah-2",
            "--train-length",
            "128",
            "--max-steps",
            "3",
            "--batch-size",
            "8",
            "--lr",
            "1e-3",
            "--out",
            str(out),
            "--device",
            "cpu",
            *extra,
        ]
    )


def test_evaluate_reports_per_length_and_marks_max_length(data, tmp_path, capsys):
    out = tmp_path / "eval"
    assert _evaluate(data, out, "avey-b-tiny", "bert-tiny:max_position_embeddings=300") == 0
    recs = {r["model"]: r for r in niah.read_jsonl(str(out / "results.jsonl"))}
    avey, bert = recs["avey-b-tiny"], recs["bert-tiny:max_position_embeddings=300"]
    assert avey["train"]["steps"] == 3 and avey["built"] == "from config, random weights"
    for n in ("128", "256", "640"):
        r = avey["results"][n]
        assert r["status"] == "ok" and r["n"] == 10 and 0 <= r["exact"] <= r["f1"] <= 100
    # BERT's position table (300 here) cannot take the 640-token set: "—", not a crash.
    assert bert["results"]["256"]["status"] == "ok"
    assert bert["results"]["640"]["status"] == "max_length"
    table = (out / "table_exact.md").read_text()
    assert "| niah-2 | bert-tiny:max_position_embeddings=300 |" in table and "—" in table
    # Rerun: finished (model, task) pairs are skipped, not duplicated.
    _evaluate(data, out, "avey-b-tiny")
    assert len(niah.read_jsonl(str(out / "results.jsonl"))) == 2
    json.loads(capsys.readouterr().out.strip().splitlines()[0])


def test_oom_is_recorded_and_later_lengths_skipped(data, tmp_path, monkeypatch):
    from avey_b.evaluation.tasks.qa import QuestionAnsweringTask

    real = QuestionAnsweringTask.evaluate

    def flaky(self, model, tok, examples, cfg):
        if cfg.max_length > 200:
            raise RuntimeError("CUDA out of memory. Tried to allocate 80.00 GiB")
        return real(self, model, tok, examples, cfg)

    monkeypatch.setattr(QuestionAnsweringTask, "evaluate", flaky)
    out = tmp_path / "oom"
    _evaluate(data, out, "avey-b-tiny")
    (rec,) = niah.read_jsonl(str(out / "results.jsonl"))
    assert rec["results"]["128"]["status"] == "ok"
    assert rec["results"]["256"]["status"] == "oom" and "out of memory" in rec["results"]["256"]["error"]
    assert rec["results"]["640"] == {**rec["results"]["640"], "status": "oom", "inferred": True}
    assert "OOM" in (out / "table_f1.md").read_text()


def test_config_built_model_needs_a_tokenizer(data, tmp_path):
    with pytest.raises(SystemExit, match="--tokenizer"):
        niah.main(
            [
                "evaluate",
                "--data",
                str(data / "data"),
                "--models",
                "avey-b-tiny",
                "--tasks",
                "niah-2",
                "--train-length",
                "128",
                "--out",
                str(tmp_path / "x"),
            ]
        )


def test_missing_test_length_is_a_clear_error(data, tmp_path):
    with pytest.raises(FileNotFoundError, match="lengths \\[999\\]"):
        _evaluate(data, tmp_path / "y", "avey-b-tiny", extra=("--lengths", "999"))
