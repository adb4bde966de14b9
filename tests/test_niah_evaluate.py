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
    # Avey-B records how often its ranker pairs the needle's split with the question's; BERT has no ranker.
    for n in ("128", "256", "640"):
        r = avey["results"][n]["retrieval"]
        assert r["n"] == 10 and 0 <= r["question_to_needle"] <= 1 and 0 <= r["needle_to_question"] <= 1
    assert "retrieval" not in bert["results"]["256"]
    assert "| niah-2 | avey-b-tiny |" in (out / "table_needle_to_question.md").read_text()
    assert (out / "niah.png").stat().st_size > 0 and (out / "niah_by_needles.png").stat().st_size > 0
    assert "| niah-2 | avey-b-tiny |" in (out / "table_two_needles.md").read_text()
    # Rerun: finished (model, task, seed) runs are skipped, not duplicated; another seed is a new record.
    _evaluate(data, out, "avey-b-tiny")
    assert len(niah.read_jsonl(str(out / "results.jsonl"))) == 2
    json.loads(capsys.readouterr().out.strip().splitlines()[0])
    _evaluate(data, out, "avey-b-tiny", extra=("--seed", "1", "--no-retrieval"))
    recs = niah.read_jsonl(str(out / "results.jsonl"))
    assert [(r["model"], r["seed"]) for r in recs][-1] == ("avey-b-tiny", 1)
    assert "retrieval" not in recs[-1]["results"]["128"]
    # The table gives the median over seeds (of two: their mean), its 95% bootstrap interval, and the chance level.
    runs = [r for r in recs if r["model"] == "avey-b-tiny"]
    scores = [r["results"]["256"]["exact"] for r in runs]
    lo, hi = niah.bootstrap_interval([r["results"]["256"]["per_example"]["exact"] for r in runs])
    row = next(line for line in (out / "table_exact.md").read_text().splitlines() if "avey-b-tiny" in line)
    assert f"| qa | 70.0 | {sum(scores) / 2:.1f} ({100 * lo:.1f}–{100 * hi:.1f}) |" in row
    assert all(r["results"]["256"]["chance"] == 70.0 for r in runs)  # 40% one needle, 60% two: 0.4 + 0.6 / 2


