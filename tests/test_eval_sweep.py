"""The lr x seed sweep end to end on tiny local files: results, report, resume, failure isolation."""

import argparse
import json
import os

import pytest

from avey_b import cli
from avey_b import testing as toy
from avey_b.evaluation import finetune, report, sweep
from avey_b.evaluation.suites import suite_from_args


def evaluate(argv):
    """``avey-b evaluate ARGV``, its errors raised (``--debug``) so that the tests see their type."""
    return cli.main(["--debug", "evaluate", *argv])


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("sweep")
    return {
        **toy.encoders(root),
        "train": toy.sst2_tsv(str(root / "train.tsv"), 64, seed=0),
        "dev": toy.sst2_tsv(str(root / "dev.tsv"), 32, seed=1),
        "root": root,
    }


def _args(env, out, models, *extra):
    return ["--models", *models, "--tasks", "sst2", "--lrs", "1e-3", "--seeds", "1", "--output-dir", str(out),
            "--train-file", env["train"], "--eval-file", env["dev"], "--batch-size", "16", "--max-length", "16",
            "--device", "cpu", *extra]


def test_sweep_end_to_end_resume_and_failure_isolation(env, tmp_path, monkeypatch, capsys):
    out = tmp_path / "eval"
    models = [f"broken={tmp_path / 'no-such-model'}", f"avey-b={env['avey']}", f"bert={env['bert']}"]
    rc = evaluate(_args(env, out, models))
    assert rc == 1  # one cell failed ...
    err = capsys.readouterr().err
    assert "1 cell(s) failed" in err and "broken/standard/sst2/lr0.001_seed0" in err
    assert f"finetune sst2 of {env['avey']}: PyTorch on cpu" in err and ", auto (" in err  # each cell's start line

    # ... but the cells after it ran and were recorded
    records = {}
    for name in ("avey-b", "bert"):
        path = out / name / "standard" / "sst2" / "lr0.001_seed0" / "results.json"
        records[name] = json.loads(path.read_text())
        assert records[name]["model_name"] == name and records[name]["metric"] == "accuracy"
        assert 0 <= records[name]["score"] <= 100 and records[name]["metrics"]["n_eval"] == 32
        assert records[name]["train"]["steps"] == 4  # 64 examples / batch 16, one epoch (SC default)
    broken = json.loads((out / "broken" / "standard" / "sst2" / "lr0.001_seed0" / "error.json").read_text())
    assert "no-such-model" in broken["error"] and broken["traceback"]

    rep = json.loads((out / "report.json").read_text())
    assert rep["protocol"] == "standard" and rep["failed"][0]["dir"].startswith("broken")
    for name, rec in records.items():
        assert rep["models"][name]["tasks"]["sst2"]["score"] == pytest.approx(rec["score"])
    md = (out / "report.md").read_text()
    assert "| avey-b |" in md and "SST-2" in md and "Failed cells (1)" in md

    # resume: finished cells are not run again; the failed one is retried
    calls = []
    real = finetune.run_cell

    def spy(model, task, cfg, files, tokenizer=None):
        calls.append(model)
        return real(model, task, cfg, files, tokenizer)

    monkeypatch.setattr(sweep, "run_cell", spy)
    mtime = os.path.getmtime(out / "bert" / "standard" / "sst2" / "lr0.001_seed0" / "results.json")
    assert evaluate(_args(env, out, models[1:])) == 0
    assert calls == []
    assert os.path.getmtime(out / "bert" / "standard" / "sst2" / "lr0.001_seed0" / "results.json") == mtime

    # changing a setting under the same output directory is refused, not mixed in
    with pytest.raises(ValueError, match="other settings than requested"):
        evaluate(_args(env, out, models[1:], "--warmup-ratio", "0.2"))


@pytest.mark.slow
def test_isolated_subprocess_cell(env, tmp_path):
    out = tmp_path / "iso"
    assert evaluate(_args(env, out, [f"bert={env['bert']}"], "--isolate", "--max-steps", "1")) == 0
    cell = out / "bert" / "standard" / "sst2" / "lr0.001_seed0"
    assert json.loads((cell / "results.json").read_text())["train"]["steps"] == 1
    assert (cell / "log.txt").exists()


