"""The paper's IR protocol (EncodEval): one MS MARCO-pairs fine-tuning per (model, lr, seed), three zero-shot scorings.

Offline: tiny models, a pairs JSONL and BEIR directories made here."""

import json
import os
from dataclasses import replace

import pytest
import torch
import yaml
from safetensors.torch import load_file

from avey_b import cli
from avey_b import testing as toy
from avey_b.evaluation import ir_paper, report, sweep
from avey_b.evaluation.tasks import DataFiles, RunConfig, get_task, ir
from avey_b.utils.records import save_pretrained_atomic

IR_TASKS = ("mldr", "msmarco", "nq")


def evaluate(argv):
    """``avey-b evaluate ARGV``, its errors raised (``--debug``) so that the tests see their type."""
    return cli.main(["--debug", "evaluate", *argv])


def finetune_main(argv):
    """``avey-b finetune ARGV``, its errors raised (``--debug``) so that the tests see their type."""
    return cli.main(["--debug", "finetune", *argv])


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("ir")
    tok = toy.tokenizer(str(root / "tok"))
    beir = {t: toy.beir(str(root / t), 8, 12, seed=i) for i, t in enumerate(IR_TASKS)}
    pairs = root / "pairs.jsonl"
    rs = ir.read_beir(beir["msmarco"], "train")
    pairs.write_text("".join(json.dumps({"query": rs.queries[q], "positive": rs.corpus[d]}) + "\n"
                             for q, rel in rs.qrels.items() for d in rel))
    return {"bert": toy.bert(str(root / "bert"), tok), "avey": toy.avey_b(str(root / "avey"), tok),
            "beir": beir, "pairs": str(pairs), "root": root}


def _suite(env, tmp_path, model="bert", pairs=None, **defaults) -> list[str]:
    """A paper-protocol suite over the three IR benchmarks, one lr and one seed; returns the argv of
    `avey-b evaluate`."""
    data = {t: {"eval": env["beir"][t]} for t in IR_TASKS} | {"msmarco_pairs": {"train": pairs or env["pairs"]}}
    settings = {"batch_size": 4, "max_steps": 2, "max_length": 24, "eval_batch_size": 4, "device": "cpu"} | defaults
    suite = tmp_path / "suite.yaml"
    suite.write_text(yaml.safe_dump({"models": {model: env[model]}, "tasks": list(IR_TASKS), "lrs": [1e-3], "seeds": 1,
                                 "protocol": "paper", "output_dir": str(tmp_path / "out"), "defaults": settings,
                                 "data": data}))
    return ["--config", str(suite)]


def _first_parameter(st) -> tuple[str, torch.Tensor]:
    name, param = next(iter(st[0].auto_model.named_parameters()))
    return name, param.detach().float().clone()


def _saved(directory, name: str) -> torch.Tensor:
    """The tensor of parameter ``name`` in a saved model (the saved name may carry a head's prefix)."""
    tensors = load_file(os.path.join(directory, "model.safetensors"))
    return next(v for k, v in tensors.items() if k == name or k.endswith("." + name)).float()


@pytest.fixture
def spies(monkeypatch):
    """Counts the trainings (a fast stand-in: the untrained model with one parameter shifted, saved as the real
    training saves) and records the first parameter of every model a scoring loads."""
    calls = {"train": [], "scored": []}
    real_load = ir_paper.load_sentence_transformer

    def fake_train(model, cfg, files, dest, tokenizer=None):
        calls["train"].append(str(dest))
        st = real_load(model, cfg, torch.device("cpu"))
        with torch.no_grad():
            next(st[0].auto_model.parameters()).add_(1.0)
        save_pretrained_atomic(dest, ir_paper._AsPretrained(st), None)
        return {"steps": 0, "loss_first": 0.0, "loss_last": 0.0}

    def spy_load(path, cfg, device, tokenizer_name=None):
        st = real_load(path, cfg, device, tokenizer_name)
        calls["scored"].append((str(path), _first_parameter(st)))
        return st

    monkeypatch.setattr(sweep, "train_pairs", fake_train)
    monkeypatch.setattr(ir_paper, "load_sentence_transformer", spy_load)
    return calls


