"""int8 ONNX: the export stores weights where onnxruntime's quantizer finds them, ``avey-b export --quantize int8``
turns every weight MatMul into an integer MatMul, and the int8 model stays close to the eager one while choosing
exactly the fp32 model's splits (the ranker stays fp32) on text-like input with repeated words."""

import random

import onnx
import pytest
import torch

from avey_b import AveyBModel, cli
from avey_b import testing as toy
from avey_b.apps.export import Exportable, export_onnx
from avey_b.apps.quantize import (
    INTEGER_MATMULS,
    compare_quantized,
    quantize_onnx,
    quantized_path,
    weight_matmuls,
)
from avey_b.model import presets

pytestmark = pytest.mark.slow  # each test exports a model (seconds)
WORDS = "the film was very good and the plot was awful with alice smith in paris bob said today".split()


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """(tokenizer, model, fp32 ONNX path) of a tiny model over the toy tokenizer's vocabulary."""
    d = tmp_path_factory.mktemp("quantize")
    tok = toy.tokenizer(str(d / "tok"))
    torch.manual_seed(0)
    model = AveyBModel(presets.tiny(vocab_size=len(tok))).eval()
    return tok, model, export_onnx(model, d / "model.onnx")


def text_like(tok) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """A padded batch of sentences over a 17-word vocabulary (repeated words: many equal MaxSim candidates)."""
    rng = random.Random(0)
    texts = [" ".join(rng.choice(WORDS) for _ in range(n)) for n in (20, 150, 600)]
    enc = tok(texts, padding=True, return_tensors="pt")
    return [(enc["input_ids"], enc["attention_mask"])]


def test_exported_weights_reach_their_matmuls_as_initializers(exported):
    _, model, path = exported
    graph = onnx.load(str(path)).graph
    weights = {i.name for i in graph.initializer}
    runtime = [n.name for n in graph.node if n.op_type in ("Transpose", "Split") and n.input[0] in weights]
    assert runtime == [], f"weights transposed or split at run time: {runtime}"
    # per layer: the enricher's three blocks and the fuser's two
    assert len(weight_matmuls(onnx.load(str(path)))) == 5 * model.config.num_hidden_layers


def test_int8_model_is_close_to_eager_and_keeps_the_fp32_ranker_choices(exported, tmp_path):
    tok, model, path = exported
    quantized = quantize_onnx(path, model.config, tmp_path / "model.int8.onnx")
    check = compare_quantized(quantized, path, Exportable(model, "last_hidden_state"), text_like(tok))
    assert check["identical_choices"] == 1.0
    # int8 noise on a random 32-wide model turns a few tokens' vectors; the bulk stays within 1e-3 of the eager one
    assert check["mean_cosine"] >= 0.98
    assert check["median_cosine"] >= 0.999


def fp32_weights(model) -> list[str]:
    """The weights that the weight MatMuls left in fp32 read, from ``layers.`` on (a head adds its own prefix)."""
    weight_of = {n.name: n.input[1] for n in model.graph.node if n.op_type == "MatMul"}
    return sorted(weight_of[n][weight_of[n].find("layers."):] for n in weight_matmuls(model))


def test_export_verb_quantizes_every_weight_matmul_but_the_fusers_mixed_block(tmp_path, capsys):
    """``--head embedding --quantize int8``: ``onnx/model.int8.onnx`` beside ``onnx/model.onnx``, both outputs
    (per-token and pooled) checked against the eager head; every weight MatMul is integer but the fuser's column
    block that reads the mixed context ``c`` (paper layout ``[Z_h | c]``: the second block), kept in fp32."""
    from avey_b import AveyBForSentenceEmbedding

    torch.manual_seed(0)
    model = AveyBForSentenceEmbedding(presets.tiny(vocab_size=200))
    model.save_pretrained(tmp_path / "ckpt")
    assert cli.main(["export", str(tmp_path / "ckpt"), str(tmp_path / "served"), "--head", "embedding",
                     "--quantize", "int8"]) == 0
    out = capsys.readouterr().out
    assert "int8 against the eager model" in out and "ranker choices identical to the fp32 model's: 100.0%" in out
    fp32_path = tmp_path / "served" / "onnx" / "model.onnx"
    assert quantized_path(fp32_path) == tmp_path / "served" / "onnx" / "model.int8.onnx"
    fp32, int8 = onnx.load(str(fp32_path)), onnx.load(str(quantized_path(fp32_path)))
    assert [o.name for o in int8.graph.output] == ["last_hidden_state", "sentence_embedding"]
    integer = [n for n in int8.graph.node if n.op_type in INTEGER_MATMULS]
    layers = model.config.num_hidden_layers
    assert len(integer) == len(weight_matmuls(fp32)) - layers == 4 * layers
    assert fp32_weights(int8) == [f"layers.{i}.fuser.weight.split1.T" for i in range(layers)]
    assert any(i.data_type == onnx.TensorProto.INT8 for i in int8.graph.initializer)
    # the ranker's products (no weight) are the fp32 model's
    assert sum(n.op_type == "MatMul" for n in int8.graph.node) == sum(
        n.op_type == "MatMul" for n in fp32.graph.node) - len(integer)


def test_quantize_needs_the_onnx_format(tmp_path, capsys):
    assert cli.main(["export", str(tmp_path / "ckpt"), str(tmp_path / "model.pt2"), "--format", "torch",
                     "--quantize", "int8"]) == 1
    assert "--quantize int8 quantizes the ONNX model: use it with --format onnx" in capsys.readouterr().err
    assert not (tmp_path / "model.pt2").exists()


def test_eager_int8_torchao_runs_the_processor_on_int8_weights():
    """torchao's int8 weights are tensor subclasses: the layer runs the quantized enricher and fuser as modules
    instead of applying blocks of their weights (which torchao cannot split)."""
    pytest.importorskip("torchao")
    from avey_b.apps.quantize import quantize_eager_int8

    torch.manual_seed(0)
    model = AveyBModel(presets.tiny(hidden_size=64)).eval()
    ids = torch.randint(1, 99, (2, 40), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[1, 25:] = 0
    with torch.no_grad():
        want = model(ids, attention_mask=mask).last_hidden_state
        got = quantize_eager_int8(model)(ids, attention_mask=mask).last_hidden_state
    assert type(model.layers[0].enricher.weight).__name__ != "Parameter"  # really quantized
    cos = torch.nn.functional.cosine_similarity(got, want, dim=-1)[mask.bool()]
    assert cos.median() >= 0.999 and cos.mean() >= 0.98


def test_release_layout_keeps_its_mixed_block_in_fp32(tmp_path):
    """The release's feature order ``[c | Z_h]`` puts the mixed block first in the fuser's columns."""
    torch.manual_seed(0)
    model = AveyBModel(presets.tiny(vocab_size=200, enricher_layout="release")).eval()
    path = export_onnx(model, tmp_path / "model.onnx")
    int8 = onnx.load(str(quantize_onnx(path, model.config)))
    layers = model.config.num_hidden_layers
    assert fp32_weights(int8) == [f"layers.{i}.fuser.weight.split0.T" for i in range(layers)]
    assert sum(n.op_type in INTEGER_MATMULS for n in int8.graph.node) == 4 * layers


def test_quantize_refuses_an_unknown_exclusion(exported, tmp_path):
    _, model, path = exported
    with pytest.raises(ValueError, match="not weight MatMuls"):
        quantize_onnx(path, model.config, tmp_path / "x.onnx", exclude=["no_such_node"])
