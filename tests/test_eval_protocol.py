"""`--protocol paper` is EncodEval's protocol, setting for setting (paper §5.1 adopts it); the standard protocol
keeps RunConfig's defaults. Expected values are read from the authors' EncodEval configs themselves (one YAML per
task x lr at seed 0 in the reference copy, ``../shared/reference/encodeval/configs``), each rate from its own file."""

import argparse
from pathlib import Path

import pytest
import torch
import yaml
from transformers import BertConfig, BertForSequenceClassification, RobertaConfig

from avey_b import cli
from avey_b import testing as toy
from avey_b.configs import from_args
from avey_b.evaluation import finetune, sweep
from avey_b.evaluation.finetune import resolve_steps, train_model
from avey_b.evaluation.protocol import PAPER_SETTINGS, grid, protocol_settings, run_config
from avey_b.evaluation.settings import GRIDS, FinetuneOptions
from avey_b.evaluation.suites import SuiteConfig, suite_from_args
from avey_b.evaluation.tasks import TASKS, DataFiles, RunConfig, get_task
from avey_b.evaluation.tasks.base import buffered, end_token, input_limit, load_model

#: EncodEval's dataset names (its file names) that are not this library's task names
ENCODEVAL_NAMES = {"mnli_m": "mnli", "conll2003_en": "conll2003", "uner_en": "uner", "mldr_en": "mldr"}
#: EncodEval's model classes -> this library's heads
HEADS = {"transformers.AutoModelForSequenceClassification": "sequence-classification",
         "transformers.AutoModelForTokenClassification": "token-classification",
         "sentence_transformers.SentenceTransformer": "embedding"}


class _EncodEvalYaml(yaml.SafeLoader):
    """EncodEval's YAML: an ``!ext module.name`` tag reads as the name."""


_EncodEvalYaml.add_multi_constructor("!", lambda loader, suffix, node: loader.construct_scalar(node))


def _read(path: Path) -> dict:
    return yaml.load(path.read_text(), Loader=_EncodEvalYaml)["eval_config"]


def _fields(train: dict, scoring: dict | None = None) -> dict:
    """The RunConfig fields a training file (and, for IR, a scoring file) sets, read as EncodEval reads them
    (``abstract_eval.py``: accumulation = train_batch_size / (GPUs x per-device batch), one GPU here); gradient
    clipping is the Trainer's ``max_grad_norm`` default, 1.0, which no file overrides."""
    tr = train["tr_args_kwargs"]
    per_device = tr["per_device_train_batch_size"]
    batch = tr.get("train_batch_size", per_device)
    steps = tr.get("max_steps")
    out = {"batch_size": batch, "grad_accumulation": max(1, int(batch / per_device)),
           "epochs": None if steps else float(tr["num_train_epochs"]), "max_steps": steps,
           "adam_beta1": tr["adam_beta1"], "adam_beta2": tr["adam_beta2"], "adam_epsilon": tr["adam_epsilon"],
           "weight_decay": tr["weight_decay"], "warmup_ratio": tr["warmup_ratio"],
           "grad_clip": tr.get("max_grad_norm", 1.0),
           "weights_dtype": {"torch.bfloat16": "bfloat16", "torch.float32": "float32"}[train["model_kwargs"]["dtype"]],
           "precision": "bf16" if tr["bf16"] else "fp32", "max_length": train["max_length"]}
    evaluation = (scoring or train)["tr_args_kwargs"].get("per_device_eval_batch_size")
    if evaluation is not None:
        out["eval_batch_size"] = evaluation
    if scoring is not None:
        out["query_max_length"] = scoring["max_length"]  # queries are cut like documents
    return out


