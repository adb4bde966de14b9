"""The baselines' attention implementations in `avey-b bench`: ModernBERT with flex_attention computes what it computes
with sdpa, models built from one config keep the attention each asked for, the bench options accept every choice and
refuse others early, an implementation that cannot run here says why, and the tables show each baseline's fastest."""

import pytest
import torch

from avey_b import cli
from avey_b.benchmarking import attention, efficiency, options, results
from avey_b.utils import model_spec


def _modernbert_pair():
    config = model_spec.build_config("modernbert-tiny")  # 2 layers: one global, one sliding (window 16)
    torch.manual_seed(0)
    sdpa = model_spec.random_model(config, attn_implementation="sdpa")
    flex = model_spec.random_model(config, attn_implementation="flex_attention")
    flex.load_state_dict(sdpa.state_dict())
    return sdpa, flex


def test_models_built_from_one_config_keep_their_own_attention():
    sdpa, flex = _modernbert_pair()
    assert sdpa.config._attn_implementation == "sdpa"
    assert flex.config._attn_implementation == "flex_attention"


@pytest.mark.slow  # compiles FlexAttention's CPU kernels: 30-120 s from a cold inductor cache, seconds from a warm one
def test_modernbert_flex_attention_matches_sdpa():
    """The same weights give the same hidden states with either attention, with and without padding, in a window
    layer and a global one, at a length past the window and off FlexAttention's 128-token block size."""
    sdpa, flex = _modernbert_pair()
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(4, 99, (2, 200), generator=g)
    mask = torch.ones_like(ids)
    mask[1, 150:] = 0
    with attention.static_shapes(), torch.no_grad():
        a = sdpa(input_ids=ids, attention_mask=mask).last_hidden_state
        b = flex(input_ids=ids, attention_mask=mask).last_hidden_state
    real = mask.bool()
    assert torch.isfinite(b[real]).all()
    torch.testing.assert_close(b[real], a[real], atol=1e-5, rtol=1e-5)


def test_bench_options_accept_every_attention_and_refuse_others():
    assert set(options.DEFAULT_ATTENTIONS) == {"sdpa", "flex_attention", "flash_attention_2"}
    assert options.BenchOptions(out="x").attn == list(options.DEFAULT_ATTENTIONS)
    assert options.BenchOptions(out="x", attn=list(options.ATTENTIONS)).attn == list(options.ATTENTIONS)
    with pytest.raises(ValueError, match="--attn 'flex' is not one of"):
        options.BenchOptions(out="x", attn=["flex"])
    parser = options.build_parser()
    args = parser.parse_args(["run", "--out", "x", "--attn", "flex_attention", "sdpa"])
    assert args.attn == ["flex_attention", "sdpa"]
    with pytest.raises(SystemExit):
        parser.parse_args(["run", "--out", "x", "--attn", "flash"])


def test_unavailable_attention_says_why():
    assert attention.unavailable_reason("sdpa", "cpu") is None
    assert attention.unavailable_reason("flex_attention", "cpu") is None  # torch >= 2.5
    assert "CUDA" in attention.unavailable_reason("flash_attention_2", "cpu")
    assert "unknown attention" in attention.unavailable_reason("flash", "cpu")


def test_bench_records_flash_attention_on_cpu_as_unavailable_with_the_reason(tmp_path):
    out = tmp_path / "b"
    assert cli.main(["--debug", "bench", "run", "--models", "modernbert-tiny", "--attn", "flash_attention_2",
                     "--lengths", "16", "--batch-size", "1", "--repeats", "1", "--warmup", "0", "--device", "cpu",
                     "--out", str(out)]) == 0
    (rec,) = results.read_records(str(out))
    assert rec["status"] == "unavailable" and "CUDA" in rec["error"]


def test_static_shapes_turns_automatic_dynamic_shapes_off_and_restores_it():
    before = torch._dynamo.config.automatic_dynamic_shapes
    with attention.static_shapes(reset=False):
        assert torch._dynamo.config.automatic_dynamic_shapes is False
        assert torch._dynamo.config.recompile_limit >= attention.RECOMPILE_LIMIT
    assert torch._dynamo.config.automatic_dynamic_shapes == before
    assert attention.is_compiled("flex_attention") and not attention.is_compiled("sdpa")


def _rec(attn, n, seconds, status="ok", model="modernbert-base"):
    return {"model": model, "attn": attn, "mode": "eager", "dtype": "float32", "batch_size": 1, "seq_len": n,
            "status": status, "latency_median_s": seconds, "latency_min_s": seconds, "cpu_median_s": seconds}


def test_table_adds_each_baselines_fastest_attention_per_length():
    records = [_rec("sdpa", 512, 1.0), _rec("flex_attention", 512, 1.2), _rec("sdpa", 8192, 47.0),
               _rec("flex_attention", 8192, 32.0), _rec("flash_attention_2", 8192, None, status="unavailable"),
               _rec(None, 512, 0.5, model="avey-b-base"), _rec(None, 8192, 15.0, model="avey-b-base")]
    best = efficiency.fastest_attention(records)
    assert list(best) == [("modernbert-base", "eager", "float32", 1)]  # Avey-B has no attention to choose
    assert {n: r["attn"] for n, r in best[("modernbert-base", "eager", "float32", 1)].items()} == {
        512: "sdpa", 8192: "flex_attention"}
    table = efficiency.format_table(records, "latency")
    row = next(line for line in table.splitlines() if "fastest attention" in line)
    assert row.startswith("| modernbert-base [eager, fastest attention, float32]")
    assert "| 1 (sdpa) |" in row and "| 32 (flex_attention) |" in row