def test_needle_retrieval_reads_the_rankers_choice(data):
    """The statistic is the ranker's choice at the needle's and the question's splits. With k = n - 1 every
    candidate is retrieved: a unidirectional ranker (candidates precede the split) always brings the question to
    the needle and never the reverse, a bidirectional one both. With k = 1 it is the ranker's top split."""
    import torch

    from avey_b import baselines
    from avey_b.tokenization import load_tokenizer

    tok = load_tokenizer(str(data / "tok"), complete=False)
    rows = niah.read_jsonl(str(data / "data" / "niah-2" / "test_256.jsonl"))[:4]
    examples = niah._squad_examples(rows)

    def model_with(k, ranker):
        spec = f"avey-b-tiny:split_size=16,num_retrieved_splits={k},ranker={ranker}"
        config = baselines.build_config(baselines.parse_spec(spec))
        config.vocab_size = len(tok)
        return baselines.build_model(config, head="qa").eval()

    # 256 tokens = 16 splits; the question is in split 0, every needle later
    r = niah.needle_retrieval(model_with(15, "unidirectional"), tok, examples, torch.device("cpu"))
    assert (r["needle_to_question"], r["question_to_needle"]) == (1.0, 0.0)
    r = niah.needle_retrieval(model_with(15, "bidirectional"), tok, examples, torch.device("cpu"))
    assert (r["needle_to_question"], r["question_to_needle"]) == (1.0, 1.0)
    model = model_with(1, "bidirectional")
    r = niah.needle_retrieval(model, tok, examples, torch.device("cpu"))
    hits = {"needle_to_question": 0, "question_to_needle": 0}
    with torch.no_grad():
        for e, row in zip(examples, rows, strict=True):
            enc = tok(e["question"], e["context"], return_tensors="pt")
            x = model.model.embed_tokens(enc["input_ids"])
            n = -(-x.shape[1] // 16)
            x = torch.nn.functional.pad(x, (0, 0, 0, n * 16 - x.shape[1])).view(1, n, 16, -1)
            keep = torch.arange(n * 16).view(1, n, 16) < enc["input_ids"].shape[1]
            _, idx, ok = model.model.ranker(x, keep)
            top = idx[0, :, -1].tolist()  # k = 1: the one retrieved split of each split
            needle = row["answer_token_start"] // 16
            q_splits = {i // 16 for i, s in enumerate(enc.sequence_ids(0)) if s == 0}
            hits["needle_to_question"] += top[needle] in q_splits
            hits["question_to_needle"] += any(top[q] == needle for q in q_splits)
    assert r["needle_to_question"] == hits["needle_to_question"] / 4
    assert r["question_to_needle"] == hits["question_to_needle"] / 4
    # `niah evaluate` records the same choice from its scoring passes: batched, padded rows, one window each
    from avey_b.evaluation.tasks.base import RunConfig
    from avey_b.evaluation.tasks.qa import QuestionAnsweringTask

    rows = niah.read_jsonl(str(data / "data" / "niah-2" / "test_256.jsonl"))
    examples = niah._squad_examples(rows)
    need = max(len(tok(e["question"], e["context"])["input_ids"]) for e in examples)
    cfg = RunConfig(lr=1e-3, max_length=need, eval_batch_size=3, doc_stride=need // 4, precision="fp32")
    with torch.no_grad(), niah.RankerChoices(model) as rc:
        QuestionAnsweringTask().evaluate(model, tok, examples, cfg)
    in_scoring = niah.retrieval_stats(tok, examples, rc.rows, 16, 1)
    assert in_scoring == niah.needle_retrieval(model, tok, examples, torch.device("cpu"))


def test_oom_is_recorded_and_later_lengths_skipped(data, tmp_path, monkeypatch):
    from avey_b.evaluation.tasks.qa import QuestionAnsweringTask

    real = QuestionAnsweringTask.predict

    def flaky(self, model, tok, examples, cfg):
        if cfg.max_length > 200:
            raise RuntimeError("CUDA out of memory. Tried to allocate 80.00 GiB")
        return real(self, model, tok, examples, cfg)

    monkeypatch.setattr(QuestionAnsweringTask, "predict", flaky)
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


def test_needle_breakdown_separates_one_and_two_needles_and_the_wrong_occurrence(data):
    """Exact match per number of needles, and 'other_value': a two-needle question answered with the needle not
    asked for. Checked with predictions built from the examples themselves."""
    rows = niah.read_jsonl(str(data / "data" / "niah-2" / "test_640.jsonl"))
    one = [r for r in rows if r["num_needles"] == 1]
    two = [r for r in rows if r["num_needles"] == 2]
    assert one and two
    values = {r["id"]: [r["context"][s + len(niah.needle_prefix(r["key"])):].split(" ", 1)[0]
                        for s in r["needle_char_starts"]] for r in two}
    right = {r["id"]: r["answers"]["text"][0] for r in rows}
    assert niah.needle_breakdown(rows, right) == {"one_needle": 1.0, "two_needles": 1.0, "other_value": 0.0,
                                                  "n_one": len(one), "n_two": len(two)}
    # every two-needle question answered with the other occurrence; one-needle questions with nothing
    wrong = {r["id"]: "" for r in one} | {i: next(v for v in vs if v != right[i]) for i, vs in values.items()}
    assert niah.needle_breakdown(rows, wrong) == {"one_needle": 0.0, "two_needles": 0.0, "other_value": 1.0,
                                                  "n_one": len(one), "n_two": len(two)}
    # a table of the breakdown, like the scores'
    rec = {"model": "m", "task": "niah-2", "lr": 1e-3, "seed": 0, "train": {"input_tokens": 128},
           "results": {"640": {"status": "ok", "exact": 40.0, "f1": 40.0,
                               "needles": niah.needle_breakdown(rows, wrong)}}}
    assert "| niah-2 | m | qa | ? | 100.0 |" in niah.format_niah_table([rec], "other_value")


def test_report_merges_runs_of_separate_seeds_and_refuses_a_duplicate(data, tmp_path):
    """Seeds fine-tuned in separate processes (separate --out) give one table with their mean and range."""
    for seed in (0, 1):
        _evaluate(data, tmp_path / f"s{seed}", "avey-b-tiny", extra=("--seed", str(seed), "--no-retrieval"))
    merged = tmp_path / "merged"
    assert niah.main(["report", str(tmp_path / "s0"), str(tmp_path / "s1" / "results.jsonl"), "--out",
                      str(merged)]) == 0
    recs = niah.read_jsonl(str(merged / "results.jsonl"))
    assert sorted(r["seed"] for r in recs) == [0, 1]
    assert "median over 2 fine-tuning seed(s)" in (merged / "table_exact.md").read_text()
    assert (merged / "niah_by_needles.png").stat().st_size > 0
    with pytest.raises(SystemExit, match="lr 0.001 seed 0 is in both"):
        niah.main(["report", str(tmp_path / "s0"), str(tmp_path / "s0"), "--out", str(tmp_path / "dup")])
    with pytest.raises(SystemExit, match="no results at"):
        niah.main(["report", str(tmp_path / "nowhere"), "--out", str(tmp_path / "x")])
