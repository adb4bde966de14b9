"""One saving rule: every directory the library writes loads in sentence-transformers, tokenizer included, as the
class of its kind — a ``SentenceTransformer`` with the vectors ``avey-b serve`` and ``avey-b embed`` give
(normalization included), or, for a one-label sequence classifier (a reranker), a ``CrossEncoder`` that scores as the
``Encoder`` does (:func:`avey_b.model.loading.sentence_transformers_files`)."""

import json
import logging

import pytest
import torch

from avey_b import (
    AveyBForMaskedLM,
    AveyBForSentenceEmbedding,
    AveyBForSequenceClassification,
    AveyBForTokenClassification,
    AveyBModel,
)
from avey_b import testing as toy
from avey_b.inference.encoder import Encoder
from avey_b.inference.options import LoadOptions
from avey_b.model import presets
from avey_b.testing import seeded

st = pytest.importorskip("sentence_transformers")

TEXTS = ["a good film", "the plot was awful and the cast was weak", "bob met alice in paris " * 40]
PAIRS = [("a good film", "the music was superb"), ("who met alice", "bob met alice in paris today"),
         ("a good film", "bob met alice in paris " * 40)]


def encoder_vectors(directory) -> torch.Tensor:
    """What ``avey-b serve`` answers for ``TEXTS`` (``Encoder.embed`` is what its embedding routes run)."""
    encoder = Encoder(directory, LoadOptions(device="cpu", precision="fp32")).load()
    batch, mask = encoder.pad(encoder.tokenize(TEXTS)["input_ids"])
    return encoder.embed(batch, mask).cpu()


def st_vectors(directory) -> torch.Tensor:
    return torch.as_tensor(st.SentenceTransformer(str(directory), device="cpu").encode(TEXTS))


@pytest.mark.parametrize("cls,labels", [(AveyBModel, None), (AveyBForMaskedLM, None),
                                        (AveyBForSequenceClassification, 3), (AveyBForTokenClassification, 5),
                                        (AveyBForSentenceEmbedding, None)])
def test_every_head_but_a_reranker_is_a_sentence_transformer_with_serves_unit_vectors(tmp_path, cls, labels):
    tok = toy.tokenizer(str(tmp_path))
    extra = {} if labels is None else {"num_labels": labels}
    seeded(cls, presets.tiny(vocab_size=len(tok), **extra)).save_pretrained(tmp_path)
    expected = encoder_vectors(tmp_path)
    got = st_vectors(tmp_path)
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-5)
    torch.testing.assert_close(got.norm(dim=-1), torch.ones(len(TEXTS)))
    assert json.loads((tmp_path / "config_sentence_transformers.json").read_text())["model_type"] == \
        "SentenceTransformer"


def test_a_saved_embedding_head_takes_its_tokenizer_along_and_loads_in_sentence_transformers(tmp_path):
    tok = toy.tokenizer(str(tmp_path / "tok"))
    pretrained = toy.avey_b(str(tmp_path / "pretrained"), tok)
    AveyBForSentenceEmbedding.from_pretrained(pretrained).save_pretrained(tmp_path / "emb")  # no tokenizer saved
    assert (tmp_path / "emb" / "tokenizer.json").is_file()
    got = st_vectors(tmp_path / "emb")
    torch.testing.assert_close(got, encoder_vectors(tmp_path / "emb"), rtol=0, atol=1e-5)
    torch.testing.assert_close(got, encoder_vectors(pretrained), rtol=0, atol=1e-5)  # the same backbone