def test_suite_file_expands_the_grid_and_cli_overrides(env, tmp_path):
    suite = tmp_path / "suite.yaml"
    suite.write_text(
        f"models: {{a: {env['bert']}}}\ntasks: [sst2, conll2003]\nlrs: [1.0e-4, 5.0e-4]\nseeds: 3\n"
        f"output_dir: {tmp_path / 'o'}\ndefaults: {{batch_size: 8}}\ntask_overrides: {{conll2003: {{batch_size: 4}}}}\n"
    )
    ns = argparse.Namespace(batch_size=2)
    cells, out_dir, how = sweep.build_cells(suite_from_args(ns, sweep.load_suite(str(suite))))
    assert len(cells) == 2 * 2 * 3 and how == "median" and out_dir == str(tmp_path / "o")
    assert {c.cfg.batch_size for c in cells} == {2}  # the command line wins over the suite
    cells, _, _ = sweep.build_cells(sweep.load_suite(str(suite)))
    assert {(c.task, c.cfg.batch_size) for c in cells} == {("sst2", 8), ("conll2003", 4)}
    assert sorted({c.cfg.seed for c in cells}) == [0, 1, 2]
    suite.write_text("modles: {}\n")
    with pytest.raises(ValueError, match="unknown config key 'modles' \\(did you mean 'models'\\?\\)"):
        sweep.load_suite(str(suite))


def test_aggregate_median_at_best_lr_and_best_of():
    recs = [{"model_name": "m", "task": "sst2", "lr": lr, "score": s}
            for lr, scores in ((1e-4, [80, 90, 85]), (5e-4, [70, 95, 88])) for s in scores]
    recs += [{"model_name": "m", "task": "mnli", "lr": 1e-4, "score": 60.0},
             {"model_name": "m", "task": "conll2003", "lr": 1e-4, "score": 91.0}]
    table = report.aggregate(recs, "median")
    # medians: 1e-4 -> 85, 5e-4 -> 88: best lr 5e-4, sample std of (70, 95, 88)
    assert table["m"]["sst2"]["best_lr"] == 5e-4 and table["m"]["sst2"]["score"] == 88
    assert table["m"]["sst2"]["std"] == pytest.approx(12.897, abs=1e-3)
    assert report.aggregate(recs, "best")["m"]["sst2"]["score"] == 95
    avg = report.family_averages(table["m"])
    assert avg["SC"] == {"value": pytest.approx((88 + 60) / 2), "complete": False}
    md = report.markdown(table, "paper", "median", [])
    assert "the PAPER's protocol (EncodEval" in md and "**74.00***" in md and "| m |" in md


def test_report_compares_variants_of_a_model():
    recs = [{"model_name": f"{m}@{v}", "task": t, "lr": lr, "score": s}
            for m, base in (("avey-b", 70.0), ("bert", 60.0)) for v, gain in (("scratch", 0.0), ("pretrained", 5.0))
            for t in ("sst2", "conll2003") for lr, shift in ((1e-4, 0.0), (1e-3, 1.0)) for s in (
                base + gain + shift - 1, base + gain + shift, base + gain + shift + 2)]
    recs.append({"model_name": "plain", "task": "sst2", "lr": 1e-4, "score": 50.0})
    order = ["avey-b@scratch", "avey-b@pretrained", "bert@scratch", "bert@pretrained", "plain"]  # the suite's order
    md = report.markdown(report.aggregate(recs, "median"), "standard", "median", [], models=order)
    assert "| Model | Task | scratch | pretrained | Δ pretrained |" in md
    assert "| avey-b | SST-2 | 71.00 ± 1.53 [70.00, 73.00] | 76.00 ± 1.53 [75.00, 78.00] | +5.00 |" in md
    assert "| bert | CoNLL | 61.00 ± 1.53 [60.00, 63.00] | 66.00 ± 1.53 [65.00, 68.00] | +5.00 |" in md
    assert "| plain | SST-2 |" not in md.split("**By variant**")[1]
    assert "**By variant**" not in report.markdown(report.aggregate(recs[-1:], "median"), "standard", "median", [])
    assert sweep.parse_models(["avey-b@scratch=/x"]) == {"avey-b@scratch": "/x"}


def test_help_works():
    for verb in ("finetune", "evaluate", "report"):
        with pytest.raises(SystemExit) as e:
            cli.main([verb, "--help"])
        assert e.value.code == 0


