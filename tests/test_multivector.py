"""The multi-vector (late interaction) head: unit token vectors from a projection of the last hidden state, the
``Encoder``'s ``multivector`` kind, the library's one MaxSim, and a saved directory that sentence-transformers'
``MultiVectorEncoder`` loads with the same vectors (:mod:`avey_b.model.multivector`)."""

import json

import pytest
import torch

from avey_b import AveyBForMultiVector, AveyBForSentenceEmbedding
from avey_b import testing as toy
from avey_b.inference.encoder import Encoder
from avey_b.inference.options import LoadOptions
from avey_b.model import presets
from avey_b.model.similarity import maxsim
from avey_b.testing import seeded

TEXTS = ["a good film", "the plot was awful and the cast was weak", "bob met alice in paris " * 30]


@pytest.fixture(scope="module")
def multivector_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("multivector")
    tok = toy.tokenizer(str(directory))
    seeded(AveyBForMultiVector, presets.tiny(vocab_size=len(tok), multivector_dim=16)).save_pretrained(directory)
    return directory


def encoder(directory, **kwargs) -> Encoder:
    return Encoder(directory, LoadOptions(device="cpu", precision="fp32"), **kwargs).load()


def test_the_head_gives_unit_vectors_of_the_configured_size_and_zero_at_padding():
    assert presets.tiny().multivector_dim == 128
    with pytest.raises(ValueError, match="multivector_dim"):
        presets.tiny(multivector_dim=0)
    model = seeded(AveyBForMultiVector, presets.tiny(multivector_dim=8))
    ids = torch.randint(5, 90, (2, 9))
    mask = torch.ones_like(ids)
    mask[1, 6:] = 0
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask).embeddings
    assert out.shape == (2, 9, 8)
    torch.testing.assert_close(out.norm(dim=-1), mask.float())
    with torch.no_grad():  # the padded row equals the row run alone
        alone = model(input_ids=ids[1:, :6], attention_mask=mask[1:, :6]).embeddings
    torch.testing.assert_close(out[1, :6], alone[0], rtol=0, atol=1e-5)


def test_with_labels_the_head_gives_the_in_batch_contrastive_maxsim_loss():
    model = seeded(AveyBForMultiVector, presets.tiny(multivector_dim=8))
    ids = torch.randint(5, 90, (4, 9))
    mask = torch.ones_like(ids)
    mask[2, 5:] = 0
    labels = torch.tensor([0, 0, 1, 2])  # a pair; 2 and 3 are only negatives
    assert model(input_ids=ids, attention_mask=mask).loss is None
    out = model(input_ids=ids, attention_mask=mask, labels=labels)
    vectors = [v[m.bool()] for v, m in zip(out.embeddings, mask, strict=True)]
    maxsim_of = lambda i, j: (vectors[i] @ vectors[j].T).amax(1).sum()  # query i, document j
    expected = torch.stack([-(maxsim_of(i, j) - torch.logsumexp(torch.stack([maxsim_of(i, k) for k in range(4)
                                                                             if k != i]), 0))
                            for i, j in ((0, 1), (1, 0))]).mean()
    torch.testing.assert_close(out.loss, expected, rtol=0, atol=1e-5)
    out.loss.backward()
    assert model.projection.weight.grad.abs().sum() > 0
    as_tuple = model(input_ids=ids, attention_mask=mask, labels=labels, return_dict=False)
    torch.testing.assert_close(as_tuple[0], out.loss)
    torch.testing.assert_close(as_tuple[1], out.embeddings)
    with pytest.raises(ValueError, match=r"labels must have shape \(batch,\) = \(4,\), got \(2,\)"):
        model(input_ids=ids, attention_mask=mask, labels=labels[:2])


def test_maxsim_scores_texts_of_different_lengths_as_a_loop_does():
    g = torch.Generator().manual_seed(0)
    unit = lambda *s: torch.nn.functional.normalize(torch.randn(*s, generator=g), dim=-1)
    q, docs = unit(5, 8), [unit(3, 8), unit(11, 8), unit(7, 8)]
    d = torch.nn.utils.rnn.pad_sequence(docs, batch_first=True)
    keep = torch.nn.utils.rnn.pad_sequence([torch.ones(len(x), dtype=torch.bool) for x in docs], batch_first=True)
    got = maxsim(q[None, None], d[None], None, keep[None])[0, 0]
    expected = torch.stack([(q @ x.T).amax(1).sum() for x in docs])
    torch.testing.assert_close(got, expected)


