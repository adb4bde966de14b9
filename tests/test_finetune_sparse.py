"""``avey-b finetune --task sparse-embedding`` on a tiny file: scored before and after with the active dimensions,
saved as a SPLADE directory that ``SparseEncoder`` and ``Encoder`` load with the same vectors; a model without a
masked-LM head is refused by name."""

import json
import logging

import pytest
import torch

from avey_b import AveyBForSentenceEmbedding
from avey_b import testing as toy
from avey_b.cli import main
from avey_b.finetuning import OwnDataOptions, finetune
from avey_b.inference.encoder import Encoder
from avey_b.inference.options import LoadOptions
from tests.test_finetune_retrieval import pairs, write_jsonl

st = pytest.importorskip("sentence_transformers")


def test_a_sparse_model_from_pairs_is_scored_and_loads_as_splade_with_the_encoders_vectors(tmp_path, caplog, capsys):
    base = toy.avey_b(str(tmp_path / "base"), toy.tokenizer(str(tmp_path / "base")))
    train = write_jsonl(tmp_path / "pairs.jsonl", pairs(24))
    out = tmp_path / "sparse"
    assert main(["finetune", "--task", "sparse-embedding", "--model", base, "--train-file", train, "--output-dir",
                 str(out), "--epochs", "1", "--batch-size", "8", "--precision", "fp32", "--device", "cpu",
                 "--threads", "1", "--query-regularizer-weight", "1e-4"]) == 0
    record = json.loads((out / "results.json").read_text())
    after = record["active_dims"]["after"]
    printed = capsys.readouterr().out
    assert f"active dimensions: query {after['query']:g}, document {after['document']:g} of" in printed
    assert set(record["metrics"]) == set(record["baseline"]) == {"recall@1", "recall@10", "ndcg@10", "mrr@10"}
    assert record["query_regularizer_weight"] == 1e-4 and record["document_regularizer_weight"] == 3e-3  # its default
    for when in ("before", "after"):
        dims = record["active_dims"][when]
        assert set(dims) == {"query", "document"} and all(0 < v <= 111 for v in dims.values()), dims

    texts = ["the film was good", "a very lovely ending", "bob met alice in paris " * 40]
    with caplog.at_level(logging.WARNING):
        got = st.SparseEncoder(str(out), device="cpu").encode(texts, convert_to_tensor=True).to_dense()
    assert not [r for r in caplog.records if "Converting" in r.getMessage()]
    enc = Encoder(out, LoadOptions(device="cpu", precision="fp32")).load()
    assert "sparse" in enc.kinds and enc.config.embedding_kind == "sparse"
    assert record["dimensions"] == enc.config.vocab_size != enc.config.hidden_size  # the vocabulary, not the width
    assert f"of {enc.config.vocab_size:,}" in printed
    batch, mask = enc.pad(enc.tokenize(texts)["input_ids"])
    for (indices, values), row in zip(enc.sparse(batch, mask), got, strict=True):
        assert row.nonzero().squeeze(-1).tolist() == indices.tolist()
        torch.testing.assert_close(row[indices], values, rtol=0, atol=1e-5)


def test_a_model_without_a_masked_lm_head_is_refused_by_name(tmp_path):
    base = toy.avey_b(str(tmp_path / "base"), toy.tokenizer(str(tmp_path / "base")))
    AveyBForSentenceEmbedding.from_pretrained(base).save_pretrained(tmp_path / "emb")
    train = write_jsonl(tmp_path / "pairs.jsonl", pairs(12))
    with pytest.raises(ValueError, match="AveyBForSentenceEmbedding, which has no masked-LM head"):
        finetune(OwnDataOptions(model=str(tmp_path / "emb"), task="sparse-embedding", train_file=train,
                                output_dir=str(tmp_path / "out"), device="cpu", threads=1))
    with pytest.raises(ValueError, match="regularizer weights must be >= 0"):
        OwnDataOptions(model=base, task="sparse-embedding", train_file=train, output_dir=str(tmp_path / "o"),
                       document_regularizer_weight=-1.0)


def test_the_dense_warning_fires_above_a_quarter_of_the_dimensions_active_and_names_the_flags():
    from avey_b.finetuning.common import stays_dense, summary_line

    record = {"task": "sparse-embedding", "metrics": {"ndcg@10": 5.0}, "baseline": {"ndcg@10": 4.0},
              "n_validation": 49, "dimensions": 4096, "query_regularizer_weight": 5e-5,
              "document_regularizer_weight": 3e-5,
              "active_dims": {"before": {"query": 3000, "document": 3000}, "after": {"query": 40, "document": 2415}}}
    assert "active dimensions: query 40, document 2415 of 4,096" in summary_line(record)
    warning = stays_dense(record)
    assert warning is not None and "2415 of 4,096" in warning and "--document-regularizer-weight" in warning
    assert "--query-regularizer-weight" in warning
    record["active_dims"]["after"]["document"] = 300
    assert stays_dense(record) is None
    assert stays_dense({"task": "embedding", "metrics": {}}) is None
