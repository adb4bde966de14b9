"""``avey-b embed --outputs dense,sparse``: SPLADE's non-zero weights as ``sparse_indices`` (int32) and
``sparse_values`` (float32) list columns beside ``vector`` in the same shards, equal to ``Encoder.sparse``, long
documents whole; resumable, a rerun with other outputs refused by name; the combinations it cannot take refused."""

import json

import pytest
import torch

from avey_b import AveyBForSentenceEmbedding
from avey_b import testing as toy
from avey_b.apps.embed import EmbedOptions, embed_corpus
from avey_b.cli import main
from avey_b.inference.encoder import Encoder
from avey_b.inference.options import LoadOptions

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

DOCS = ["a good film", "the plot was awful", "bob met alice in paris " * 60, "weak cast", "superb music today"]


@pytest.fixture(scope="module")
def mlm(tmp_path_factory):
    root = tmp_path_factory.mktemp("mlm")
    return toy.avey_b(str(root), toy.tokenizer(str(root)))


def write_docs(path) -> str:
    path.write_text("".join(json.dumps({"id": f"d{i}", "text": t}) + "\n" for i, t in enumerate(DOCS)))
    return str(path)


def test_sparse_columns_beside_the_vectors_equal_the_encoders_long_documents_whole_and_resumable(tmp_path, mlm):
    source, out = write_docs(tmp_path / "d.jsonl"), tmp_path / "out"
    args = ["embed", mlm, source, str(out), "--outputs", "dense,sparse", "--precision", "fp32", "--shard-size", "2",
            "--long-document-tokens", "64", "--no-progress"]
    assert main(args) == 0
    table = pq.read_table(out)
    assert table.schema.field("sparse_indices").type == pa.list_(pa.int32())
    assert table.schema.field("sparse_values").type == pa.list_(pa.float32())
    assert table["id"].to_pylist() == [f"d{i}" for i in range(len(DOCS))] and "vector" in table.column_names
    encoder = Encoder(mlm, LoadOptions(device="cpu", precision="fp32")).load()
    ids = encoder.tokenize(DOCS)["input_ids"]
    assert len(ids[2]) > 64  # over --long-document-tokens: run whole for its sparse vector
    for i, row in enumerate(ids):
        (indices, values), = encoder.sparse(*encoder.pad([row]))
        assert table["sparse_indices"][i].as_py() == indices.tolist()
        torch.testing.assert_close(torch.tensor(table["sparse_values"][i].as_py()), values, rtol=0, atol=1e-5)
        torch.testing.assert_close(torch.tensor(table["vector"][i].as_py()),
                                   encoder.embed(*encoder.pad([row]))[0], rtol=0, atol=1e-5)

    again = embed_corpus(mlm, source, str(out), EmbedOptions(load=LoadOptions(precision="fp32"), shard_size=2,
                                                             long_document_tokens=64, outputs=("sparse", "dense"),
                                                             progress=False))
    assert (again["runs"][-1]["shards_found"], again["runs"][-1]["shards_written"]) == (3, 0)  # the same outputs
    with pytest.raises(ValueError, match=r"outputs: \['dense', 'sparse'\] then, \['dense'\] now"):
        embed_corpus(mlm, source, str(out), EmbedOptions(load=LoadOptions(precision="fp32"), shard_size=2,
                                                         long_document_tokens=64, progress=False))
    only = embed_corpus(mlm, source, str(tmp_path / "only"), EmbedOptions(
        load=LoadOptions(precision="fp32"), outputs=("sparse",), progress=False))
    assert only["settings"]["outputs"] == ["sparse"]
    assert "vector" not in pq.read_table(tmp_path / "only").column_names


def test_what_sparse_outputs_cannot_take_is_refused_before_anything_is_written(tmp_path, mlm):
    with pytest.raises(ValueError, match="does not apply with --chunking late"):
        EmbedOptions(outputs=("dense,sparse",), chunking="late", chunk_tokens=8)
    with pytest.raises(ValueError, match="embed into a new OUTPUT without --update"):
        EmbedOptions(outputs=("sparse",), update=True)
    with pytest.raises(ValueError, match="not a list of distinct kinds among dense, sparse"):
        EmbedOptions(outputs=("dense", "colbert"))
    AveyBForSentenceEmbedding.from_pretrained(mlm).save_pretrained(tmp_path / "emb")
    with pytest.raises(ValueError, match="no masked-LM head.*--task sparse-embedding"):
        embed_corpus(str(tmp_path / "emb"), write_docs(tmp_path / "d.jsonl"), str(tmp_path / "out"),
                     EmbedOptions(outputs=("sparse",), progress=False))
    assert not (tmp_path / "out").exists()