def test_three_benchmarks_share_one_training_and_a_rerun_trains_nothing(env, tmp_path, spies):
    argv = _suite(env, tmp_path)
    assert evaluate(argv) == 0
    out = tmp_path / "out" / "bert" / "paper"
    model_dir = out / "msmarco_pairs" / "lr0.001_seed0" / "model"
    assert spies["train"] == [str(model_dir)]  # trained once for the three benchmarks
    assert [p for p, _ in spies["scored"]] == [str(model_dir)] * 3
    for _, (name, param) in spies["scored"]:  # each scoring loaded the very weights the training saved ...
        assert torch.equal(param, _saved(model_dir, name))
        assert not torch.equal(param, _saved(env["bert"], name))  # ... not the pretrained ones
    for task in IR_TASKS:
        rec = json.loads((out / task / "lr0.001_seed0" / "results.json").read_text())
        assert (rec["train"]["finetuned"] == str(model_dir)
                and rec["cell"]["trained_by"].endswith("msmarco_pairs/lr0.001_seed0"))
        assert rec["metric"] == "ndcg@10" and 0 <= rec["score"] <= 100
    rep = json.loads((tmp_path / "out" / "report.json").read_text())
    assert set(rep["models"]["bert"]["tasks"]) == set(IR_TASKS) and not rep["failed"]  # training is no column

    mtimes = [os.path.getmtime(out / t / "lr0.001_seed0" / "results.json") for t in IR_TASKS]
    assert evaluate(argv) == 0
    assert len(spies["train"]) == 1 and len(spies["scored"]) == 3  # the rerun neither trains nor scores
    assert [os.path.getmtime(out / t / "lr0.001_seed0" / "results.json") for t in IR_TASKS] == mtimes

    # a deleted scoring is scored again from the saved model, still without training
    os.remove(out / "nq" / "lr0.001_seed0" / "results.json")
    assert evaluate(argv) == 0
    assert len(spies["train"]) == 1 and [p for p, _ in spies["scored"][3:]] == [str(model_dir)]


def test_a_retrained_model_makes_its_scorings_stale(env, tmp_path, spies):
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text(open(env["pairs"]).read())
    argv = _suite(env, tmp_path, pairs=str(pairs))
    assert evaluate(argv) == 0
    (tmp_path / "out" / "bert" / "paper" / "msmarco_pairs" / "lr0.001_seed0" / "trained.json").unlink()
    assert evaluate(argv) == 0
    assert len(spies["train"]) == 2 and len(spies["scored"]) == 6  # new model: the three scorings run again
    with pairs.open("a") as f:  # the training data changed: train again, and score the new model
        f.write(json.dumps({"query": "one more", "positive": "pair"}) + "\n")
    assert evaluate(argv) == 0
    assert len(spies["train"]) == 3 and len(spies["scored"]) == 9


def test_a_failed_training_fails_its_three_scorings_with_the_reason(env, tmp_path, monkeypatch, capsys):
    def broken(model, cfg, files, dest, tokenizer=None):
        raise RuntimeError("out of pairs")

    monkeypatch.setattr(sweep, "train_pairs", broken)
    assert evaluate(_suite(env, tmp_path)) == 1
    err = capsys.readouterr().err
    assert "4 cell(s) failed" in err
    out = tmp_path / "out" / "bert" / "paper"
    assert "out of pairs" in json.loads((out / "msmarco_pairs" / "lr0.001_seed0" / "error.json").read_text())["error"]
    for task in IR_TASKS:
        error = json.loads((out / task / "lr0.001_seed0" / "error.json").read_text())["error"]
        assert "training cell bert/paper/msmarco_pairs/lr0.001_seed0 failed" in error and "out of pairs" in error
        assert not (out / task / "lr0.001_seed0" / "results.json").exists()
    assert len(report.collect(str(tmp_path / "out"))[1]) == 4


