"""``avey-b finetune --task embedding`` and ``--task rerank`` on tiny files: the trained directories load in
sentence-transformers and agree with ``avey-b serve`` (``Encoder``, what its routes run) and ``avey-b embed``; long
documents go in whole; bad rows are named by file and line."""

import json
import random

import pytest
import torch

from avey_b import testing as toy
from avey_b.cli import main
from avey_b.finetuning import OwnDataOptions, finetune
from avey_b.inference.encoder import Encoder
from avey_b.inference.options import LoadOptions
from avey_b.utils.files import DataFileError

st = pytest.importorskip("sentence_transformers")

ADJ = {"good": "great", "awful": "dreadful", "superb": "lovely", "weak": "poor", "fine": "good"}
NOUNS = ["film", "plot", "cast", "story", "music", "ending"]


def pairs(n: int, seed: int = 0) -> list[dict]:
    """(anchor, positive, negative) rows over the toy vocabulary: the positive shares the anchor's noun and has a
    synonym of its adjective; the negative another noun."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        adj, noun = rng.choice(list(ADJ)), rng.choice(NOUNS)
        other = rng.choice([x for x in NOUNS if x != noun])
        rows.append({"anchor": f"the {noun} was {adj}", "positive": f"a very {ADJ[adj]} {noun}",
                     "negative": f"the {other} was {adj}"})
    return rows


def write_jsonl(path, rows) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    directory = tmp_path_factory.mktemp("base")
    return toy.avey_b(str(directory), toy.tokenizer(str(directory)))


def options(base, train, out, task, **kw) -> OwnDataOptions:
    kw = {"epochs": 1, "batch_size": 8, "precision": "fp32", "device": "cpu", "threads": 1, **kw}
    return OwnDataOptions(model=base, task=task, train_file=train, output_dir=str(out), **kw)


def encoder(directory) -> Encoder:
    return Encoder(directory, LoadOptions(device="cpu", precision="fp32")).load()


@pytest.mark.slow
def test_an_embedding_model_from_pairs_loads_in_sentence_transformers_with_serves_and_embeds_unit_vectors(
        tmp_path, base, capfd):
    pq = pytest.importorskip("pyarrow.parquet")
    from avey_b.apps.embed import EmbedOptions, embed_corpus

    train = write_jsonl(tmp_path / "pairs.jsonl", pairs(40))
    out = tmp_path / "emb"
    assert main(["finetune", "--task", "embedding", "--model", base, "--train-file", train, "--output-dir", str(out),
                 "--epochs", "1", "--batch-size", "8", "--precision", "fp32", "--device", "cpu"]) == 0
    said = capfd.readouterr()
    for when in ("before", "after"):  # the scoring, which can take minutes, is said before it starts
        assert f"finetune embedding: scoring the held-out rows {when} training (4 queries against" in said.out
    assert "Computing widget examples" not in said.out + said.err  # no other bar inside the progress line
    record = json.loads((out / "results.json").read_text())
    assert set(record["metrics"]) == set(record["baseline"]) == {"recall@1", "recall@10", "ndcg@10", "mrr@10"}
    assert record["n_validation"] == 4 and record["baseline_name"] == "before training"
    assert record["columns"] == {"anchor": "anchor", "positive": "positive", "negative": "negative"}

    texts = ["the film was good", "a very lovely ending", "bob met alice in paris " * 200]  # 1,000 words
    got = torch.as_tensor(st.SentenceTransformer(str(out), device="cpu").encode(texts))
    enc = encoder(out)
    batch, mask = enc.pad(enc.tokenize(texts)["input_ids"])
    served = enc.embed(batch, mask).cpu()  # what `avey-b serve`'s embedding routes return
    write_jsonl(tmp_path / "texts.jsonl", [{"id": str(i), "text": t} for i, t in enumerate(texts)])
    embed_corpus(str(out), str(tmp_path / "texts.jsonl"), str(tmp_path / "vectors"),
                 EmbedOptions(load=LoadOptions(precision="fp32"), id_column="id", progress=False))
    table = pq.read_table(tmp_path / "vectors")
    written = dict(zip(table["id"].to_pylist(), table["vector"].to_pylist(), strict=True))
    embedded = torch.tensor([written[str(i)] for i in range(len(texts))])
    torch.testing.assert_close(got, served, rtol=0, atol=1e-5)
    torch.testing.assert_close(got, embedded, rtol=0, atol=1e-5)
    torch.testing.assert_close(got.norm(dim=-1), torch.ones(len(texts)))


def rerank_rows(n_queries: int, seed: int = 0, long_every: int = 0) -> list[dict]:
    """(query, document, label) rows: per query its positive (label 1) and its negative (label 0); every
    ``long_every``-th positive is a document of over 750 tokens."""
    rows = []
    for i, r in enumerate(pairs(n_queries, seed)):
        positive = r["positive"] + (" and the music was superb" * 150 if long_every and i % long_every == 0 else "")
        rows += [{"query": r["anchor"], "document": positive, "label": 1},
                 {"query": r["anchor"], "document": r["negative"], "label": 0}]
    return rows


@pytest.mark.slow
def test_a_reranker_loads_in_cross_encoder_and_ranks_as_serve_does_with_long_documents_whole(tmp_path, base):
    from transformers import AutoConfig

    train = write_jsonl(tmp_path / "qd.jsonl", rerank_rows(30, long_every=7))
    record = finetune(options(base, train, tmp_path / "rr", "rerank", sampled_negatives=2))
    assert set(record["metrics"]) == set(record["baseline"]) == {"ndcg@10", "mrr@10", "map"}
    assert record["inputs_cut"] == 0
    out = tmp_path / "rr"
    config = AutoConfig.from_pretrained(out)
    assert config.num_labels == 1 and config.architectures == ["AveyBForSequenceClassification"]

    query = "the plot was awful"
    docs = ["a very dreadful plot", "the cast was awful", "a very dreadful plot" + " and the music was superb" * 150]
    ce = st.CrossEncoder(str(out), device="cpu")
    assert len(ce.tokenizer(query, docs[2], truncation=True)["input_ids"]) > 750  # nothing cut
    ranked = [r["corpus_id"] for r in ce.rank(query, docs)]
    enc = encoder(out)
    pair_ids = enc.tokenizer([query] * len(docs), docs, truncation=False)["input_ids"]
    logits = enc.logits(*enc.pad(pair_ids))[:, 0]  # what serve's rerank routes score a num_labels=1 model with
    assert ranked == logits.argsort(descending=True).tolist()
    scores = torch.as_tensor(ce.predict([(query, d) for d in docs], activation_fn=torch.nn.Identity()))
    torch.testing.assert_close(scores, logits, rtol=0, atol=1e-5)


@pytest.mark.slow
def test_a_reranker_from_query_positive_negatives_rows_with_a_listwise_loss(tmp_path, base):
    rows = [{"query": r["anchor"], "positive": r["positive"], "negatives": [r["negative"], "bob met alice"]}
            for r in pairs(24)]
    train = write_jsonl(tmp_path / "qpn.jsonl", rows)
    record = finetune(options(base, train, tmp_path / "rr", "rerank", negative_column="negatives", loss="lambda"))
    assert record["n_train_pairs"] > 2 * record["n_train_queries"]  # positive, two negatives, sampled negatives
    assert st.CrossEncoder(str(tmp_path / "rr"), device="cpu").predict([("a", "b")]).shape == (1,)


@pytest.mark.parametrize("task,rows,message", [
    ("embedding", [{"anchor": "the film", "positive": "a film"}, {"anchor": "the plot", "positive": ""}],
     "pairs.jsonl, line 2: the positive column 'positive' holds ''"),
    ("embedding", [{"anchor": "the film", "positive": "a film"}, {"anchor": "the plot", "pos": "a plot"}],
     "pairs.jsonl, line 2: no positive column 'positive'"),
    ("rerank", [{"query": "the film", "document": "a film", "label": 1}, {"query": "x", "document": "y", "label": 2}],
     "pairs.jsonl, line 2: label 2 is outside \\[0, 1\\]"),
    ("rerank", [{"query": "the film", "document": "a film", "label": "yes"}],
     "pairs.jsonl, line 1: label 'yes' is not a relevance"),
])
def test_bad_rows_are_named_by_file_and_line_before_anything_is_written(tmp_path, base, task, rows, message):
    train = write_jsonl(tmp_path / "pairs.jsonl", rows * 1)
    with pytest.raises(DataFileError, match=message):
        finetune(options(base, train, tmp_path / "out", task, validation_file=train))
    assert not (tmp_path / "out").exists()


def test_a_finished_output_directory_is_refused(tmp_path, base):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "results.json").write_text("{}")
    train = write_jsonl(tmp_path / "pairs.jsonl", pairs(8))
    with pytest.raises(Exception, match="already holds a run"):
        finetune(options(base, train, tmp_path / "out", "embedding"))


def test_a_long_reranker_trains_on_the_query_splits_saves_and_scores_with_evidence(tmp_path, base):
    from transformers import AutoTokenizer

    from avey_b import AveyBForQueryLastScoring

    train = write_jsonl(tmp_path / "qd.jsonl", rerank_rows(30, long_every=7))
    out = tmp_path / "long"
    assert main(["finetune", "--task", "long-rerank", "--model", base, "--train-file", train, "--output-dir",
                 str(out), "--epochs", "2", "--batch-size", "8", "--precision", "fp32", "--device", "cpu",
                 "--sampled-negatives", "2"]) == 0
    record = json.loads((out / "results.json").read_text())
    assert set(record["metrics"]) == set(record["baseline"]) == {"ndcg@10", "mrr@10", "map"}
    assert record["n_validation"] >= 1 and record["loss"] == "bce" and record["longest_pair_tokens"] > 750
    assert all(0 <= v <= 100 for v in record["metrics"].values())

    tok = AutoTokenizer.from_pretrained(out)
    document, query = "a very lovely film and the music was superb", "the film was superb"
    enc = tok(document, query, return_tensors="pt")  # the saved tokenizer marks the query by itself
    assert enc["token_type_ids"][0, -1] == 1
    scorer = AveyBForQueryLastScoring.from_pretrained(out).eval()
    with torch.no_grad():
        logit = scorer(**enc).logits[0, 0]
    got = encoder(out).score(query, document)
    assert got.score == pytest.approx(float(torch.sigmoid(logit)), abs=1e-5)
    assert got.evidence and all(document[e.start:e.end].strip() for e in got.evidence)


def test_a_long_reranker_is_refused_for_another_architecture(tmp_path):
    bert = toy.bert(str(tmp_path / "bert"), toy.tokenizer(str(tmp_path / "bert")))
    train = write_jsonl(tmp_path / "qd.jsonl", rerank_rows(4))
    with pytest.raises(ValueError, match="needs an Avey-B model.*--task rerank"):
        finetune(options(bert, train, tmp_path / "out", "long-rerank"))