@pytest.fixture(scope="module")
def encodeval(reference_copy) -> dict[tuple[str, float], tuple[dict, dict]]:
    """(task, lr) -> (the RunConfig fields its seed-0 file sets, the file's model settings) for every task at every
    learning rate EncodEval ships (the IR benchmarks: the msmarco_pairs training file at that rate and the
    benchmark's scoring file; ``msmarco_pairs`` itself; NIAH under ``niah1``/``niah2``)."""
    configs = reference_copy("encodeval") / "configs"
    files = {p.stem.removesuffix("_sd0"): _read(p) for p in sorted(configs.glob("*/*_sd0.yaml"))}
    assert len(files) == 82, sorted(files)  # 12 tasks x 6 rates, msmarco_pairs x 6, niah1/niah2 x 2
    out = {}
    for stem, config in files.items():
        name, lr = stem.rsplit("_lr", 1)
        lr = float(lr)
        if name.endswith("_msmarco_pairs"):  # a zero-shot scoring of the model trained at that rate
            train = files[f"msmarco_pairs_lr{stem.rsplit('_lr', 1)[1]}"]
            name = name.removesuffix("_msmarco_pairs")
            assert config["model_kwargs"]["ft_model_config_dir"] == f"msmarco_pairs/lr{stem.rsplit('_lr', 1)[1]}_sd0"
            fields, model = _fields(train, config), train
        else:
            fields, model = _fields(config), config
        out[(ENCODEVAL_NAMES.get(name, name), lr)] = (fields, model)
    return out


def test_every_task_at_every_rate_resolves_to_its_own_encodeval_file(encodeval):
    """Each (task, learning rate) cell of ``--protocol paper`` takes the settings of that rate's own file (ReCoRD at
    2e-5 runs 16 rows a device, accumulation 2, where its other rates run 4, accumulation 8), its head and labels."""
    assert {t for t, _ in encodeval} == set(TASKS) | {"msmarco_pairs", "niah1", "niah2"}
    assert sorted({lr for t, lr in encodeval if t in TASKS}) == grid("encodeval")[0] == list(GRIDS["encodeval"][0])
    for (task, lr), (want, model) in encodeval.items():
        if task.startswith("niah"):
            continue  # niah evaluate's own table: test_niah_evaluate
        cfg = run_config(task, {"protocol": "paper", "lr": lr, "seed": 0})
        assert {k: getattr(cfg, k) for k in want} == want, (task, lr)
        if task in TASKS:
            assert get_task(task).head(cfg) == HEADS[model["model_class"]], task
            if get_task(task).family == "QA":
                assert get_task(task).model_kwargs([], [], cfg) == {"num_labels": model["model_kwargs"]["num_labels"]}
    assert protocol_settings("record", "paper", 2e-5)["grad_accumulation"] == 2
    assert protocol_settings("record", "paper", 1e-4)["grad_accumulation"] == 8
    assert protocol_settings("record", "paper") == PAPER_SETTINGS["record"]  # no rate: the task's settings alone


def test_every_paper_cell_resolves_to_encodevals_settings(encodeval):
    cells, _, how = sweep.build_cells(sweep.load_suite("paper"))
    assert how == "median"
    paper_lrs = sorted(GRIDS["paper"][0])
    for task in TASKS:
        mine = [c for c in cells if c.task == task]
        assert sorted({c.cfg.lr for c in mine}) == paper_lrs
        assert sorted({c.cfg.seed for c in mine}) == list(range(10))
        for cfg in {id(c.cfg): c.cfg for c in mine if c.model_name == "avey-b-base"}.values():
            assert cfg.protocol == "paper"
            want, _ = encodeval[(task, cfg.lr)]
            assert {k: getattr(cfg, k) for k in want} == want, (task, cfg.lr)
        # an epoch of 1,000 examples is ceil(1000 / 32) optimizer steps, whatever the accumulation
        cfg = mine[0].cfg
        assert resolve_steps(get_task(task), cfg, 32) == (cfg.max_steps or int(cfg.epochs * 32))