def test_the_encoder_answers_multivector_with_real_tokens_and_scores_by_maxsim(multivector_dir):
    enc = encoder(multivector_dir)
    assert enc.kinds == ["embed", "multivector"]
    vectors = enc.multivectors(TEXTS, batch_tokens=64)  # several batches, one padded
    lengths = [len(ids) for ids in enc.tokenize(TEXTS)["input_ids"]]  # [CLS] ... [SEP]: special tokens kept
    assert [tuple(v.shape) for v in vectors] == [(n, 16) for n in lengths]
    torch.testing.assert_close(vectors[2].norm(dim=-1), torch.ones(lengths[2]))
    scores = enc.maxsim(TEXTS[0], TEXTS)
    expected = torch.stack([(vectors[0] @ v.T).amax(1).sum() for v in vectors])
    torch.testing.assert_close(scores, expected, rtol=0, atol=1e-5)
    assert int(scores.argmax()) == 0  # a text matches itself best: every token finds itself


def test_a_model_without_the_head_is_refused_with_how_to_train_one(model_dir):
    enc = encoder(model_dir)
    assert "multivector" not in enc.kinds
    with pytest.raises(ValueError, match=r"without a multi-vector head .*avey-b finetune --task multi-vector"):
        enc.multivectors(["a good film"])


def test_the_saved_directory_loads_in_sentence_transformers_multi_vector_encoder_with_the_same_vectors(
        multivector_dir, capfd):
    st = pytest.importorskip("sentence_transformers")
    info = json.loads((multivector_dir / "config_sentence_transformers.json").read_text())
    assert info["model_type"] == "MultiVectorEncoder"
    capfd.readouterr()
    model = st.MultiVectorEncoder(str(multivector_dir), device="cpu")
    said = capfd.readouterr()
    assert "LOAD REPORT" not in said.out + said.err  # the projection loads from 1_Dense/: nothing to report
    enc = encoder(multivector_dir)
    ours = enc.multivectors(TEXTS)
    for encode in (model.encode_query, model.encode_document):
        got = encode(TEXTS)
        for g, o in zip(got, ours, strict=True):
            torch.testing.assert_close(g.cpu().float(), o, rtol=0, atol=1e-5)
    scores = model.similarity(model.encode_query(TEXTS[:1]), model.encode_document(TEXTS))[0]
    torch.testing.assert_close(scores.cpu().float(), enc.maxsim(TEXTS[0], TEXTS),
                               rtol=0, atol=1e-4)


def test_multi_vector_encoder_save_round_trips_with_the_same_token_vectors(multivector_dir, tmp_path):
    st = pytest.importorskip("sentence_transformers")
    model = st.MultiVectorEncoder(str(multivector_dir), device="cpu")
    model.save(str(tmp_path))  # its backbone's save_pretrained runs inside: it must not write its own files
    info = json.loads((tmp_path / "config_sentence_transformers.json").read_text())
    assert info["model_type"] == "MultiVectorEncoder" and info["similarity_fn_name"] == "maxsim"
    assert [m["path"] for m in json.loads((tmp_path / "modules.json").read_text())] == [
        "", "1_Dense", "2_MultiVectorMask", "3_Normalize"]
    assert not (tmp_path / "1_Pooling").exists() and not (tmp_path / "2_Normalize").exists()
    again = st.MultiVectorEncoder(str(tmp_path), device="cpu")
    assert type(again[0].auto_model) is type(model[0].auto_model) and again.max_seq_length == model.max_seq_length
    for encode, encode_again in ((model.encode_query, again.encode_query),
                                 (model.encode_document, again.encode_document)):
        for before, after in zip(encode(TEXTS), encode_again(TEXTS), strict=True):
            assert torch.equal(before, after)


def test_resaving_another_head_into_the_directory_removes_the_multi_vector_files(tmp_path):
    tok = toy.tokenizer(str(tmp_path))
    seeded(AveyBForMultiVector, presets.tiny(vocab_size=len(tok), multivector_dim=8)).save_pretrained(tmp_path)
    assert (tmp_path / "1_Dense" / "model.safetensors").is_file()
    seeded(AveyBForSentenceEmbedding, presets.tiny(vocab_size=len(tok))).save_pretrained(tmp_path)
    assert not (tmp_path / "1_Dense" / "model.safetensors").exists()
    assert not (tmp_path / "3_Normalize" / "config.json").exists()
    assert json.loads((tmp_path / "modules.json").read_text())[1]["path"] == "1_Pooling"


