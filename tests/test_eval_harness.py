"""One fine-tuning cell per family through the Auto classes: tiny Avey-B and tiny BERT, both protocols."""

import pytest
import torch
from transformers import pipeline

from avey_b import testing as toy
from avey_b.evaluation.finetune import resolve_steps, run_cell
from avey_b.evaluation.tasks import DataFiles, RunConfig, get_task
from avey_b.evaluation.tasks.base import load_model, load_task_tokenizer
from avey_b.model.heads import mean_pool


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("harness")
    return {
        **toy.encoders(root),
        "sst2": DataFiles(train=toy.sst2_tsv(str(root / "s.tsv"), 256, 0),
                          eval=toy.sst2_tsv(str(root / "d.tsv"), 64, 1)),
        "conll": DataFiles(train=toy.conll(str(root / "c.train"), 24, 0), eval=toy.conll(str(root / "c.dev"), 8, 1)),
        "squad": DataFiles(train=toy.squad_json(str(root / "q.json"), 24, 0),
                           eval=toy.squad_json(str(root / "qd.json"), 6, 1, with_impossible=True)),
        "beir": DataFiles(train=toy.beir(str(root / "beir"), 32, 20), eval=str(root / "beir")),
    }


@pytest.mark.parametrize("model", ["avey", "bert"])
@pytest.mark.parametrize("protocol", ["standard", "paper"])
@pytest.mark.parametrize("task,data,metric", [
    ("conll2003", "conll", "f1"), ("squad_v2", "squad", "f1"), ("nq", "beir", "ndcg@10"),
])
def test_every_family_runs_for_both_models(env, model, protocol, task, data, metric):
    # the paper's QA input holds a "Question: ... Context: " prompt (spelt out letter by letter by the toy tokenizer)
    cfg = RunConfig(lr=1e-3, seed=0, protocol=protocol, max_steps=2, batch_size=8, doc_stride=6, device="cpu",
                    max_length=64 if protocol == "paper" else 20)
    rec = run_cell(env[model], task, cfg, env[data])
    assert rec["metric"] == metric and rec["protocol"] == protocol and rec["train"]["steps"] == 2
    assert 0.0 <= rec["score"] <= 100.0
    if task == "squad_v2" and protocol == "standard":
        assert {"exact", "HasAns_f1", "NoAns_f1"} <= set(rec["metrics"])
    if task == "nq":  # the paper protocol ranks only documents that appear in the qrels
        assert rec["metrics"]["corpus_size"] == (20 if protocol == "standard" else len(
            {d for rel in get_task("nq").load("eval", env[data]).qrels.values() for d in rel}))


def test_avey_b_learns_the_toy_sentiment_task(env):
    cfg = RunConfig(lr=3e-3, seed=0, batch_size=16, max_length=16, device="cpu")
    rec = run_cell(env["avey"], "sst2", cfg, env["sst2"])
    assert rec["train"]["steps"] == 16  # 256 examples, one epoch
    assert rec["train"]["loss_last"] < rec["train"]["loss_first"]
    assert rec["score"] > 80.0  # chance is ~50


def test_same_seed_same_result_and_seed_changes_the_head(env):
    cfg = RunConfig(lr=1e-3, seed=3, max_steps=3, batch_size=8, max_length=16, device="cpu")
    a = run_cell(env["bert"], "conll2003", cfg, env["conll"])
    b = run_cell(env["bert"], "conll2003", cfg, env["conll"])
    assert a["train"]["losses"] == b["train"]["losses"] and a["score"] == b["score"]
    cfg.seed = 4
    c = run_cell(env["bert"], "conll2003", cfg, env["conll"])
    assert c["train"]["losses"][0] != a["train"]["losses"][0]


def test_holdout_scores_unseen_part_of_the_training_file(env):
    cfg = RunConfig(lr=1e-3, max_steps=1, batch_size=8, max_length=16, device="cpu")
    rec = run_cell(env["avey"], "sst2", cfg, DataFiles(train=env["sst2"].train, holdout=0.25))
    assert rec["metrics"]["n_eval"] == 64 and rec["train"]["examples"] == 192
    with pytest.raises(ValueError, match="either an evaluation file or --holdout"):
        run_cell(env["avey"], "sst2", cfg, DataFiles(train=env["sst2"].train, eval=env["sst2"].eval, holdout=0.25))