def test_models_of_table_3_and_neobert_runs_its_own_code():
    suite = sweep.load_suite("paper")
    assert set(suite.models) == {"avey-b-base", "avey-b-large", "bert-base", "bert-large", "roberta-base",
                                    "roberta-large", "modernbert-base", "modernbert-large", "neobert"}
    cells, _, _ = sweep.build_cells(suite)
    trust = {c.model_name: c.cfg.trust_remote_code for c in cells}
    assert trust.pop("neobert") is True and not any(trust.values())  # the release's Avey-B loads our code
    assert {c.model for c in cells if c.model_name == "neobert"} == {"chandar-lab/NeoBERT"}


def test_grid_flag_and_explicit_settings_win_over_the_table():
    suite = sweep.load_suite("paper")
    cells, _, _ = sweep.build_cells(suite_from_args(argparse.Namespace(grid="encodeval", tasks=["sst2"],
                                                                       models=["m=x"]), suite))
    assert sorted({c.cfg.lr for c in cells}) == grid("encodeval")[0] and len(cells) == 6 * 20
    cells, _, _ = sweep.build_cells(suite_from_args(argparse.Namespace(grid="encodeval", seeds=3, tasks=["sst2"],
                                                                       models=["x"]), suite))
    assert len(cells) == 6 * 3
    cells, _, _ = sweep.build_cells(suite_from_args(argparse.Namespace(tasks=["record"], models=["x"], lrs=[1e-4],
                                                                       seeds=1, batch_size=8, max_length=128), suite))
    (cfg,) = [c.cfg for c in cells]
    assert (cfg.batch_size, cfg.max_length, cfg.grad_accumulation, cfg.adam_beta2) == (8, 128, 8, 0.95)
    with pytest.raises(ValueError, match="unknown grid 'papr'"):
        sweep.build_cells(suite_from_args(argparse.Namespace(grid="papr"), suite))


def test_the_standard_protocol_keeps_runconfigs_defaults():
    assert protocol_settings("squad", "standard") == {}
    suite = SuiteConfig(models={"m": "x"}, tasks=list(TASKS), output_dir="o")
    cells, _, _ = sweep.build_cells(suite_from_args(argparse.Namespace(lrs=[1e-4], seeds=1), suite))
    assert all(c.cfg == RunConfig(lr=1e-4, seed=0) for c in cells)
    default = RunConfig()
    assert (default.adam_beta1, default.adam_beta2, default.adam_epsilon, default.weight_decay,
            default.weights_dtype, default.grad_accumulation, default.max_length) == (0.9, 0.999, 1e-8, 0.0,
                                                                                      "float32", 1, 512)


def test_finetune_cli_takes_the_table_under_its_flags():
    argv = ["--model", "m", "--task", "squad", "--lr", "1e-4", "--output-dir", "o", "--protocol", "paper",
            "--batch-size", "8", "--weight-decay", "0.0"]

    def settings(argv):
        args = cli.parse("finetune", argv)
        return finetune.cell_settings(from_args(FinetuneOptions, args), args)

    cfg, _ = settings(argv)
    assert (cfg.batch_size, cfg.weight_decay, cfg.grad_accumulation, cfg.adam_beta2, cfg.max_length) == (
        8, 0.0, 2, 0.95, None)
    argv = argv[:8]  # no --protocol: the standard defaults
    assert settings(argv)[0] == RunConfig(lr=1e-4)


# ------------------------------------------------------------------------------------------ the loop


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("protocol")
    tok = toy.tokenizer(str(root / "tok"))
    return {"root": root, "tok": tok, "avey": toy.avey_b(str(root / "avey"), tok),
            "sst2": toy.sst2_tsv(str(root / "s.tsv"), 16, 0), "conll": toy.conll(str(root / "c.conll"), 8, 0)}


def _bert(tok, seed=0):
    torch.manual_seed(seed)
    cfg = BertConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=64, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                     classifier_dropout=0.0, pad_token_id=tok.pad_token_id, num_labels=9)
    return cfg