@pytest.mark.slow
def test_finetune_multi_vector_trains_from_pairs_and_saves_a_directory_both_loaders_agree_on(tmp_path):
    st = pytest.importorskip("sentence_transformers")
    from test_finetune_retrieval import pairs, write_jsonl

    from avey_b.cli import main

    base = toy.avey_b(str(tmp_path / "base"), toy.tokenizer(str(tmp_path / "base")))
    train = write_jsonl(tmp_path / "pairs.jsonl", pairs(40))
    out = tmp_path / "mv"
    assert main(["finetune", "--task", "multi-vector", "--model", base, "--train-file", train, "--output-dir",
                 str(out), "--multivector-dim", "16", "--epochs", "1", "--batch-size", "8", "--precision", "fp32",
                 "--device", "cpu", "--threads", "1"]) == 0
    record = json.loads((out / "results.json").read_text())
    assert set(record["metrics"]) == set(record["baseline"]) == {"recall@1", "recall@10", "ndcg@10", "mrr@10"}
    assert record["multivector_dim"] == 16 and record["n_validation"] == 4
    assert json.loads((out / "config.json").read_text())["architectures"] == ["AveyBForMultiVector"]
    enc = encoder(out)
    assert "multivector" in enc.kinds
    ours = enc.multivectors(TEXTS)
    got = st.MultiVectorEncoder(str(out), device="cpu").encode_document(TEXTS)
    for g, o in zip(got, ours, strict=True):
        assert o.shape[1] == 16
        torch.testing.assert_close(g.cpu().float(), o, rtol=0, atol=1e-5)


def test_embed_stores_dense_and_token_vectors_in_the_same_shards_and_resumes(tmp_path, multivector_dir,
                                                                              monkeypatch):
    pq = pytest.importorskip("pyarrow.parquet")
    from avey_b.apps.embed import EmbedOptions, embed_corpus, shards
    from avey_b.apps.embed.options import embed_options, embed_parser

    args = embed_parser().parse_args(["m", "i", "o", "--outputs", "dense,multivector"])
    assert embed_options(args).outputs == ("dense", "multivector")
    docs = TEXTS + ["the film", "paris " * 50, "bob"]
    (tmp_path / "d.jsonl").write_text("".join(json.dumps({"id": f"d{i}", "text": t}) + "\n"
                                              for i, t in enumerate(docs)))
    options = EmbedOptions(outputs=("dense,multivector",), shard_size=2, long_document_tokens=40, progress=False,
                           load=LoadOptions(precision="fp32"))
    run = lambda out: embed_corpus(str(multivector_dir), str(tmp_path / "d.jsonl"), str(tmp_path / out), options)
    write, written = shards.write_shard, []

    def killed_after_one(path, table):
        if written:
            raise KeyboardInterrupt
        written.append(path.name)
        write(path, table)

    monkeypatch.setattr(shards, "write_shard", killed_after_one)
    with pytest.raises(KeyboardInterrupt):
        run("out")
    monkeypatch.setattr(shards, "write_shard", write)
    manifest = run("out")
    table = pq.read_table(tmp_path / "out")
    assert [r["shards_written"] for r in manifest["runs"]] == [1, 2]
    assert table.schema.field("multivector").type.value_type.list_size == 16
    enc = encoder(multivector_dir)
    longer = [i for i, t in enumerate(docs) if len(enc.tokenize([t])["input_ids"][0]) > 40]
    assert len(longer) == 2 and manifest["skipped"] == []  # longer than --long-document-tokens: whole, one forward
    assert table["id"].to_pylist() == [f"d{i}" for i in range(len(docs))]
    for i, dense, tokens in zip(range(len(docs)), table["vector"].to_pylist(), table["multivector"].to_pylist(),
                                strict=True):
        torch.testing.assert_close(torch.tensor(tokens), enc.multivectors(docs[i])[0], rtol=0, atol=1e-5)
        torch.testing.assert_close(torch.tensor(dense), enc.encode(docs[i]), rtol=0, atol=1e-5)
    run("whole")  # an uninterrupted run: the same rows, bit for bit
    assert pq.read_table(tmp_path / "whole")["multivector"].to_pylist() == table["multivector"].to_pylist()


def test_embed_refuses_token_vectors_where_they_cannot_go_naming_why(tmp_path, model_dir):
    from avey_b.apps.embed import EmbedOptions, embed_corpus

    with pytest.raises(ValueError, match="not a list of distinct kinds among dense, sparse, multivector"):
        EmbedOptions(outputs=("dense,colbert",))
    with pytest.raises(ValueError, match="does not apply with --chunking late"):
        EmbedOptions(outputs=("multivector",), chunking="late", chunk_tokens=8)
    with pytest.raises(ValueError, match="--outputs multivector is not updated in place"):
        EmbedOptions(outputs=("multivector",), update=True)
    (tmp_path / "d.txt").write_text("a good film")
    with pytest.raises(ValueError, match=r"needs a multi-vector model .*avey-b finetune --task multi-vector"):
        embed_corpus(str(model_dir), str(tmp_path / "d.txt"), str(tmp_path / "out"),
                     EmbedOptions(outputs=("multivector",), progress=False))