def test_mean_pool_ignores_padding_for_both_models(env):
    tok = env["tok"]
    for name in ("avey", "bert"):
        model = load_model(env[name], "embedding", RunConfig()).eval()
        alone = tok(["the film was good"], return_tensors="pt")
        batch = tok(["the film was good", "the plot was very very awful and weak"], padding=True, return_tensors="pt")
        with torch.no_grad():
            e1 = mean_pool(model(**alone).last_hidden_state, alone["attention_mask"])
            e2 = mean_pool(model(**batch).last_hidden_state, batch["attention_mask"])[:1]
        torch.testing.assert_close(e1, e2, atol=1e-5, rtol=1e-4)


def test_step_budget_per_family():
    cfg = RunConfig()
    assert resolve_steps(get_task("sst2"), cfg, 10) == 10
    assert resolve_steps(get_task("squad"), cfg, 10) == 40
    assert resolve_steps(get_task("msmarco"), cfg, 10) == 1000
    assert resolve_steps(get_task("msmarco"), RunConfig(max_steps=7), 10) == 7
    assert resolve_steps(get_task("sst2"), RunConfig(epochs=0.5), 9) == 5


def test_slow_tokenizers_are_rejected(monkeypatch):
    import transformers

    class Slow:
        is_fast = False

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", lambda *a, **k: Slow())
    with pytest.raises(ValueError, match="not a fast \\(Rust\\) tokenizer"):
        load_task_tokenizer("some/model", RunConfig())


def test_finetune_save_model_writes_a_loadable_model_and_tokenizer(env, tmp_path, capsys):
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from avey_b.cli import main

    out = tmp_path / "ft"
    assert main(["finetune", "--model", env["avey"], "--task", "sst2", "--lr", "3e-3",
                 "--output-dir", str(tmp_path / "o"), "--train-file", env["sst2"].train,
                 "--eval-file", env["sst2"].eval, "--batch-size", "16", "--max-length", "16",
                 "--device", "cpu", "--max-steps", "3", "--save-model", str(out)]) == 0
    import json

    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert printed["score"] == round(printed["score"], 2)  # rounded on screen (results.json keeps the full value)
    model = AutoModelForSequenceClassification.from_pretrained(out).eval()
    tok = AutoTokenizer.from_pretrained(out)
    fresh = AutoModelForSequenceClassification.from_pretrained(env["avey"], num_labels=2)
    assert model.config.num_labels == 2
    assert not torch.equal(model.classifier.weight, fresh.classifier.weight)  # the trained head was saved
    with torch.no_grad():
        assert model(**tok(["a good film"], return_tensors="pt")).logits.shape == (1, 2)
    # a pipeline says what a class is, not LABEL_1
    assert pipeline("text-classification", model=model, tokenizer=tok)("a good film")[0]["label"] in ("negative",
                                                                                                     "positive")


def test_finetune_save_model_of_a_tagger_names_its_tags(env, tmp_path):
    from avey_b.cli import main

    out = tmp_path / "ft"
    assert main(["finetune", "--model", env["avey"], "--task", "conll2003", "--lr", "3e-3",
                 "--output-dir", str(tmp_path / "o"), "--train-file", env["conll"].train,
                 "--eval-file", env["conll"].eval, "--batch-size", "8", "--max-length", "20",
                 "--device", "cpu", "--max-steps", "2", "--save-model", str(out)]) == 0
    tags = pipeline("token-classification", model=str(out), ignore_labels=[])("Alice Smith met Bob in Paris")
    assert tags and {t["entity"] for t in tags} <= {"O", "B-PER", "I-PER", "B-LOC", "I-LOC"}


def test_finetune_names_a_missing_model_as_the_model(tmp_path):
    with pytest.raises(FileNotFoundError, match="model not found: .*no/such/model"):
        run_cell(str(tmp_path / "no" / "such" / "model"), "sst2", RunConfig(), DataFiles())


def test_avey_b_classes_refuse_another_model_type(env):
    from avey_b import AveyBForMaskedLM, AveyBModel

    with pytest.raises(ValueError, match=r"holds a 'bert' model, not Avey-B.*Auto classes"):
        AveyBForMaskedLM.from_pretrained(env["bert"])
    with pytest.raises(ValueError, match="not Avey-B"):
        AveyBModel.from_pretrained(env["bert"])


def test_a_missing_local_model_path_is_reported_as_such_not_as_a_hub_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="is not an existing local path"):
        load_model(str(tmp_path / "no" / "such" / "model"), "sequence-classification", RunConfig())
    with pytest.raises(FileNotFoundError, match="tokenizer not found: '../runs/x'"):
        load_task_tokenizer("../runs/x", RunConfig())