@pytest.mark.parametrize("task_name,data", [("sst2", "sst2"), ("conll2003", "conll")])
def test_accumulation_takes_the_same_step_as_one_batch(env, task_name, data):
    """Batch 4 as 2 x 2 accumulation gives the parameters of batch 4 in one pass: the micro-batches' losses are
    weighted by their share of the step's examples (SC) or labelled tokens (TC), and the step counts once."""
    from transformers import AutoModelForSequenceClassification, AutoModelForTokenClassification

    task = get_task(task_name)
    files = DataFiles(train=env[data], eval=env[data])
    train = task.load("train", files)
    task.model_kwargs(train, train, RunConfig())
    if task_name == "conll2003":  # sentences of 1 to 9 words: micro-batches of unequal token counts
        words = "Alice met Bob in Paris with Carol Jones today".split()
        train = [{"tokens": words[:n], "tags": ["O"] * n} for n in (1, 2, 6, 9)]
    features = task.train_features(train[:4], env["tok"], RunConfig(max_length=32))
    auto = AutoModelForSequenceClassification if task_name == "sst2" else AutoModelForTokenClassification
    params = {}
    for accumulation in (1, 2):
        torch.manual_seed(0)
        model = auto.from_config(_bert(env["tok"]))
        # eps 1 makes AdamW's first step proportional to the gradient (not its sign): any weighting error shows
        cfg = RunConfig(lr=1.0, max_steps=1, batch_size=4, grad_accumulation=accumulation, precision="fp32",
                        weight_decay=0.1, adam_beta2=0.95, adam_epsilon=1.0, grad_clip=0.0)
        rec = train_model(model, task, features, cfg, 0, torch.device("cpu"))
        assert rec["steps"] == 1 and rec["batches_per_epoch"] == 1
        params[accumulation] = {n: p.detach().clone() for n, p in model.named_parameters()}
    for name, p in params[1].items():
        torch.testing.assert_close(params[2][name], p, rtol=1e-5, atol=1e-6)


def test_summed_accumulation_adds_the_micro_batch_means(env):
    """Summed accumulation (``avey_b_accumulation: sum``) backpropagates each micro-batch's mean loss at weight 1,
    as transformers 4.50's Trainer does for a model whose forward takes ``**kwargs``
    (benchmarks/paper_protocol_cpu/accumulation_450.py): at 2 micro-batches of equal size the gradient is twice the
    weighted mean's."""
    task = get_task("sst2")
    train = task.load("train", DataFiles(train=env["sst2"]))
    task.model_kwargs(train, train, RunConfig())
    features = task.train_features(train[:4], env["tok"], RunConfig(max_length=32))
    micro = [task.collate(features[:2], 0), task.collate(features[2:], 0)]
    grads = {}
    for accumulation in ("mean", "sum"):
        torch.manual_seed(0)
        model = BertForSequenceClassification(_bert(env["tok"]))
        cfg = RunConfig(lr=1e-3, grad_accumulation=2, precision="fp32")
        finetune._step(model, task, micro, cfg, torch.device("cpu"), torch.zeros((), dtype=torch.long), 0,
                       summed=accumulation == "sum")
        grads[accumulation] = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    torch.testing.assert_close(grads["sum"], 2 * grads["mean"])


def test_avey_b_padding_and_accumulation_follow_the_protocol():
    """Under ``paper`` the authors' checkpoints (the avey_b1 parameterization) run the release's padding and every
    Avey-B sums its micro-batch means; ours keep their padding; ``standard`` keeps both; explicit settings win;
    other models get None (masked padding, means)."""
    from avey_b import AveyBConfig
    from avey_b.evaluation.protocol import avey_b_settings

    ours, authors = AveyBConfig(), AveyBConfig(enricher_layout="release")
    paper, standard = RunConfig(protocol="paper"), RunConfig()
    assert avey_b_settings(authors, paper) == {"padding": "release", "accumulation": "sum"}
    assert avey_b_settings(ours, paper) == {"padding": "masked", "accumulation": "sum"}
    assert avey_b_settings(authors, standard) == {"padding": "masked", "accumulation": "mean"}
    assert avey_b_settings(ours, RunConfig(avey_b_padding="release", avey_b_accumulation="mean")) == {
        "padding": "release", "accumulation": "mean"}
    assert avey_b_settings(BertConfig(), paper) is None
    with pytest.raises(ValueError, match="avey_b_padding must be one of"):
        RunConfig(avey_b_padding="zeros")
    with pytest.raises(ValueError, match="AveyBConfig.padding='zeros' is not one of"):
        AveyBConfig(padding="zeros")


