"""`avey-b niah evaluate`: fine-tunes through the shared QA harness and reports EM/F1 per length, with
lengths past a model's maximum recorded as "—" and OOM recorded as data. Tiny models (random weights, a few
steps: the scores are not meaningful, the bookkeeping is) and a tokenizer built in the test."""

import json
import random

import pytest
import torch
from test_niah_generator import bpe_tokenizer

from avey_b import cli
from avey_b.data import niah as niah_data
from avey_b.evaluation.niah import answer_tokens, retrieval, runs, scoring, sets, tables
from avey_b.evaluation.niah.needles import needle_breakdown, needle_token_sets
from avey_b.evaluation.niah.options import niah_evaluate_options
from avey_b.utils.records import read_jsonl


def niah(argv):
    """``avey-b niah ARGV``, its errors raised (``--debug``) so that the tests see their type."""
    return cli.main(["--debug", "niah", *argv])


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("niah")
    tok = bpe_tokenizer()
    tok.save_pretrained(root / "tok")
    niah(
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
    return niah(
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
    recs = {r["model"]: r for r in read_jsonl(str(out / "results.jsonl"))}
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
    assert len(read_jsonl(str(out / "results.jsonl"))) == 2
    json.loads(capsys.readouterr().out.strip().splitlines()[0])
    _evaluate(data, out, "avey-b-tiny", extra=("--seed", "1", "--no-retrieval"))
    recs = read_jsonl(str(out / "results.jsonl"))
    assert [(r["model"], r["seed"]) for r in recs][-1] == ("avey-b-tiny", 1)
    assert "retrieval" not in recs[-1]["results"]["128"]
    # The table gives the median over seeds (of two: their mean), its 95% bootstrap interval, and the chance level.
    runs = [r for r in recs if r["model"] == "avey-b-tiny"]
    scores = [r["results"]["256"]["exact"] for r in runs]
    lo, hi = tables.bootstrap_interval([r["results"]["256"]["per_example"]["exact"] for r in runs])
    row = next(line for line in (out / "table_exact.md").read_text().splitlines() if "avey-b-tiny" in line)
    assert f"| qa | 70.0 | {sum(scores) / 2:.1f} ({100 * lo:.1f}–{100 * hi:.1f}) |" in row
    assert all(r["results"]["256"]["chance"] == 70.0 for r in runs)  # 40% one needle, 60% two: 0.4 + 0.6 / 2


def test_needle_retrieval_reads_the_rankers_choice(data):
    """The statistic is the ranker's choice at the needle's and the question's splits. With k = n - 1 every
    candidate is retrieved: a unidirectional ranker (candidates precede the split) always brings the question to
    the needle and never the reverse, a bidirectional one both. With k = 1 it is the ranker's top split."""
    import torch

    from avey_b.data.tokenization import load_tokenizer
    from avey_b.utils import model_spec

    tok = load_tokenizer(str(data / "tok"), complete=False)
    rows = read_jsonl(str(data / "data" / "niah-2" / "test_256.jsonl"))[:4]
    examples = sets.squad_examples(rows)

    def model_with(k, ranker):
        spec = f"avey-b-tiny:split_size=16,num_retrieved_splits={k},ranker={ranker}"
        config = model_spec.build_config(model_spec.parse_spec(spec))
        config.vocab_size = len(tok)
        return model_spec.random_model(config, head="qa").eval()

    # 256 tokens = 16 splits; the question is in split 0, every needle later
    r = retrieval.needle_retrieval(model_with(15, "unidirectional"), tok, examples, torch.device("cpu"))
    assert (r["needle_to_question"], r["question_to_needle"]) == (1.0, 0.0)
    r = retrieval.needle_retrieval(model_with(15, "bidirectional"), tok, examples, torch.device("cpu"))
    assert (r["needle_to_question"], r["question_to_needle"]) == (1.0, 1.0)
    model = model_with(1, "bidirectional")
    r = retrieval.needle_retrieval(model, tok, examples, torch.device("cpu"))
    hits = {"needle_to_question": 0, "question_to_needle": 0}
    with torch.no_grad():
        for e, row in zip(examples, rows, strict=True):
            enc = tok(e["question"], e["context"], return_tensors="pt")
            x = model.model.embed_tokens(enc["input_ids"])
            n = -(-x.shape[1] // 16)
            x = torch.nn.functional.pad(x, (0, 0, 0, n * 16 - x.shape[1])).view(1, n, 16, -1)
            keep = torch.arange(n * 16).view(1, n, 16) < enc["input_ids"].shape[1]
            idx = model.model.ranker(x, keep).idx
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

    rows = read_jsonl(str(data / "data" / "niah-2" / "test_256.jsonl"))
    examples = sets.squad_examples(rows)
    need = max(len(tok(e["question"], e["context"])["input_ids"]) for e in examples)
    cfg = RunConfig(lr=1e-3, max_length=need, eval_batch_size=3, doc_stride=need // 4, precision="fp32")
    with torch.no_grad(), retrieval.RankerChoices(model) as rc:
        QuestionAnsweringTask().evaluate(model, tok, examples, cfg)
    in_scoring = retrieval.retrieval_stats(tok, examples, rc.rows, 16, 1)
    assert in_scoring == retrieval.needle_retrieval(model, tok, examples, torch.device("cpu"))


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
    (rec,) = read_jsonl(str(out / "results.jsonl"))
    assert rec["results"]["128"]["status"] == "ok"
    assert rec["results"]["256"]["status"] == "oom" and "out of memory" in rec["results"]["256"]["error"]
    assert rec["results"]["640"] == {**rec["results"]["640"], "status": "oom", "inferred": True}
    assert "OOM" in (out / "table_f1.md").read_text()


def test_config_built_model_needs_a_tokenizer(data, tmp_path):
    with pytest.raises(SystemExit, match="--tokenizer"):
        niah(
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
    rows = read_jsonl(str(data / "data" / "niah-2" / "test_640.jsonl"))
    one = [r for r in rows if r["num_needles"] == 1]
    two = [r for r in rows if r["num_needles"] == 2]
    assert one and two
    values = {r["id"]: [r["context"][s + len(niah_data.needle_prefix(r["key"])):].split(" ", 1)[0]
                        for s in r["needle_char_starts"]] for r in two}
    right = {r["id"]: r["answers"]["text"][0] for r in rows}
    assert needle_breakdown(rows, right) == {"one_needle": 1.0, "two_needles": 1.0, "other_value": 0.0,
                                                  "n_one": len(one), "n_two": len(two)}
    # every two-needle question answered with the other occurrence; one-needle questions with nothing
    wrong = {r["id"]: "" for r in one} | {i: next(v for v in vs if v != right[i]) for i, vs in values.items()}
    assert needle_breakdown(rows, wrong) == {"one_needle": 0.0, "two_needles": 0.0, "other_value": 1.0,
                                                  "n_one": len(one), "n_two": len(two)}
    # a table of the breakdown, like the scores'
    rec = {"model": "m", "task": "niah-2", "lr": 1e-3, "seed": 0, "train": {"input_tokens": 128},
           "results": {"640": {"status": "ok", "exact": 40.0, "f1": 40.0,
                               "needles": needle_breakdown(rows, wrong)}}}
    assert "| niah-2 | m | qa | ? | 100.0 |" in tables.format_niah_table([rec], "other_value")


def test_report_merges_runs_of_separate_seeds_and_refuses_a_duplicate(data, tmp_path):
    """Seeds fine-tuned in separate processes (separate --out) give one table with their mean and range."""
    for seed in (0, 1):
        _evaluate(data, tmp_path / f"s{seed}", "avey-b-tiny", extra=("--seed", str(seed), "--no-retrieval"))
    merged = tmp_path / "merged"
    assert niah(["report", str(tmp_path / "s0"), str(tmp_path / "s1" / "results.jsonl"), "--out",
                      str(merged)]) == 0
    recs = read_jsonl(str(merged / "results.jsonl"))
    assert sorted(r["seed"] for r in recs) == [0, 1]
    assert "median over 2 fine-tuning seed(s)" in (merged / "table_exact.md").read_text()
    assert (merged / "niah_by_needles.png").stat().st_size > 0
    with pytest.raises(SystemExit, match="lr 0.001 seed 0 is in both"):
        niah(["report", str(tmp_path / "s0"), str(tmp_path / "s0"), "--out", str(tmp_path / "dup")])
    with pytest.raises(SystemExit, match="no results at"):
        niah(["report", str(tmp_path / "nowhere"), "--out", str(tmp_path / "x")])


# ------------------------------------------------------------------------------ the token-classification form


def _row(question, context, answer, key="river-stone", starts=None, ordinal=None):
    start = context.index(answer)
    return {"id": "x", "question": question, "context": context, "key": key, "ordinal": ordinal,
            "num_needles": len(starts or [0]), "needle_char_starts": starts or [],
            "answers": {"text": [answer], "answer_start": [start]}}


def test_authors_token_score_on_a_hand_made_example():
    """The authors' input, labels (answer tokens 1, everything else 0) and per-example score: the F1 between the
    positions predicted 1 and the labelled ones over the whole input, an empty set standing for {0}."""
    tok = bpe_tokenizer()
    row = _row("What is the value of river-stone?", "green house The value of river-stone is 4821973 . water light",
               "4821973")
    (feat,) = answer_tokens.token_classification_features(tok, [row])
    gold = [i for i, y in enumerate(feat["labels"]) if y == 1]
    assert gold and tok.decode([feat["input_ids"][i] for i in gold]).strip() == "4821973"
    assert gold == list(range(gold[0], gold[-1] + 1))  # one contiguous span
    assert tok.decode(feat["input_ids"]).startswith("Question: What is the value of river-stone?\nContext: green")
    assert feat["input_ids"][-1] == tok.eos_token_id and len(feat["labels"]) == len(feat["input_ids"])
    n = len(gold)
    assert answer_tokens.authors_token_score(gold, gold) == 1.0
    assert answer_tokens.authors_token_score([], gold) == 0.0  # nothing predicted: {0} against the answer
    assert answer_tokens.authors_token_score([], []) == 1.0
    # one question token predicted besides the answer: precision n / (n + 1), recall 1 (the authors count the
    # question's positions too)
    assert answer_tokens.authors_token_score([1, *gold], gold) == pytest.approx(2 * n / (2 * n + 1))
    assert answer_tokens.authors_token_score(gold[:1], gold) == pytest.approx(2 / (n + 1))


class _Oracle(torch.nn.Module):
    """A token classifier that labels 1 exactly the positions it is told, per input (found by its ids)."""

    def __init__(self, positions):
        super().__init__()
        self.positions = positions  # tuple(input_ids) -> set of positions
        self.w = torch.nn.Parameter(torch.zeros(()))

    def forward(self, input_ids, attention_mask=None, **_):
        logits = torch.zeros(*input_ids.shape, 2)
        logits[..., 0] = 1.0
        for b, row in enumerate(input_ids.tolist()):
            n = int(attention_mask[b].sum())
            for i in self.positions[tuple(row[:n])]:
                logits[b, i] = torch.tensor([0.0, 1.0])
        logits[..., 1] += (attention_mask == 0) * 5.0  # padding says "answer": it must not count
        return type("Out", (), {"logits": logits + self.w})()


def test_token_classification_scoring_and_the_chance_level_by_brute_force(data):
    """On a generated test set: labelling exactly the asked needle scores 100; labelling one needle chosen
    uniformly (every needle, enumerated) scores the chance level printed next to the scores on average; labelling
    always the other needle of a two-needle question scores 0 on those and counts as 'other_value'."""
    from avey_b.data.tokenization import load_tokenizer
    from avey_b.evaluation.tasks.base import RunConfig

    tok = load_tokenizer(str(data / "tok"), complete=False)
    rows = read_jsonl(str(data / "data" / "niah-2" / "test_256.jsonl"))
    feats = answer_tokens.token_classification_features(tok, rows)
    needles = needle_token_sets(rows, feats, tok)
    cfg = RunConfig(lr=1e-3, precision="fp32")
    key = [tuple(f["input_ids"]) for f in feats]
    asked = [(r["ordinal"] or 1) - 1 for r in rows]

    right = scoring.score_token_classification(
        _Oracle({k: n[a] for k, n, a in zip(key, needles, asked, strict=True)}), tok, rows, cfg, batch_size=3)
    assert right["score"] == 100.0 and right["needles"]["other_value"] == 0.0
    # labelling every needle: precision |asked| / |all needles|, recall 1 -> above the chance level (2/3 with two
    # needles of equal token count: 0.4 + 0.6 * 2 / 3 = 80%)
    every = [2 * len(n[a]) / (len(n[a]) + sum(map(len, n))) for n, a in zip(needles, asked, strict=True)]
    assert right["every_needle"] == pytest.approx(100 * sum(every) / len(every))
    assert right["every_needle"] > 75

    guesses = [scoring.score_token_classification(
        _Oracle({k: n[min(g, len(n) - 1)] for k, n in zip(key, needles, strict=True)}), tok, rows, cfg, batch_size=4
    )["per_example"]["score"] for g in range(2)]
    # every needle of an example as the guess, equally likely: average over that example's needles
    brute = sum(sum(g[i] for g in guesses[:r["num_needles"]]) / r["num_needles"]
                for i, r in enumerate(rows)) / len(rows)
    assert brute == pytest.approx(niah_data.set_chance_level(rows)) and brute == pytest.approx(0.7)

    wrong = scoring.score_token_classification(
        _Oracle({k: n[1 - a] if len(n) == 2 else n[0] for k, n, a in zip(key, needles, asked, strict=True)}),
        tok, rows, cfg, 5)
    assert wrong["needles"] == {"one_needle": 1.0, "two_needles": 0.0, "other_value": 1.0, "n_one": 4, "n_two": 6}


def test_bootstrap_interval_on_known_cases():
    assert tables.bootstrap_interval([[1.0] * 50]) == (1.0, 1.0)
    # 100 right of 200: the normal approximation 0.5 +- 1.96 sqrt(0.25 / 200) = 0.5 +- 0.069
    lo, hi = tables.bootstrap_interval([[1.0, 0.0] * 100])
    assert lo == pytest.approx(0.431, abs=0.01) and hi == pytest.approx(0.569, abs=0.01)
    assert (lo, hi) == tables.bootstrap_interval([[1.0, 0.0] * 100])  # seeded: the same report twice
    # three seeds scoring the same: the interval of one
    assert tables.bootstrap_interval([[1.0, 0.0] * 100] * 3) == (lo, hi)


def _tc(data, out, *extra):
    return niah(["evaluate", "--data", str(data / "data"), "--models", "avey-b-tiny", "--tokenizer",
                      str(data / "tok"), "--tasks", "niah-2", "--train-length", "128", "--lengths", "128", "256",
                      "--form", "token-classification", "--max-train-examples", "8", "--batch-size", "4",
                      "--max-steps", "2", "--device", "cpu", "--no-retrieval", "--out", str(out), *extra])


def test_token_classification_form_end_to_end(data, tmp_path, capsys):
    """Both default learning rates, 4 examples per step as micro-batches of 1 (4 forward passes a step), the
    authors' score with the chance level, in the table; the start line of each fine-tuning names its threads."""
    out = tmp_path / "tc"
    assert _tc(data, out, "--threads", "1") == 0
    err = capsys.readouterr().err
    assert "niah niah-2 of avey-b-tiny: PyTorch on cpu" in err and "1 CPU thread (" in err
    recs = read_jsonl(str(out / "results.jsonl"))
    assert sorted(r["lr"] for r in recs) == [1e-4, 5e-4] and {r["form"] for r in recs} == {"token-classification"}
    r = recs[0]
    assert (r["train"]["steps"], r["train"]["micro_batch"], r["train"]["accumulation"]) == (2, 1, 4)
    assert r["settings"]["optimizer"] == {"betas": [0.9, 0.95], "eps": 1e-5}
    assert r["settings"]["run_config"]["weight_decay"] == 0.1
    res = r["results"]["256"]
    assert res["status"] == "ok" and 0 <= res["score"] <= 100 and res["chance"] == 70.0
    assert len(res["per_example"]["score"]) == res["n"] == 10
    table = (out / "table_score.md").read_text()
    assert "| task | model | form | chance | every needle | 128 | 256 |" in table
    assert "| niah-2 | avey-b-tiny | token-classification | 70.0 |" in table and "1e-4" not in table
    assert "0.0001, 0.0005" in table
    assert not (out / "runs" / "avey-b-tiny" / "niah-2" / "token-classification" / "lr0.0001-seed0" / "model").exists()


def test_an_interrupted_evaluation_resumes_where_it_stopped_and_refuses_changed_settings(data, tmp_path,
                                                                                        monkeypatch):
    out = tmp_path / "resume"
    calls = {"train": 0, "score": 0}
    real_train, real_score = runs.train_token_classifier, runs.score_length

    def train(*a, **k):
        calls["train"] += 1
        return real_train(*a, **k)

    def score(model, tok, task_dir, length, *a, **k):
        calls["score"] += 1
        if calls.get("stop_at") == length:
            raise RuntimeError("interrupted")
        return real_score(model, tok, task_dir, length, *a, **k)

    monkeypatch.setattr(runs, "train_token_classifier", train)
    monkeypatch.setattr(runs, "score_length", score)
    calls["stop_at"] = 256
    with pytest.raises(RuntimeError, match="interrupted"):
        _tc(data, out, "--lr", "1e-4")
    run = out / "runs" / "avey-b-tiny" / "niah-2" / "token-classification" / "lr0.0001-seed0"
    assert (run / "length_128.json").exists() and not (run / "length_256.json").exists()
    assert (run / "model").is_dir() and calls == {"train": 1, "score": 2, "stop_at": 256}
    first = json.loads((run / "length_128.json").read_text())

    # a changed setting is refused, not mixed with the finished length
    with pytest.raises(SystemExit, match=r"other settings \(run_config.warmup_ratio\)"):
        _tc(data, out, "--lr", "1e-4", "--warmup-ratio", "0.2")

    calls.update(train=0, score=0, stop_at=None)
    assert _tc(data, out, "--lr", "1e-4") == 0
    assert calls["train"] == 0 and calls["score"] == 1  # only the unfinished length
    (rec,) = read_jsonl(str(out / "results.jsonl"))
    assert rec["results"]["128"] == first and rec["results"]["256"]["status"] == "ok"
    assert not (run / "model").exists()  # the record holds everything now

    calls.update(train=0, score=0)
    assert _tc(data, out, "--lr", "1e-4") == 0  # finished: skipped
    assert calls["train"] == calls["score"] == 0 and len(read_jsonl(str(out / "results.jsonl"))) == 1
    with pytest.raises(SystemExit, match=r"other settings \(run_config.max_steps\)"):
        _tc(data, out, "--lr", "1e-4", "--max-steps", "3")


def test_each_form_has_its_defaults_and_explicit_flags_win():
    def resolved(*flags):
        argv = ["evaluate", "--data", "d", "--models", "m", "--out", "o", *flags]
        return niah_evaluate_options(cli.parse("niah", argv))

    qa = resolved()
    assert (qa.lr, qa.settings.batch_size, qa.settings.weight_decay, qa.micro_batch) == ([5e-5], 8, 0.0, None)
    tc = resolved("--form", "token-classification")
    assert (tc.lr, tc.settings.batch_size, tc.settings.weight_decay, tc.micro_batch, tc.settings.epochs) == (
        [1e-4, 5e-4], 32, 0.1, 1, 1.0)
    tc = resolved("--form", "token-classification", "--lr", "3e-4", "--batch-size", "8", "--micro-batch", "2")
    assert (tc.lr, tc.settings.batch_size, tc.micro_batch, tc.settings.weight_decay) == ([3e-4], 8, 2, 0.1)
    with pytest.raises(SystemExit, match="--micro-batch applies to --form token-classification"):
        resolved("--micro-batch", "2")
    with pytest.raises(SystemExit, match="multiple of --micro-batch"):
        resolved("--form", "token-classification", "--batch-size", "5", "--micro-batch", "2")


# ----------------------------------------------------------------------------------------- the paper protocol
@pytest.fixture(scope="module")
def authors_data(tmp_path_factory):
    """The authors' sets (NIAH-2 at 24 and 40 words, train and test at each) and a tokenizer with both an eos and
    an unknown token (the library's BPE), so that the end-token rule shows."""
    from avey_b.data.niah_authors import HAYSTACK_WORDS
    from avey_b.data.tokenization import train_bpe_tokenizer

    root = tmp_path_factory.mktemp("niah-authors")
    rng = random.Random(0)
    texts = [" ".join(rng.choice(HAYSTACK_WORDS) for _ in range(30)) + f" {rng.randint(10**6, 10**7 - 1)}"
             for _ in range(200)]
    tok = train_bpe_tokenizer(texts, vocab_size=320)
    assert tok.eos_token and tok.unk_token and tok.eos_token != tok.unk_token
    tok.save_pretrained(root / "tok")
    niah(["generate", "--protocol", "paper", "--out", str(root / "data"), "--tasks", "niah-2", "--lengths", "24",
          "40", "--n-train", "4", "--n-test", "3", "--format", "jsonl"])
    return root, tok


def _paper(root, out, *extra):
    return niah(["evaluate", "--data", str(root / "data"), "--models", "bert-tiny", "--tokenizer", str(root / "tok"),
                 "--tasks", "niah-2", "--lr", "1e-3", "--max-steps", "1", "--batch-size", "2", "--device", "cpu",
                 "--no-retrieval", "--out", str(out), *extra])


def test_paper_protocol_fine_tunes_at_each_test_length_in_bf16_ending_inputs_as_encodeval(authors_data, tmp_path,
                                                                                         monkeypatch):
    """EncodEval's NIAH: one fine-tuning per test length on the train set of that length, scored at that length
    alone; bf16 weights; the authors' inputs ended by the model's eos, else the unknown token (BERT's config names
    no eos: the unknown token). The standard protocol keeps the tokenizer's eos, float32 and one train length."""
    root, tok = authors_data
    seen = []
    real = runs.train_token_classifier

    def spy(model, features, cfg, *a, **k):
        seen.append({"dtype": next(model.parameters()).dtype, "last": {f["input_ids"][-1] for f in features},
                     "tokens": max(len(f["input_ids"]) for f in features)})
        return real(model, features, cfg, *a, **k)

    monkeypatch.setattr(runs, "train_token_classifier", spy)
    assert _paper(root, tmp_path / "paper", "--protocol", "paper", "--seeds", "0") == 0
    recs = sorted(read_jsonl(str(tmp_path / "paper" / "results.jsonl")), key=lambda r: r["settings"]["train"]["length"])
    assert [(r["settings"]["train"]["length"], list(r["results"])) for r in recs] == [(24, ["24"]), (40, ["40"])]
    for r in recs:
        assert (r["form"], r["protocol"], r["weights_dtype"], r["end_token"]) == (
            "token-classification", "paper", "bfloat16", tok.unk_token)
        assert r["settings"]["run_config"]["precision"] == "bf16" and r["results"][next(iter(r["results"]))]["n"] == 3
    assert [s["dtype"] for s in seen] == [torch.bfloat16] * 2
    assert [s["last"] for s in seen] == [{tok.unk_token_id}] * 2
    assert seen[0]["tokens"] < seen[1]["tokens"]  # trained on 24 words, then on 40
    assert "| niah-2 | bert-tiny | token-classification | 70.0 |" in (tmp_path / "paper" / "table_score.md").read_text()

    seen.clear()
    assert _paper(root, tmp_path / "standard", "--form", "token-classification", "--train-length", "24") == 0
    (rec,) = read_jsonl(str(tmp_path / "standard" / "results.jsonl"))
    assert (sorted(rec["results"]), rec["weights_dtype"], rec["end_token"]) == (["24", "40"], "float32", None)
    assert [s["last"] for s in seen] == [{tok.eos_token_id}] and seen[0]["dtype"] == torch.float32


def test_paper_protocol_cuts_inputs_at_encodeval_limit_instead_of_skipping_the_length(authors_data, tmp_path,
                                                                                      monkeypatch):
    """EncodEval cuts every NIAH input at round(0.99 x the model's stated length) (the answer possibly with it) and
    scores it; the standard protocol records a length past the model's window as "max_length". The limit here is
    made small (100 tokens: the questions take 54, the 24- and 40-word inputs 150 to 250) so that every input passes
    it; two seeds, one record each."""
    root, _ = authors_data
    monkeypatch.setattr(runs, "input_limit", lambda config, tok, protocol: 100)
    assert _paper(root, tmp_path / "cut", "--protocol", "paper", "--seeds", "0", "1", "--lengths", "24") == 0
    recs = read_jsonl(str(tmp_path / "cut" / "results.jsonl"))
    assert sorted((r["seed"], r["settings"]["train"]["length"]) for r in recs) == [(0, 24), (1, 24)]
    for r in recs:
        (res,) = r["results"].values()
        assert (r["max_length"], res["status"], res["truncated"]) == (100, "ok", True)
        assert res["input_tokens_max"] > 100 and "round(0.99 x max_position_embeddings 512)" in r["input_limit_rule"]
    monkeypatch.setattr(runs.model_spec, "max_length", lambda config, **k: 100)
    assert _paper(root, tmp_path / "skip", "--form", "token-classification", "--train-length", "24",
                  "--lengths", "24") == 0
    (rec,) = read_jsonl(str(tmp_path / "skip" / "results.jsonl"))
    assert {k: v["status"] for k, v in rec["results"].items()} == {"24": "max_length"}


def test_paper_protocol_defaults_and_explicit_flags_win():
    def resolved(*flags):
        return niah_evaluate_options(cli.parse("niah", ["evaluate", "--data", "d", "--models", "m", "--out", "o",
                                                        *flags]))

    paper = resolved("--protocol", "paper")
    assert (paper.form, paper.train_length, paper.each_length, paper.lr, paper.seeds) == (
        "token-classification", "each", True, [1e-4, 5e-4], list(range(10)))  # the release's NIAH configs, run.py
    s = paper.settings
    assert (s.protocol, s.weights_dtype, s.precision, s.batch_size, s.weight_decay, paper.micro_batch) == (
        "paper", "bfloat16", "bf16", 32, 0.1, 1)
    mine = resolved("--protocol", "paper", "--train-length", "2048", "--weights-dtype", "float32", "--lr", "1e-4")
    assert (mine.each_length, mine.settings.weights_dtype, mine.lr) == (False, "float32", [1e-4])
    assert resolved("--protocol", "paper", "--form", "qa").form == "qa"
    standard = resolved()
    assert (standard.form, standard.each_length, standard.settings.weights_dtype) == ("qa", False, "float32")


def test_each_length_needs_a_train_set_at_every_test_length(data, tmp_path):
    """The library's sets of the module fixture hold a train set at 128 tokens only."""
    with pytest.raises(FileNotFoundError, match=r"none at \[256, 640\]"):
        _evaluate(data, tmp_path / "each", "bert-tiny", extra=("--train-length", "each"))


def test_paper_protocol_runs_the_authors_checkpoint_with_the_release_padding(authors_data, tmp_path):
    """NIAH under the paper protocol runs the authors' checkpoints (the avey_b1 parameterization) with the release's
    padding, as the other cells of the protocol do, and pads with EncodEval's id; each record says so (``avey_b``,
    ``pad_id``)."""
    root, tok = authors_data
    argv = ["evaluate", "--data", str(root / "data"), "--tokenizer", str(root / "tok"), "--tasks", "niah-2",
            "--lr", "1e-3", "--max-steps", "1", "--batch-size", "2", "--device", "cpu", "--no-retrieval",
            "--lengths", "24", "--seeds", "0"]
    model = "avey-b-tiny:enricher_layout=release,enricher_activation=gelu,mixing_activation=identity"
    assert niah([*argv, "--models", model, "--protocol", "paper", "--out", str(tmp_path / "paper")]) == 0
    (rec,) = read_jsonl(str(tmp_path / "paper" / "results.jsonl"))
    assert rec["avey_b"] == {"padding": "release", "accumulation": "sum"}
    assert rec["pad_id"] == tok.pad_token_id  # the config's pad id (a model built from config takes the tokenizer's)
    assert niah([*argv, "--models", model, "--form", "token-classification", "--train-length", "24",
                 "--out", str(tmp_path / "standard")]) == 0
    (rec,) = read_jsonl(str(tmp_path / "standard" / "results.jsonl"))
    assert rec["avey_b"] == {"padding": "masked", "accumulation": "mean"}