def test_shipped_suites_expand_by_name():
    paper = sweep.load_suite("paper")  # shipped as package data, found by name from any working directory
    cells, _, how = sweep.build_cells(paper)
    # 12 benchmarks x 4 lrs x 10 seeds, and one MS MARCO-pairs fine-tuning per (model, lr, seed) for the 3 IR ones
    assert how == "median" and len(cells) == len(paper.models) * (12 + 1) * 4 * 10
    assert sum(c.task == "msmarco_pairs" for c in cells) == len(paper.models) * 4 * 10
    pairs = next(c for c in cells if c.task == "msmarco_pairs").cfg
    assert (pairs.batch_size, pairs.max_steps, pairs.adam_beta2, pairs.weights_dtype) == (16, 1000, 0.95, "bfloat16")
    assert {c.cfg.lr for c in cells} == set(sweep.PAPER_LRS)
    cells, _, how = sweep.build_cells(sweep.load_suite("ablation"))
    assert how == "best" and {c.cfg.lr for c in cells} == {5e-4} and {c.cfg.seed for c in cells} == set(range(5))
    assert sweep.build_cells(sweep.load_suite("tiny.yaml"))[0]
    from avey_b.configs import resolve
    from avey_b.studies.ablation import load_variants

    assert "bidirectional-ranker" in load_variants(str(resolve("ablation_variants", "eval"))).variants


def test_suites_and_variants_are_strict(tmp_path):
    from avey_b.studies.ablation import load_variants

    (tmp_path / "suite.yaml").write_text("tasks: [sst2]\nlearning_rates: [1e-3]\n")
    with pytest.raises(KeyError, match="unknown config key 'learning_rates'.*'lrs'"):
        sweep.load_suite(str(tmp_path / "suite.yaml"))
    (tmp_path / "variants.yaml").write_text("variants: {a: {}}\npretrain: base\n")
    with pytest.raises(KeyError, match="unknown config key 'pretrain'.*'pretrain_config'"):
        load_variants(str(tmp_path / "variants.yaml"))
    with pytest.raises(FileNotFoundError, match="neither a path nor a shipped eval config: ablation, "):
        sweep.load_suite("papr")


def test_a_cell_whose_data_changed_runs_again(env, tmp_path, capsys):
    import shutil

    dev = tmp_path / "dev.tsv"
    shutil.copy(env["dev"], dev)
    out = tmp_path / "eval"
    args = ["--models", f"avey-b={env['avey']}", "--tasks", "sst2", "--lrs", "1e-3", "--seeds", "1",
            "--output-dir", str(out), "--train-file", env["train"], "--eval-file", str(dev), "--batch-size", "16",
            "--max-length", "16", "--device", "cpu"]
    result = out / "avey-b" / "standard" / "sst2" / "lr0.001_seed0" / "results.json"
    assert evaluate(args) == 0
    assert json.loads(result.read_text())["metrics"]["n_eval"] == 32
    assert evaluate(args) == 0
    assert "1 already done, 0 to run" in capsys.readouterr().out  # same data: not run again
    lines = dev.read_text().splitlines()
    dev.write_text("\n".join(lines[:11]) + "\n")  # the dev file shrinks to 10 examples
    assert evaluate(args) == 0
    assert "its data or model changed" in capsys.readouterr().out
    assert json.loads(result.read_text())["metrics"]["n_eval"] == 10  # scored on the new data, not the stale cell


def test_the_light_settings_agree_with_the_modules_that_use_them():
    """settings.py imports no torch, so it registers the tasks by name: each name's class is the task of that
    name, in the fine-tuning task table's benchmark family."""
    from avey_b.evaluation import settings
    from avey_b.evaluation.tasks import TASKS
    from avey_b.finetuning import registry

    assert settings.TASK_NAMES == tuple(TASKS) == registry.names(settings.BENCHMARKS)
    assert all(cls.name == name for name, cls in TASKS.items())


def test_the_help_of_the_evaluation_verbs_imports_no_torch():
    import subprocess
    import sys

    script = (
        "import sys\n"
        "from avey_b import cli\n"
        "for argv in (['pretrain'], ['finetune'], ['evaluate'], ['report'], ['niah', 'evaluate'], ['ablation']):\n"
        "    try:\n"
        "        cli.main([*argv, '--help'])\n"
        "    except SystemExit:\n"
        "        pass\n"
        "assert 'torch' not in sys.modules, 'a --help imported torch'\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