def test_the_loop_builds_adamw_from_the_settings(env, monkeypatch):
    seen = []
    real = torch.optim.AdamW

    def spy(groups, **kw):
        seen.append((groups, kw))
        return real(groups, **kw)

    monkeypatch.setattr(torch.optim, "AdamW", spy)
    task = get_task("sst2")
    train = task.load("train", DataFiles(train=env["sst2"]))
    model = BertForSequenceClassification(_bert(env["tok"]))
    model.config.num_labels = 2
    cfg = RunConfig(lr=3e-4, max_steps=1, batch_size=4, adam_beta1=0.8, adam_beta2=0.95, adam_epsilon=1e-5,
                    weight_decay=0.1, precision="fp32")
    train_model(model, task, task.train_features(train, env["tok"], cfg), cfg, 0, torch.device("cpu"))
    ((groups, kw),) = seen
    assert kw == {"lr": 3e-4, "betas": (0.8, 0.95), "eps": 1e-5}
    names = {id(p): n for n, p in model.named_parameters()}
    decayed, exempt = ([names[id(p)] for p in g["params"]] for g in groups)
    assert [g["weight_decay"] for g in groups] == [0.1, 0.0]
    assert "classifier.weight" in decayed and "bert.encoder.layer.0.attention.self.query.weight" in decayed
    assert all(n.endswith("bias") or "LayerNorm" in n for n in exempt) and "classifier.bias" in exempt


def test_weights_load_in_bf16_when_asked(env):
    cfg = RunConfig(weights_dtype="bfloat16")
    model = load_model(env["avey"], "sequence-classification", cfg, num_labels=2)
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    assert {p.dtype for p in load_model(env["avey"], "sequence-classification", RunConfig(), num_labels=2)
            .parameters()} == {torch.float32}
    rec = finetune.run_cell(env["avey"], "sst2", RunConfig(lr=1e-3, max_steps=1, batch_size=4, max_length=None,
                                                           weights_dtype="bfloat16", device="cpu", protocol="paper"),
                            DataFiles(train=env["sst2"], eval=env["sst2"]))
    assert rec["train"]["weights"] == "bfloat16" and rec["input_limit"]["max_length"] is None  # Avey-B: no limit
    assert rec["train"]["examples"] == 15  # EncodEval trains SC on 95% of the training split (floor(0.95 x 16))
    with pytest.raises(ValueError, match="weights_dtype must be one of"):
        RunConfig(weights_dtype="fp16")


def test_no_truncation_means_the_models_own_limit_and_end_token(env):
    tok = env["tok"]
    assert input_limit(BertConfig(), tok) == 507  # round(0.99 x 512), EncodEval's 1% buffer
    assert input_limit(RobertaConfig(max_position_embeddings=514), tok) == 509  # roberta-base: 514 positions
    from avey_b import AveyBConfig

    assert input_limit(AveyBConfig(), tok) is None
    assert end_token(tok, BertConfig()) == "[UNK]"  # BERT's config has no eos: EncodEval falls back to unk
    assert end_token(tok, BertConfig(eos_token_id=3)) == "[SEP]"  # ModernBERT's eos is its [SEP]
    assert end_token(tok, AveyBConfig()) == "[UNK]"