def test_precision_auto_is_bf16_autocast_only_where_the_cpu_multiplies_bf16(env, monkeypatch):
    from avey_b.evaluation.tasks.base import autocast_ctx
    from avey_b.utils import device as dev

    cpu = torch.device("cpu")
    monkeypatch.setattr(dev, "cpu_has_native_bf16", lambda: True)
    with autocast_ctx(cpu, "auto"):
        assert torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16
    with autocast_ctx(cpu, "fp32"):
        assert not torch.is_autocast_enabled("cpu")
    cfg = RunConfig(lr=1e-3, seed=0, max_steps=2, batch_size=8, max_length=16, device="cpu")
    rec = run_cell(env["avey"], "sst2", cfg, env["sst2"])
    assert rec["train"]["autocast"] == "bf16" and rec["train"]["tokens"] > 0 and rec["train"]["tokens_per_s"] > 0
    monkeypatch.setattr(dev, "cpu_has_native_bf16", lambda: False)
    with autocast_ctx(cpu, "auto"):
        assert not torch.is_autocast_enabled("cpu")
    assert run_cell(env["avey"], "sst2", cfg, env["sst2"])["train"]["autocast"] == "fp32"
    with pytest.raises(ValueError, match="precision must be one of"):
        RunConfig(lr=1e-3, precision="fp16")


def test_every_run_setting_is_a_flag_of_finetune_evaluate_and_niah():
    """The fine-tuning flags are generated from RunConfig: every field (lr and seed aside, which each command takes
    its own way) is a flag of `finetune`, and reaches the RunConfig it builds; `evaluate` sees only the flags given
    (they override the suite); `niah evaluate` takes its subset with its own defaults; a misspelt flag is an error."""
    import dataclasses

    from avey_b import cli
    from avey_b.configs import from_args
    from avey_b.evaluation import finetune
    from avey_b.evaluation.niah.options import niah_evaluate_options
    from avey_b.evaluation.settings import FinetuneOptions, given_settings

    fields = [f for f in dataclasses.fields(RunConfig) if f.name not in ("lr", "seed")]
    values = {"protocol": "paper", "epochs": 2.5, "max_steps": 7, "batch_size": 3, "eval_batch_size": 5,
              "max_length": 99, "query_max_length": 11, "doc_stride": 13, "max_answer_length": 17,
              "warmup_ratio": 0.25, "weight_decay": 0.01, "adam_beta1": 0.8, "adam_beta2": 0.9, "adam_epsilon": 1e-6,
              "weights_dtype": "bfloat16", "grad_accumulation": 2, "grad_clip": 0.5, "precision": "fp32",
              "normalize_embeddings": False, "ir_scale": 10.0, "max_train_examples": 19, "max_eval_examples": 23,
              "device": "cpu", "threads": 2, "trust_remote_code": True, "corpus_chunk": 29,
              "avey_b_padding": "release", "avey_b_accumulation": "sum"}
    assert sorted(values) == sorted(f.name for f in fields), "a new RunConfig field: give it a value here"
    argv = []
    for name, value in values.items():
        flag = "--" + name.replace("_", "-")
        argv += [flag] if value is True else [f"--no-{flag[2:]}"] if value is False else [flag, str(value)]
    cell = ["--model", "m", "--task", "sst2", "--lr", "1e-3", "--seed", "4", "--output-dir", "o"]

    def finetune_settings(argv):
        args = cli.parse("finetune", cell + argv)
        return finetune.cell_settings(from_args(FinetuneOptions, args), args)[0]

    assert finetune_settings(argv) == RunConfig(lr=1e-3, seed=4, **values)
    assert finetune_settings([]) == RunConfig(lr=1e-3, seed=4)  # the defaults
    assert given_settings(cli.parse("evaluate", ["--grad-clip", "2"])) == {"grad_clip": 2.0}
    with pytest.raises(SystemExit):
        cli.parse("evaluate", ["--grad-clp", "2"])
    args = niah_evaluate_options(cli.parse("niah", ["evaluate", "--data", "d", "--models", "m", "--out", "o",
                                                    "--grad-clip", "0.5", "--max-steps", "9"]))
    cfg = args.settings
    assert (cfg.grad_clip, cfg.max_steps, cfg.batch_size, cfg.eval_batch_size, cfg.epochs) == (0.5, 9, 8, 8, 1.0)


def test_the_protocols_padding_choices_are_the_configs():
    """The settings module names AveyBConfig.padding's options without importing the model (--help imports no
    torch): the two lists are one."""
    from avey_b.evaluation.settings import AVEY_B_PADDINGS
    from avey_b.model.configuration import PADDINGS

    assert AVEY_B_PADDINGS == PADDINGS