def test_a_reranker_is_a_cross_encoder_that_scores_whole_pairs_as_the_encoder_does(tmp_path, caplog):
    tok = toy.tokenizer(str(tmp_path))
    seeded(AveyBForSequenceClassification, presets.tiny(vocab_size=len(tok), num_labels=1)).save_pretrained(tmp_path)
    encoder = Encoder(tmp_path, LoadOptions(device="cpu", precision="fp32")).load()
    enc = encoder.tokenizer([q for q, _ in PAIRS], [d for _, d in PAIRS], truncation=False)
    batch, mask = encoder.pad(enc["input_ids"])
    logits = encoder.logits(batch, mask)[:, 0]
    with caplog.at_level(logging.WARNING):
        ce = st.CrossEncoder(str(tmp_path), device="cpu")
    assert not [r for r in caplog.records if "Converting" in r.getMessage()]  # loaded as what it is
    scores = torch.as_tensor(ce.predict(PAIRS, activation_fn=torch.nn.Identity()))
    torch.testing.assert_close(scores, logits, rtol=0, atol=1e-5)
    torch.testing.assert_close(torch.as_tensor(ce.predict(PAIRS)), logits.sigmoid(), rtol=0, atol=1e-5)
    assert ce.tokenizer(*PAIRS[2], truncation=True)["input_ids"] == enc["input_ids"][2]  # nothing is cut


def test_saving_another_head_into_a_directory_leaves_no_files_of_the_first_kind(tmp_path):
    tok = toy.tokenizer(str(tmp_path))
    seeded(AveyBForMaskedLM, presets.tiny(vocab_size=len(tok))).save_pretrained(tmp_path)
    assert (tmp_path / "1_Pooling" / "config.json").is_file()
    seeded(AveyBForSequenceClassification, presets.tiny(vocab_size=len(tok), num_labels=1)).save_pretrained(tmp_path)
    assert not (tmp_path / "1_Pooling" / "config.json").exists()
    assert not (tmp_path / "2_Normalize" / "config.json").exists()
    st.CrossEncoder(str(tmp_path), device="cpu")


@pytest.mark.slow
def test_a_pretraining_output_loads_in_sentence_transformers_with_the_vectors_embed_writes(tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    from avey_b.apps.embed import EmbedOptions, embed_corpus
    from avey_b.data.tokenization import train_bpe_tokenizer
    from avey_b.training.config import load_config
    from avey_b.training.pretrain import train

    sentences = [f"the {a} {v} the {b} ." for a in ("cat", "dog", "bird") for v in ("sees", "likes", "finds")
                 for b in ("book", "map", "ball", "box")] * 4
    (tmp_path / "docs.jsonl").write_text("".join(json.dumps({"text": s}) + "\n" for s in sentences))
    train_bpe_tokenizer(sentences, 320).save_pretrained(tmp_path / "tokenizer")
    overrides = {
        "run_dir": str(tmp_path / "run"), "data.train": str(tmp_path / "docs.jsonl"),
        "tokenizer.path": str(tmp_path / "tokenizer"), "model.arch": "avey-b", "model.preset": "tiny",
        "model.overrides": "{hidden_size: 32, num_hidden_layers: 2, split_size: 8, num_retrieved_splits: 2}",
        "data.seq_len": 32, "data.num_workers": 0, "data.eval_fraction": 0.1, "train.global_batch_tokens": 256,
        "train.micro_batch_size": 4, "train.max_steps": 2, "train.threads": 1, "train.precision": "fp32",
        "eval.every": 0, "eval.max_sequences": 8, "eval.at_start": False, "eval.fill_examples": "[]",
        "checkpoint.every": 0, "logging.progress": False,
    }
    train(load_config(None, [f"{k}={v}" for k, v in overrides.items()]))
    model = tmp_path / "run" / "model"
    (tmp_path / "texts.jsonl").write_text("".join(json.dumps({"id": str(i), "text": t}) + "\n"
                                                  for i, t in enumerate(TEXTS)))
    embed_corpus(str(model), str(tmp_path / "texts.jsonl"), str(tmp_path / "vectors"),
                 EmbedOptions(load=LoadOptions(precision="fp32"), id_column="id", progress=False))
    table = pq.read_table(tmp_path / "vectors")
    written = dict(zip(table["id"].to_pylist(), table["vector"].to_pylist(), strict=True))
    expected = torch.tensor([written[str(i)] for i in range(len(TEXTS))])
    got = st_vectors(model)
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-5)
    torch.testing.assert_close(got.norm(dim=-1), torch.ones(len(TEXTS)))