def test_the_paper_protocol_cuts_avey_b_where_its_release_states_and_the_standard_one_does_not(env, tmp_path):
    """EncodEval truncates every model that is not a SentenceTransformer at round(0.99 x max_position_embeddings),
    the release's Avey-B included (its config states context_len there); under the paper protocol a cell does the
    same and records the limit and its rule; the standard protocol keeps Avey-B uncut."""
    from avey_b import AveyBConfig

    tok = env["tok"]
    assert input_limit(AveyBConfig(context_len=512), tok, "paper") == 507
    assert input_limit(AveyBConfig(context_len=512), tok, "standard") is None
    assert input_limit(AveyBConfig(), tok, "paper") is None  # our own checkpoints state no length
    assert input_limit(BertConfig(), tok, "paper") == input_limit(BertConfig(), tok) == 507
    path = toy.avey_b(str(tmp_path / "avey"), tok, context_len=12)
    settings = {"lr": 1e-3, "max_steps": 1, "batch_size": 4, "max_length": None, "device": "cpu"}
    paper = finetune.run_cell(path, "conll2003", RunConfig(protocol="paper", **settings), DataFiles(
        train=env["conll"], eval=env["conll"]))
    assert paper["input_limit"]["max_length"] == 12 and "context_len 12" in paper["input_limit"]["rule"]
    standard = finetune.run_cell(path, "conll2003", RunConfig(**settings), DataFiles(train=env["conll"],
                                                                                      eval=env["conll"]))
    assert standard["input_limit"]["max_length"] is None and "no position table" in standard["input_limit"]["rule"]
    assert paper["avey_b"] == {"padding": "masked", "accumulation": "sum"}  # our checkpoint: its own padding
    assert standard["avey_b"] == {"padding": "masked", "accumulation": "mean"}
    assert (paper["train"]["micro_batch_losses"], standard["train"]["micro_batch_losses"]) == ("sum", "mean")
    task = get_task("conll2003")
    long = [{"tokens": ["alice", "met", "bob"] * 10, "tags": ["O"] * 30}]
    task.model_kwargs(long, [], RunConfig(protocol="paper"))
    cut = task.train_features(long, tok, RunConfig(protocol="paper", max_length=paper["input_limit"]["max_length"]))
    assert len(cut[0]["input_ids"]) == 12


def test_baselines_run_eager_attention_under_the_paper_protocol(env, tmp_path):
    """Every EncodEval config loads its model with attn_implementation="eager"."""
    tok = env["tok"]
    path = toy.bert(str(tmp_path / "bert"), tok)
    paper = load_model(path, "token-classification", RunConfig(protocol="paper"), num_labels=3)
    standard = load_model(path, "token-classification", RunConfig(), num_labels=3)
    assert paper.config._attn_implementation == "eager"
    assert standard.config._attn_implementation != "eager"  # transformers' default (sdpa) outside the protocol
    avey = load_model(env["avey"], "token-classification", RunConfig(protocol="paper"), num_labels=3)
    assert type(avey).__name__ == "AveyBForTokenClassification"  # Avey-B has no attention to set: unaffected


def test_one_end_token_rule_with_or_without_a_model_config(env):
    """EncodEval's rule: the eos the tokenizer holds once the model is loaded, else the unknown token. A
    transformers model's config sets it; a SentenceTransformer (the IR protocol) leaves the tokenizer's own."""
    import copy

    tok = env["tok"]  # BERT-style: [UNK], no eos
    with_eos = copy.deepcopy(tok)
    with_eos.eos_token = "[SEP]"
    assert end_token(tok) == "[UNK]"  # no eos of its own: the unknown token
    assert end_token(with_eos) == "[SEP]"  # the tokenizer's eos, as loaded
    assert end_token(with_eos, BertConfig()) == "[UNK]"  # the config names no eos and EncodEval copies that
    assert end_token(with_eos, BertConfig(eos_token_id=tok.convert_tokens_to_ids("[CLS]"))) == "[CLS]"
    assert get_task("mnli").end(with_eos) == "[UNK]"  # outside a run: a config that names no eos
    assert [buffered(n) for n in (512, 514, 8192, 1)] == [507, 509, 8110, 1]