def test_cells_of_the_paper_protocol_and_the_standard_one(env, tmp_path):
    suite = sweep.load_suite(_suite(env, tmp_path)[1])
    cells, _, _ = sweep.build_cells(replace(suite, lrs=[1e-3, 5e-4], seeds=2))
    trainers = [c for c in cells if c.trains_only]
    assert len(trainers) == 4 and len(cells) == 4 + 3 * 4  # one training per (lr, seed), three scorings each
    assert all(c.files.train == env["pairs"] for c in trainers)
    for c in cells:
        if not c.trains_only:
            assert c.trained_by == f"bert/paper/msmarco_pairs/lr{c.cfg.lr:g}_seed{c.cfg.seed}" and c.files.train is None
    # under the standard protocol every IR benchmark trains on its own, as before
    cells, _, _ = sweep.build_cells(replace(suite, protocol="standard"))
    assert [c.task for c in cells] == list(IR_TASKS) and not any(c.trained_by or c.trains_only for c in cells)
    # training data given to a zero-shot benchmark is a mistake, named
    with pytest.raises(ValueError, match="data.msmarco_pairs"):
        sweep.build_cells(replace(suite, data={"nq": {"train": env["pairs"]}}))


def test_paper_data_mapping_follows_encodeval(tmp_path):
    d = tmp_path / "beir"
    (d / "qrels").mkdir(parents=True)
    docs = {"a": ("Title A", "alpha text "), "b": ("", "beta text"), "c": ("", "gamma"), "z": ("", "never judged")}
    (d / "corpus.jsonl").write_text("".join(json.dumps({"_id": k, "title": t, "text": x}) + "\n"
                                            for k, (t, x) in docs.items()))
    (d / "queries.jsonl").write_text('{"_id": "q1", "text": "first"}\n{"_id": "q2", "text": "second"}\n'
                                     '{"_id": "q3", "text": "third"}\n')
    (d / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\ta\t2\nq1\tb\t0\nq2\tb\t0\n")
    (d / "qrels" / "validation.tsv").write_text("query-id\tcorpus-id\tscore\nq3\tc\t1\n")
    files = DataFiles(eval=str(d))
    rs = get_task("msmarco").load("eval", files, protocol="paper")
    assert rs.qrels == {"q1": {"a": 1.0, "b": 0.0}, "q2": {"b": 0.0}}  # binary relevance of the test split
    assert sorted(rs.corpus) == ["a", "b", "c"]  # documents judged in validation or test, no others
    assert rs.corpus["a"] == "Document: alpha text " and rs.queries["q1"] == "Query: first"  # unstripped
    nq = get_task("nq").load("eval", files, protocol="paper")
    assert nq.corpus == {"a": "Document: Title A. alpha text ", "b": "Document: . beta text"}  # NQ: title. text
    # the ideal DCG counts the retrieved documents only; q2 has no relevant document and is not scored
    cfg = RunConfig(protocol="paper")
    emb = {"Document: alpha text ": [0.0, 1.0], "Document: beta text": [1.0, 0.0], "Document: gamma": [0.9, 0.1]}

    def embed(texts, query):
        return torch.tensor([[1.0, 0.0] if query else emb[t] for t in texts])

    # q1 ranks b, c, a: its one relevant document third, DCG 1/log2(4), ideal (over those three) 1
    assert get_task("msmarco").score(rs, embed, cfg)["ndcg@10"] == pytest.approx(50.0)


def test_cached_mnrl_is_the_librarys_loss_in_value_and_gradient(env):
    """One step of sentence-transformers' CachedMultipleNegativesRankingLoss (scale 20, mini-batches of 256) on the
    model SentenceTransformer builds equals the library's multiple_negatives_ranking_loss on masked-mean-pooled
    embeddings (RunConfig.ir_scale = 20), in value and in gradient."""
    from transformers import AutoModel

    from avey_b.model.heads import mean_pool

    cfg = RunConfig(device="cpu", max_length=24)
    st = ir_paper.load_sentence_transformer(env["avey"], cfg, torch.device("cpu")).eval()
    queries = ["Query: good movie", "Query: bad film", "Query: a great plot", "Query: dull acting"]
    docs = ["Document: the movie is good", "Document: a bad film", "Document: great plot", "Document: dull"]
    features = [st.tokenize(queries), st.tokenize(docs)]
    _, _, _, cmnrl = ir_paper._st_modules()
    loss = cmnrl(st, scale=20.0, mini_batch_size=ir_paper.CACHE_MINI_BATCH)(features, None)
    loss.backward()
    st_grads = {k: p.grad.clone() for k, p in st[0].auto_model.named_parameters() if p.grad is not None}

    ours = AutoModel.from_pretrained(env["avey"]).eval()
    emb = [mean_pool(ours(**{k: f[k] for k in ("input_ids", "attention_mask")}).last_hidden_state, f["attention_mask"])
           for f in features]
    expected = ir.multiple_negatives_ranking_loss(*emb, cfg.ir_scale)
    expected.backward()
    assert loss.item() == pytest.approx(expected.item(), rel=1e-5)
    grads = dict(ours.named_parameters())
    assert st_grads.keys() == {k for k, p in grads.items() if p.grad is not None}
    for k, g in st_grads.items():  # equal up to float32 rounding (the cache re-runs the forward)
        torch.testing.assert_close(g, grads[k].grad, rtol=1e-4, atol=1e-5)


def test_pairs_are_tokenized_with_the_end_token_and_the_buffered_limit(env, monkeypatch):
    """The IR training's collator reads ``text + end token`` (tasks.base.end_token: the tokenizer's own eos, else
    its unknown token), no other special tokens, truncated at EncodEval's 99% of the length limit."""
    from avey_b.evaluation.tasks.base import buffered, end_token

    class Collator(Exception):  # stops train_pairs where the trainer would start, carrying the collator
        pass

    def trainer(*, data_collator, **_):
        raise Collator(data_collator)

    _, args_cls, _, loss_cls = ir_paper._st_modules()
    monkeypatch.setattr(ir_paper, "_st_modules", lambda: (trainer, args_cls, lambda tokenize: tokenize, loss_cls))
    cfg = RunConfig(device="cpu", max_length=100, batch_size=4, max_steps=1)
    with pytest.raises(Collator) as caught:
        ir_paper.train_pairs(env["bert"], cfg, DataFiles(train=env["pairs"]), env["root"] / "unused")
    tokenize = caught.value.args[0]
    tok = ir_paper.load_sentence_transformer(env["bert"], cfg, torch.device("cpu")).tokenizer
    short = tok.convert_ids_to_tokens(tokenize(["Query: good movie"])["input_ids"][0])
    assert short == tok.tokenize("Query: good movie") + [end_token(tok)] and short[-1] == "[UNK]"
    assert tokenize(["movie " * 300])["input_ids"].shape[1] == buffered(100) == 99


@pytest.mark.slow
def test_sentence_transformers_training_end_to_end(env, tmp_path, monkeypatch):
    """The real trainer: Avey-B fine-tuned once (2 steps) and scored zero-shot three times with the saved weights."""
    scored = []
    real_load = ir_paper.load_sentence_transformer

    def spy_load(path, cfg, device, tokenizer_name=None):
        st = real_load(path, cfg, device, tokenizer_name)
        scored.append(_first_parameter(st))
        return st

    monkeypatch.setattr(ir_paper, "load_sentence_transformer", spy_load)
    assert evaluate(_suite(env, tmp_path, model="avey", weights_dtype="bfloat16", adam_beta2=0.95,
                             adam_epsilon=1e-5, weight_decay=0.1)) == 0
    cell = tmp_path / "out" / "avey" / "paper" / "msmarco_pairs" / "lr0.001_seed0"
    rec = json.loads((cell / "trained.json").read_text())
    assert rec["steps"] == 2 and rec["weights_dtype"] == "bfloat16" and len(rec["losses"]) == 2
    assert (cell / "model" / "modules.json").exists() and (cell / "model" / "SHA256SUMS").exists()
    assert len(scored) == 4  # the training's own load, then the three scorings
    for name, param in scored[1:]:
        assert torch.equal(param, _saved(cell / "model", name)) and not torch.equal(param, _saved(env["avey"], name))


def test_finetune_scores_a_trained_model_zero_shot(env, tmp_path, monkeypatch):
    """`avey-b finetune --task nq --protocol paper --finetuned DIR` scores DIR without training; --finetuned is
    refused where nothing is scored zero-shot."""

    def no_training(*args, **kwargs):
        raise AssertionError("trained although --finetuned was given")

    monkeypatch.setattr(ir_paper, "train_pairs", no_training)
    argv = ["--model", env["bert"], "--task", "nq", "--lr", "1e-3", "--output-dir", str(tmp_path), "--device", "cpu",
            "--eval-file", env["beir"]["nq"], "--max-length", "24"]
    assert finetune_main([*argv, "--protocol", "paper", "--finetuned", env["bert"]]) == 0
    rec = json.loads((tmp_path / "results.json").read_text())
    assert rec["train"] == {"zero_shot": True, "finetuned": env["bert"], "task": "msmarco_pairs"}
    assert rec["metrics"]["corpus_size"] == len({d for rel in ir.read_qrels(env["beir"]["nq"], "test").values()
                                                 for d in rel})
    with pytest.raises(ValueError, match="--finetuned applies to retrieval under --protocol paper"):
        finetune_main([*argv, "--finetuned", env["bert"]])


def test_mldr_is_read_in_its_own_hub_layout(monkeypatch):
    """hgissbkh/mldr-en (EncodEval's mldr_en): queries and positives in the ``default`` config, documents with
    ``docid`` in ``corpus``; the paper protocol pools the documents of dev and test."""
    rows = {
        ("default", "test"): [{"query_id": "q1", "query": "first", "positive_passages": [{"docid": "d1"}]}],
        ("default", "dev"): [{"query_id": "q2", "query": "second", "positive_passages": [{"docid": "d2"}]}],
        ("corpus", "corpus"): [{"docid": f"d{i}", "text": f"text {i}"} for i in range(4)],
    }
    monkeypatch.setattr(ir.base, "load_hub", lambda name, config, split: rows[(config, split)])
    rs = get_task("mldr").load("eval", DataFiles())
    assert rs.qrels == {"q1": {"d1": 1.0}} and len(rs.corpus) == 4 and rs.queries["q1"] == "first"
    rs = get_task("mldr").load("eval", DataFiles(), protocol="paper")
    assert rs.qrels == {"q1": {"d1": 1.0}} and rs.corpus == {"d1": "Document: text 1", "d2": "Document: text 2"}
    assert rs.queries == {"q1": "Query: first"}


def test_the_release_config_sets_the_length_and_the_pooling_of_the_paper_protocols_retrieval(env, tmp_path):
    """EncodEval's SentenceTransformer of a release Avey-B is cut at the length the release states (its config's
    ``max_position_embeddings``, our ``context_len``) and, when the config says ``retrieval_pooling: eos``, pools
    the last token; every model is loaded with ``attn_implementation="eager"``. Outside the protocol, a
    SentenceTransformer of the same directory is not cut."""
    from sentence_transformers import SentenceTransformer
    from transformers import AutoModel

    tok = toy.tokenizer(str(tmp_path / "tok"))
    path = toy.avey_b(str(tmp_path / "avey"), tok, context_len=20, retrieval_pooling="eos")
    cfg = RunConfig(device="cpu", max_length=None)
    st = ir_paper.load_sentence_transformer(path, cfg, torch.device("cpu")).eval()
    assert st.max_seq_length == 20 and ir_paper._pooling_mode(st) == "lasttoken"
    text = "the movie is good and the plot is great"
    emb = st.encode([text], convert_to_tensor=True)[0]
    enc = tok([text], return_tensors="pt")
    with torch.no_grad():
        hidden = AutoModel.from_pretrained(path).eval()(**enc).last_hidden_state[0]
    torch.testing.assert_close(emb, hidden[-1], rtol=1e-4, atol=1e-5)  # the last token's state, not the mean
    assert not torch.allclose(emb, hidden.mean(0), atol=1e-3)
    mean = ir_paper.load_sentence_transformer(env["avey"], cfg, torch.device("cpu"))
    assert ir_paper._pooling_mode(mean) == "mean" and mean.max_seq_length > 10**6  # no stated length: uncut
    bert = ir_paper.load_sentence_transformer(env["bert"], cfg, torch.device("cpu"))
    assert bert[0].auto_model.config._attn_implementation == "eager"
    assert SentenceTransformer(path, device="cpu").max_seq_length != 20  # a user's own SentenceTransformer


def test_the_paper_protocols_retrieval_limit_takes_the_tokenizers_model_max_length(tmp_path):
    """EncodEval's SentenceTransformer of a pretrained encoder is cut at the smaller of the stated length and the
    tokenizer's ``model_max_length`` (the stated length alone when the tokenizer states more or none: the test
    above); a checkpoint of ours (no stated length) is cut at the tokenizer's; a tokenizer that states none says
    None."""
    cfg = RunConfig(device="cpu", max_length=None)
    for name, mml, context_len, want in (("short", 16, 20, 16), ("ours", 12, None, 12)):
        tok = toy.tokenizer(str(tmp_path / f"tok-{name}"))
        tok.model_max_length = mml
        overrides = {"context_len": context_len} if context_len else {}
        path = toy.avey_b(str(tmp_path / name), tok, **overrides)
        st = ir_paper.load_sentence_transformer(path, cfg, torch.device("cpu"))
        assert (name, st.max_seq_length) == (name, want)
        assert ir_paper.tokenizer_stated_length(path) == mml
    assert ir_paper.tokenizer_stated_length(toy.avey_b(str(tmp_path / "none"), toy.tokenizer(str(tmp_path / "t")))) \
        is None


def test_retrieval_training_decays_what_every_other_paper_cell_decays(env, monkeypatch):
    """The paper protocol's IR training (sentence-transformers' trainer) decays the parameters the library's loop
    decays, by transformers 4.50's rule (the release's pin): Avey-B's RMSNorm weights decayed, biases exempt; the
    installed trainer's own rule (transformers 5) would exempt the norm weights."""
    from avey_b.evaluation import finetune
    from avey_b.evaluation.protocol import decayed_parameter_names

    real, args_cls, collator_cls, loss_cls = ir_paper._st_modules()

    class Groups(Exception):
        pass

    class Trainer(real):
        def train(self, *args, **kwargs):  # the optimizer the trainer builds, then stop
            self.create_optimizer()
            names = {id(p): n for n, p in self.loss.named_parameters()}
            raise Groups([({names[id(p)] for p in g["params"]}, g["weight_decay"])
                          for g in self.optimizer.param_groups])

    monkeypatch.setattr(ir_paper, "_st_modules", lambda: (Trainer, args_cls, collator_cls, loss_cls))
    cfg = RunConfig(device="cpu", protocol="paper", batch_size=4, max_steps=1, weight_decay=0.1, max_length=24,
                    precision="fp32", weights_dtype="float32")
    with pytest.raises(Groups) as caught:
        ir_paper.train_pairs(env["avey"], cfg, DataFiles(train=env["pairs"]), env["root"] / "unused")
    (decayed, decay), (exempt, none) = caught.value.args[0]
    assert (decay, none) == (0.1, 0.0)
    st = ir_paper.load_sentence_transformer(env["avey"], cfg, torch.device("cpu"))
    loop = finetune.finetune_optimizer(st, cfg)
    names = {id(p): n for n, p in st.named_parameters()}
    assert decayed == {f"model.{names[id(p)]}" for p in loop.param_groups[0]["params"]}  # the loss wraps the model
    norm = next(n for n in decayed if n.endswith("layers.0.norm.weight"))  # Avey-B's first RMSNorm
    assert exempt and all(n.endswith("bias") for n in exempt)
    assert norm not in real.get_decay_parameter_names(None, _loss(st))  # the installed trainer's rule exempts it
    assert norm not in decayed_parameter_names(_loss(st), "standard")  # as the standard protocol's does


def _loss(st):
    """A module holding ``st`` as the loss does (its parameters named ``model.…``)."""
    return torch.nn.ModuleDict({"model": st})


def test_the_authors_checkpoint_retrieves_under_the_release_padding(env, tmp_path):
    """Under the paper protocol the authors' checkpoints (the avey_b1 parameterization) train and score retrieval
    with the release's padding, as every other cell; ours keep their own; the standard protocol the checkpoint's."""
    from avey_b.model.presets import AVEY_B1_ARCHITECTURE

    tok = toy.tokenizer(str(tmp_path / "tok"))
    authors = toy.avey_b(str(tmp_path / "authors"), tok, **AVEY_B1_ARCHITECTURE)
    for path, protocol, padding in ((authors, "paper", "release"), (authors, "standard", "masked"),
                                    (env["avey"], "paper", "masked")):
        st = ir_paper.load_sentence_transformer(path, RunConfig(device="cpu", protocol=protocol), torch.device("cpu"))
        assert st[0].auto_model.config.padding == padding, (path, protocol)