def test_paper_inputs_follow_encodeval(env):
    tok = env["tok"]
    cfg = RunConfig(protocol="paper", max_length=None)
    sc = get_task("mnli")
    sc.end_token = "[SEP]"
    f = sc.train_features([{"text": "the film", "text_pair": "a plot", "label": 1}], tok, cfg)[0]
    assert tok.convert_ids_to_tokens(f["input_ids"]) == ["[CLS]", "the", "film", "[SEP]", "a", "plot", "[SEP]"]
    qa = get_task("squad")
    qa.end_token = "[UNK]"
    ex = {"id": "1", "question": " who met bob ? ", "context": "alice met bob in paris \n",
          "answers": [{"text": "alice", "start": 0}, {"text": "alice met", "start": 0}]}
    f = qa.train_features([ex], tok, cfg)[0]
    tokens = tok.convert_ids_to_tokens(f["input_ids"])
    prompt = tok.tokenize("Question: who met bob ?\nContext: ")
    assert tokens == prompt + ["alice", "met", "bob", "in", "paris", "[UNK]"]  # no [CLS]/[SEP]; context stripped
    assert [t for t, y in zip(tokens, f["labels"], strict=True) if y == 1] == ["alice"]  # the first answer only
    short = qa.train_features([ex], tok, RunConfig(protocol="paper", max_length=len(prompt) + 2))[0]
    assert tok.convert_ids_to_tokens(short["input_ids"]) == prompt + ["alice", "met"]  # only the context is cut
    with pytest.raises(ValueError, match="leaves no room for the context"):
        qa.train_features([ex], tok, RunConfig(protocol="paper", max_length=3))


def test_a_cell_recorded_before_the_new_settings_resumes(tmp_path):
    """A finished cell of an older sweep (its record lacks the optimizer / dtype / accumulation fields) ran with
    their defaults: it counts as done, and the same cell with other settings is refused, not mixed in."""
    import json
    import os

    cell = sweep.Cell("m", "x", "sst2", RunConfig(lr=1e-4), DataFiles())
    spec = cell.spec()
    for name in ("adam_beta1", "adam_beta2", "adam_epsilon", "weights_dtype", "grad_accumulation"):
        del spec["cfg"][name]
    os.makedirs(sweep.cell_dir(str(tmp_path), cell))
    with open(os.path.join(sweep.cell_dir(str(tmp_path), cell), "results.json"), "w") as f:
        json.dump({"cell": spec, "fingerprint": cell.fingerprint()}, f)
    assert sweep.is_done(str(tmp_path), cell)
    cell.cfg = RunConfig(lr=1e-4, adam_beta2=0.95)
    with pytest.raises(ValueError, match="other settings than requested"):
        sweep.is_done(str(tmp_path), cell)


def test_the_paper_protocol_decays_weights_as_transformers_4_50_did():
    """transformers 4.50 (the release's pin) exempts LayerNorm modules and names holding bias/layernorm/rmsnorm:
    Avey-B's RMSNorm weights (``...layers.i.norm.weight``) are decayed there; transformers 5's rule, the standard
    protocol's, exempts them. A BERT's LayerNorm stays exempt under both."""
    from avey_b import AveyBForMaskedLM
    from avey_b.model import presets

    avey = toy.seeded(AveyBForMaskedLM, presets.tiny(vocab_size=64))
    bert = BertForSequenceClassification(BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=1,
                                                    num_attention_heads=2, intermediate_size=32))

    def groups(model, protocol):
        seen = finetune.finetune_optimizer(model, RunConfig(lr=1e-4, weight_decay=0.1, protocol=protocol))
        names = {id(p): n for n, p in model.named_parameters()}
        return [{names[id(p)] for p in g["params"]} for g in seen.param_groups]

    norm = "model.layers.0.norm.weight"
    assert norm in dict(avey.named_parameters())
    decayed, exempt = groups(avey, "paper")
    assert norm in decayed and not any("bias" in n for n in decayed)
    decayed, exempt = groups(avey, "standard")
    assert norm in exempt
    for protocol in ("paper", "standard"):
        decayed, exempt = groups(bert, protocol)
        assert "bert.embeddings.LayerNorm.weight" in exempt and "classifier.weight" in decayed


def test_niah_under_the_paper_protocol_takes_encodevals_lc_files(encodeval):
    """``niah evaluate --protocol paper`` runs the LC files' settings: their learning rates, 32 examples a step as
    micro-batches of their per-device batch, their epochs, optimizer and dtype, scored one input at a time."""
    from avey_b.evaluation.niah.forms import OPTIMIZER
    from avey_b.evaluation.niah.options import niah_evaluate_options

    options = niah_evaluate_options(argparse.Namespace(protocol="paper", data="d", models=["m"], out="o"))
    files = {lr: fields for (task, lr), (fields, _) in encodeval.items() if task in ("niah1", "niah2")}
    assert sorted(files) == options.lr
    opt = OPTIMIZER[options.form]
    for want in files.values():
        s = options.settings
        assert (s.batch_size, s.batch_size // options.micro_batch, s.epochs, s.eval_batch_size) == (
            want["batch_size"], want["grad_accumulation"], want["epochs"], want["eval_batch_size"])
        assert (opt["betas"], opt["eps"], s.weight_decay, s.warmup_ratio, s.weights_dtype, s.precision) == (
            (want["adam_beta1"], want["adam_beta2"]), want["adam_epsilon"], want["weight_decay"],
            want["warmup_ratio"], want["weights_dtype"], want["precision"])


def test_the_paper_protocol_pads_with_encodevals_id_and_records_it(env, tmp_path, monkeypatch):
    """EncodEval pads with the config's ``pad_token_id``, else its eos (the end token), else the unknown token:
    under ``paper`` every batch of training and scoring is padded with that id and the cell records it, with the
    padding the authors' checkpoint ran (the release's); the standard protocol keeps the tokenizer's pad."""
    from avey_b.evaluation.tasks import base
    from avey_b.evaluation.tasks.base import encodeval_pad_id
    from avey_b.model.presets import AVEY_B1_ARCHITECTURE

    tok = env["tok"]  # BERT-style: [PAD] 0, [UNK] 1, no eos
    assert encodeval_pad_id(tok, BertConfig(pad_token_id=None)) == tok.unk_token_id
    assert encodeval_pad_id(tok, BertConfig(pad_token_id=None, eos_token_id=3)) == 3
    assert encodeval_pad_id(tok, BertConfig(pad_token_id=5, eos_token_id=3)) == 5
    used = []
    real = base.pad_batch
    monkeypatch.setattr(base, "pad_batch", lambda features, pad_id: (used.append(pad_id), real(features, pad_id))[1])
    settings = {"lr": 1e-3, "max_steps": 1, "batch_size": 4, "eval_batch_size": 4, "max_length": None,
                "device": "cpu"}
    for pad, protocol, want, padding in ((None, "paper", tok.unk_token_id, "release"), (5, "paper", 5, "release"),
                                         (None, "standard", tok.pad_token_id, "masked")):
        path = toy.avey_b(str(tmp_path / f"authors-{pad}"), tok, **AVEY_B1_ARCHITECTURE)
        config = tmp_path / f"authors-{pad}" / "config.json"
        config.write_text(config.read_text().replace('"pad_token_id": 0', f'"pad_token_id": {json_null(pad)}'))
        used.clear()
        rec = finetune.run_cell(path, "sst2", RunConfig(protocol=protocol, **settings),
                                DataFiles(train=env["sst2"], eval=env["sst2"]))
        assert set(used) == {want} and rec["pad_id"] == want, (pad, protocol)
        assert rec["avey_b"]["padding"] == padding


def json_null(value) -> str:
    return "null" if value is None else str(value)
