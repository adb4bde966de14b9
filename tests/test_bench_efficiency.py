"""`avey-b bench`: a tiny CPU run gives a well-formed CSV/JSONL, limits and OOM are recorded as data, the
power-law fit recovers known exponents, and the timing primitives count what they claim."""

import csv
import dataclasses
import json
import math
import time

import numpy as np
import pytest
import torch

from avey_b import cli
from avey_b.benchmarking import efficiency, fit, options, results, timing
from avey_b.utils import device
from avey_b.utils import model_spec as models
from avey_b.utils.records import read_jsonl

LENGTHS = ["16", "40", "600"]


def bench(*argv):
    """``avey-b bench ARGV``; with ``--debug`` an error is raised here rather than printed."""
    return cli.main(["--debug", "bench", *argv])


def _run(tmp_path, *extra, models_=("bert-tiny", "avey-b-tiny")):
    out = tmp_path / "bench"
    argv = [
        "--models",
        *models_,
        "--lengths",
        *LENGTHS,
        "--batch-size",
        "2",
        "--repeats",
        "2",
        "--warmup",
        "1",
        "--device",
        "cpu",
        "--attn",  # the Transformer with its default attention (flex_attention has its own tests)
        "sdpa",
        "--out",
        str(out),
        *extra,
    ]
    assert bench("run", *argv) == 0
    return out


def _rows(out):
    with open(out / "results.csv") as f:
        return list(csv.DictReader(f))


@pytest.mark.slow
def test_tiny_cpu_run_writes_well_formed_csv_and_jsonl(tmp_path):
    out = _run(tmp_path, "--no-compressor")
    rows = _rows(out)
    with open(out / "results.csv") as f:
        assert next(csv.reader(f)) == efficiency.CSV_FIELDS
    jsonl = results.read_records(str(out / "results.jsonl"))
    assert len(rows) == len(jsonl) == 3 * len(LENGTHS)  # bert-tiny, avey-b-tiny, avey-b-tiny w/o compressor
    by = {(r["model"], int(r["seq_len"])): r for r in rows}
    assert set(m for m, _ in by) == {"bert-tiny", "avey-b-tiny", "avey-b-tiny:compressor=False"}
    # BERT's learned position table stops it at 512: recorded as "—", not a crash.
    assert by[("bert-tiny", 600)]["status"] == "max_length"
    assert efficiency.cell(jsonl[[r["seq_len"] for r in jsonl].index(600)]) == "—"
    # Avey-B has no maximum length.
    assert by[("avey-b-tiny", 600)]["status"] == "ok"
    for r in jsonl:
        if r["status"] != "ok":
            continue
        assert r["repeats"] == 2 and len(r["times_s"]) == 2
        assert r["latency_min_s"] <= r["latency_median_s"] <= r["latency_max_s"]
        assert math.isclose(r["throughput_tok_s"], 2 * r["seq_len"] / r["latency_median_s"])
        assert r["peak_mem_bytes"] > 0 and r["mem_method"] == "rss_sampler"
        assert len(r["cpu_times_s"]) == 2 and r["cpu_median_s"] > 0  # process CPU time, for shared CPUs
        # FLOPs of the forward and its utilization against a same-process GEMM of the same dtype
        assert r["flops"] > 0 and r["gemm_flop_s"] > 0
        assert math.isclose(r["utilization"], r["flops"] / r["latency_min_s"] / r["gemm_flop_s"])
        assert (
            results.latency_of(r, "cpu") == r["cpu_median_s"] and results.latency_of(r, "min") == r["latency_min_s"]
        )
        assert r["n_params"] > 0 and r["dtype"] == "float32" and r["device"] == "cpu"
    # The compressor-off model really is another architecture (the compressor's P matrix is gone).
    assert by[("avey-b-tiny", 16)]["n_params"] != by[("avey-b-tiny:compressor=False", 16)]["n_params"]
    table = efficiency.format_table(jsonl)
    assert "| bert-tiny [eager, sdpa, float32] |" in table and "—" in table


@pytest.mark.slow
def test_oom_is_recorded_as_data_and_stops_the_series(tmp_path, monkeypatch):
    real = efficiency.run_point

    def flaky(model, config, *, length, **kw):
        if length >= 40:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 96.00 GiB")
        return real(model, config, length=length, **kw)

    monkeypatch.setattr(efficiency, "run_point", flaky)
    out = _run(tmp_path, models_=("avey-b-tiny",))
    recs = {r["seq_len"]: r for r in results.read_records(str(out / "results.jsonl"))}
    assert recs[16]["status"] == "ok"
    assert recs[40]["status"] == "oom" and not recs[40].get("inferred")
    assert recs[600]["status"] == "oom" and recs[600]["inferred"]  # not run after the first OOM
    assert efficiency.cell(recs[40]) == "OOM"


def test_other_errors_are_not_swallowed(tmp_path, monkeypatch):
    def broken(*a, **k):
        raise RuntimeError("size mismatch in layer 3")

    monkeypatch.setattr(efficiency, "run_point", broken)
    with pytest.raises(RuntimeError, match="size mismatch"):
        _run(tmp_path, models_=("avey-b-tiny",))


@pytest.mark.slow
def test_resume_and_refuse_to_overwrite(tmp_path):
    out = _run(tmp_path, models_=("bert-tiny",))
    with pytest.raises(FileExistsError, match="--resume"):
        _run(tmp_path, models_=("bert-tiny",))
    _run(tmp_path, "--resume", models_=("bert-tiny", "avey-b-tiny"))
    recs = results.read_records(str(out / "results.jsonl"))
    assert len(recs) == 2 * len(LENGTHS)  # bert-tiny points were not re-run


@pytest.mark.slow
def test_max_latency_skips_longer_lengths_and_resume_retries_them(tmp_path):
    out = _run(tmp_path, "--max-latency", "1e-9", models_=("avey-b-tiny",))
    status = [r["status"] for r in results.read_records(str(out / "results.jsonl"))]
    assert status == ["ok", "skipped_time", "skipped_time"]
    _run(tmp_path, "--resume", models_=("avey-b-tiny",))  # no latency cap now: the skipped points run
    recs = results.read_records(str(out / "results.jsonl"))
    assert [(r["seq_len"], r["status"]) for r in recs] == [(16, "ok"), (40, "ok"), (600, "ok")]
    assert len(results.read_records(str(out / "results.jsonl"), latest=False)) == 5
    assert len(_rows(out)) == 3  # the CSV holds the latest record of each point


def test_unavailable_attention_is_recorded(tmp_path):
    out = _run(tmp_path, "--attn", "flash_attention_2", models_=("bert-tiny",))  # CUDA only
    assert {r["status"] for r in results.read_records(str(out / "results.jsonl"))} == {"unavailable"}
    # the run records the options it was given, one line per invocation
    (line,) = read_jsonl(out / "options.jsonl")
    asked = options.BenchOptions(out=str(out), models=["bert-tiny"], lengths=[16, 40, 600], batch_size=2, repeats=2,
                                 warmup=1, device="cpu", attn=["flash_attention_2"])
    assert line["options"] == dataclasses.asdict(asked) and line["dtypes"] == ["float32"] and line["device"] == "cpu"


def test_bad_options_are_refused_before_running(tmp_path, capsys):
    assert cli.main(["bench", "run", "--lengths", "16", "0", "--out", str(tmp_path / "b")]) == 1
    assert "--batch-size and --lengths must be positive" in capsys.readouterr().err
    with pytest.raises(ValueError, match="'float16' is not one of"):
        options.BenchOptions(out="x", dtype=["float16"])
    assert not (tmp_path / "b").exists()


@pytest.mark.slow
def test_compile_mode_runs_a_point(tmp_path):
    # The dynamo path with the cheap "eager" backend (inductor compilation is too slow for a unit test).
    out = tmp_path / "c"
    bench("run", "--models", "avey-b-tiny", "--lengths", "24", "--batch-size", "1", "--modes", "compile",
          "--compile-backend", "eager", "--repeats", "1", "--warmup", "1", "--out", str(out))
    (rec,) = results.read_records(str(out / "results.jsonl"))
    assert rec["status"] == "ok" and rec["mode"] == "compile" and rec["first_call_s"] > 0
    assert rec["flops"] > 0  # counted on the eager model behind the compiled one


def test_power_law_fit_recovers_known_exponents():
    rng = np.random.default_rng(0)
    n = np.array([1024, 2048, 4096, 8192, 16384, 32768, 65536, 98304])
    lat = 3e-5 * n**1.3 * np.exp(rng.normal(0, 0.02, n.size))  # 2% multiplicative noise
    law = fit.fit_power_law(n, lat)
    assert law.slope == pytest.approx(1.3, abs=0.03) and law.r2 > 0.99
    assert law(4096) == pytest.approx(3e-5 * 4096**1.3, rel=0.1)
    # Through the records path: T = B*N/latency, so alpha = beta - 1 on the same range.
    recs = [
        {
            "model": "avey-b-small",
            "attn": None,
            "mode": "eager",
            "dtype": "float32",
            "batch_size": 8,
            "seq_len": int(k),
            "status": "ok",
            "latency_median_s": float(v),
            "throughput_tok_s": 8 * k / v,
        }
        for k, v in zip(n, lat, strict=True)
    ]
    recs.append({**recs[-1], "seq_len": 131072, "status": "oom"})  # excluded, never imputed
    (res,) = fit.fit_series(recs, min_length=4096).values()
    assert res["beta"] == pytest.approx(1.3, abs=0.05)
    assert res["alpha"] == pytest.approx(res["beta"] - 1, abs=1e-9)
    assert res["n_points"] == 6 and res["range"] == (4096, 98304)
    table = fit.fit_table(recs, min_length=4096)
    assert "| 0.33 |" in table and "| 0.58 |" in table  # the paper's Avey-B eager values sit next to ours


def test_fit_on_min_latency_ignores_slow_outliers():
    # On a shared machine other processes only add time: the minimum of the repeats keeps the true exponent
    # when the median is disturbed.
    n = [1024, 2048, 4096, 8192]
    recs = [
        {
            "model": "bert-base",
            "attn": "sdpa",
            "mode": "eager",
            "dtype": "float32",
            "batch_size": 1,
            "seq_len": k,
            "status": "ok",
            "latency_min_s": 1e-4 * k,
            "latency_median_s": 1e-4 * k * (1 + 9 * (k == 2048)),
            "throughput_tok_s": 0.0,
        }
        for k in n
    ]
    (best,) = fit.fit_series(recs, min_length=1024, stat="min").values()
    (med,) = fit.fit_series(recs, min_length=1024, stat="median").values()
    assert best["beta"] == pytest.approx(1.0) and best["alpha"] == pytest.approx(0.0, abs=1e-9)
    assert abs(med["beta"] - 1.0) > 0.05
    with pytest.raises(ValueError, match="stat"):
        results.latency_of(recs[0], "average")  # "mean" is a stat now (the authors protocol)


def test_power_law_fit_rejects_degenerate_input():
    with pytest.raises(ValueError, match="2 distinct lengths"):
        fit.fit_power_law([1024, 1024], [1.0, 2.0])
    with pytest.raises(ValueError, match="positive"):
        fit.fit_power_law([1024, 2048], [1.0, 0.0])


@pytest.mark.slow
def test_fit_and_plot_commands(tmp_path, capsys):
    out = _run(tmp_path, models_=("avey-b-tiny",))
    capsys.readouterr()
    bench("fit", str(out / "results.jsonl"), "--min-length", "16", "--out", str(tmp_path / "fit.md"))
    text = capsys.readouterr().out
    assert (
        "avey-b-tiny [eager, -, float32]" in text
        and (tmp_path / "fit.md").read_text().strip() == text.strip()
    )
    bench("fit", str(out))  # the run directory is taken for its results.jsonl
    text = capsys.readouterr().out
    # the default range (N >= 8192) holds none of this short run's lengths: the table says what to pass
    assert "avey-b-tiny [eager, -, float32]: fewer than 2 lengths in the fit range" in text
    assert f"pass --min-length {sorted(map(int, LENGTHS))[-2]} (or smaller)" in text
    with pytest.raises(FileNotFoundError, match="without results.jsonl"):
        bench("fit", str(tmp_path))
    bench("table", str(out / "results.jsonl"), "--stat", "cpu")
    text = capsys.readouterr().out
    assert "throughput (tokens/CPU-s, cpu)" in text and "latency (CPU-s/forward, cpu)" in text
    bench("plot", str(out / "results.jsonl"), "--out", str(tmp_path / "plots"))
    for name in ("throughput.png", "latency.png"):
        assert (tmp_path / "plots" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_measure_counts_warmup_and_repeats_and_caps_time():
    calls = []
    t = timing.measure(lambda: calls.append(1), warmup=3, repeats=4)
    assert len(calls) == 7 and len(t.times_s) == 4 and t.summary()["repeats"] == 4
    slow = timing.measure(lambda: time.sleep(0.02), warmup=0, repeats=100, min_repeats=3, max_seconds=0.05)
    assert len(slow.times_s) == 3 and slow.min_s >= 0.02
    with pytest.raises(ValueError, match="repeats"):
        timing.measure(lambda: None, repeats=0)


def test_alternate_times_the_calls_in_turn_with_untimed_preparation():
    """A/B timing on a shared machine: round by round (A, B, A, B), each call timed alone; what ``prepare`` does
    before a call is not in its time."""
    order = []
    calls = {"a": lambda: order.append("a"), "b": lambda: (order.append("b"), time.sleep(0.02))}
    timed = timing.alternate(calls, 3, prepare=lambda name: (order.append(f"set {name}"), time.sleep(0.1)))
    assert order == ["set a", "a", "set b", "b"] * 3
    assert [len(timed[k].times_s) for k in "ab"] == [3, 3] and len(timed["a"].cpu_times_s) == 3
    assert timed["a"].max_s < 0.05 and 0.02 <= timed["b"].min_s < 0.1  # the preparation's sleep is in neither
    with pytest.raises(ValueError, match="rounds"):
        timing.alternate(calls, 0)


def test_peak_rss_sampler_sees_a_large_allocation():
    with timing.PeakRSSSampler() as s:
        x = torch.ones(64, 1024, 1024)  # 256 MiB, touched
        time.sleep(0.05)
        del x
    assert s.peak - s.baseline > 200 * 2**20


def test_measure_and_timed_call_report_the_same_peak_memory_bracket():
    """Both go through PeakMemory: a call that touches 256 MiB reports at least that above the level before it."""
    def big():
        x = torch.ones(64, 1024, 1024)
        time.sleep(0.05)
        return float(x[0, 0, 0])

    t = timing.measure(big, warmup=0, repeats=1)
    assert t.mem_method == "rss_sampler" and t.peak_mem_delta_bytes > 200 * 2**20
    seconds, delta, result = timing.timed_call(big)
    assert result == 1.0 and seconds >= 0.05 and delta > 200 * 2**20


def test_is_oom():
    assert device.is_oom(torch.cuda.OutOfMemoryError("CUDA out of memory"))
    assert device.is_oom(
        RuntimeError("[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate memory")
    )
    assert not device.is_oom(RuntimeError("shape mismatch"))


def test_model_specs():
    spec = models.parse_spec("bert-tiny:num_hidden_layers=1,hidden_act='relu'")
    assert spec.overrides == {"num_hidden_layers": 1, "hidden_act": "relu"}
    cfg = models.build_config(spec)
    assert cfg.num_hidden_layers == 1 and models.max_length(cfg) == 512
    assert models.max_length(models.build_config("modernbert-tiny")) is None  # RoPE: extrapolated for speed
    assert models.max_length(models.build_config("modernbert-tiny"), respect_rope_window=True) == 512
    assert models.build_config("avey-b-tiny:compressor=False").compressor is False
    with pytest.raises(ValueError, match="unknown config key 'nonsense'"):
        models.build_config("bert-tiny:nonsense=1")
    with pytest.raises(ValueError, match="unknown config key 'hiden_size' \\(did you mean 'hidden_size'\\?\\)"):
        models.build_config("bert-tiny:hiden_size=64")
    with pytest.raises(ValueError, match="did you mean 'split_size'"):
        models.build_config("avey-b-tiny:split_sise=8")
    with pytest.raises(ValueError, match="unknown model"):
        models.build_config("gpt-17")
    neo = models.build_config("neobert")
    assert (neo.hidden_size, neo.num_hidden_layers, neo.num_attention_heads, neo.intermediate_size) == (
        768,
        28,
        12,
        3072,
    )
    assert set(neo.layer_types) == {"full_attention"} and neo.hidden_activation == "silu"


def test_model_spec_overrides_go_through_the_constructor():
    # Fields a config derives from others follow the overrides (setting them afterwards left ModernBERT with 22
    # layer types for 3 layers, and its model failed to build).
    small = models.build_config("modernbert-tiny:num_hidden_layers=3")
    assert small.num_hidden_layers == len(small.layer_types) == 3
    models.random_model(small)
    neo = models.build_config("neobert:num_hidden_layers=2,hidden_size=64,num_attention_heads=2")
    assert neo.layer_types == ["full_attention"] * 2
    # A transformers model_type is a model name too: its default config, with the overrides.
    roberta = models.build_config("roberta:num_hidden_layers=1")
    assert (roberta.model_type, roberta.num_hidden_layers) == ("roberta", 1) and models.is_registered("roberta")
    # Defaults sit over a registered name's own fields and under the overrides; a default the config lacks is
    # skipped, not an error (pretraining passes the same defaults to every architecture).
    cfg = models.build_config("bert-tiny:pad_token_id=3", {"vocab_size": 500, "pad_token_id": 1})
    assert (cfg.vocab_size, cfg.pad_token_id) == (500, 3)
    avey = models.build_config("avey-b-tiny", {"vocab_size": 640, "nonexistent_token_id": 5})
    assert avey.vocab_size == 640 and not hasattr(avey, "nonexistent_token_id")


def test_default_special_ids_outside_a_smaller_vocabulary_are_unset():
    # ModernBERT's default ids (50281...) do not exist in a 4,096-token vocabulary: unset, not out of range (which
    # transformers warns about); ids that are given stay, and the default vocabulary keeps its ids.
    small = models.build_config("modernbert", {"vocab_size": 4096})
    ids = [getattr(small, k) for k in models.SPECIAL_ID_KEYS]
    assert ids == [None] * 5
    given = models.build_config("modernbert:vocab_size=4096,eos_token_id=3,sep_token_id=3")
    assert (given.eos_token_id, given.sep_token_id, given.bos_token_id) == (3, 3, None)
    assert models.build_config("modernbert").bos_token_id == 50281
    assert models.build_config("bert", {"vocab_size": 4096}).pad_token_id == 0  # inside: kept


def test_matched_width_is_the_closest_ffn_width():
    from transformers import AutoConfig

    avey = models.build_config("avey-b-tiny")
    target = models.masked_lm_parameters(avey)
    shape = {"vocab_size": avey.vocab_size, "pad_token_id": 0, "hidden_size": 32, "num_hidden_layers": 2,
             "num_attention_heads": 2}
    for arch in ("bert", "modernbert"):
        cfg = models.matched_width(arch, target, **shape)
        assert {k: cfg[k] for k in shape} == shape and cfg["intermediate_size"] % 32 == 0

        def size(inter, arch=arch):
            return models.masked_lm_parameters(AutoConfig.for_model(arch, **{**shape, "intermediate_size": inter}))

        best = abs(size(cfg["intermediate_size"]) - target)
        assert best <= abs(size(cfg["intermediate_size"] + 32) - target)
        if cfg["intermediate_size"] > 32:
            assert best <= abs(size(cfg["intermediate_size"] - 32) - target)


def test_help_works(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["bench", "run", "--help"])
    assert e.value.code == 0 and "--no-compressor" in capsys.readouterr().out
    json.dumps(options.PAPER_LENGTHS)


def _text_file(tmp_path):
    from avey_b import testing

    testing.tokenizer(str(tmp_path / "tok"))
    path = tmp_path / "text.txt"
    path.write_text("the cat sat on the mat . the dog sat on the cat .\n" * 3)
    return path


def test_text_ids_are_numbered_by_first_occurrence_and_fit_any_vocabulary(tmp_path):
    from avey_b import testing
    from avey_b.benchmarking.inputs import FIRST_ID, text_ids

    path = _text_file(tmp_path)
    text = text_ids([str(path)], str(tmp_path / "tok"))
    raw = testing.tokenizer(str(tmp_path / "tok2"))(path.read_text(), add_special_tokens=False)["input_ids"]
    ids = text.ids.tolist()
    assert len(ids) == len(raw) and len(raw) % 3 == 0
    # the same token gets the same id, another token another id, and ids are numbered by first occurrence
    assert all((ids[i] == ids[j]) == (raw[i] == raw[j]) for i in range(len(raw)) for j in range(len(raw)))
    assert [ids.index(k) for k in range(max(ids) + 1)] == sorted(ids.index(k) for k in range(max(ids) + 1))
    U = len(set(raw))
    assert max(ids) == U - 1 and f"{len(raw)} tokens, {U} distinct ids" in text.source
    L = len(raw) // 3  # one repetition of the line
    ids, mask, facts = text.batch(vocab_size=100, batch_size=2, length=L, device="cpu")
    assert ids.shape == mask.shape == (2, L) and bool(mask.all())
    assert ids[0].tolist() == ids[1].tolist() == (FIRST_ID + text.ids[:L]).tolist()  # consecutive stretches
    assert facts == {"distinct_ids": U, "cycled": False}
    # a small vocabulary wraps the ids into [FIRST_ID, V); a batch longer than the text cycles it, and says so
    ids, _, facts = text.batch(vocab_size=FIRST_ID + 3, batch_size=2, length=2 * L, device="cpu")
    assert int(ids.min()) >= FIRST_ID and int(ids.max()) < FIRST_ID + 3
    assert facts == {"distinct_ids": 3, "cycled": True}
    with pytest.raises(FileNotFoundError, match="missing.txt"):
        text_ids([str(tmp_path / "missing.txt")], str(tmp_path / "tok"))


@pytest.mark.slow
def test_run_on_real_text_records_its_ids(tmp_path):
    path = _text_file(tmp_path)
    out = _run(tmp_path, "--text", str(path), "--tokenizer", str(tmp_path / "tok"), "--flops-up-to", "40",
               models_=("avey-b-tiny",))
    recs = [r for r in results.read_records(str(out / "results.jsonl")) if r["status"] == "ok"]
    assert [r["seq_len"] for r in recs] == [16, 40, 600]
    for r in recs:
        total = int(r["ids"].split(": ")[1].split(" tokens")[0].replace(",", ""))
        assert r["ids"].startswith(str(tmp_path / "tok")) and r["distinct_ids"] <= 12
        assert r["cycled"] == (2 * r["seq_len"] > total)
        assert ("utilization" in r) == (r["seq_len"] <= 40)  # FLOPs counted only up to --flops-up-to


def test_authors_protocol_options_fill_only_what_was_left_at_the_library_defaults():
    """``--protocol authors``: their 29 lengths (128 ... 2,048, then every 4,096 to 98,304), batch 8, 3 + 3 calls,
    ids all ones, the release's Avey-B eager and with compiled layers, baselines at transformers' default attention;
    a flag given keeps its value."""
    assert len(options.AUTHORS_LENGTHS) == 29 and options.AUTHORS_LENGTHS[4:6] == [2048, 4096]
    assert options.AUTHORS_LENGTHS[-1] == 98304 and all(b - a == 4096 for a, b in zip(
        options.AUTHORS_LENGTHS[5:-1], options.AUTHORS_LENGTHS[6:], strict=True))
    mine = options.bench_options(options.BenchOptions(out="o", protocol="authors", lengths=[64], models=["x"]))
    assert (mine.lengths, mine.models, mine.batch_size, mine.warmup, mine.repeats, mine.ids, mine.attn,
            mine.modes) == ([64], ["x"], 8, 3, 3, "ones", ["default"], ["eager", "compile-layers"])
    assert options.bench_options(options.BenchOptions(out="o")) == options.BenchOptions(out="o")
    with pytest.raises(ValueError, match="--protocol must be one of"):
        options.BenchOptions(out="o", protocol="paper")


@pytest.mark.slow
def test_authors_protocol_times_compiled_layers_on_ones(tmp_path, monkeypatch):
    """The series of the protocol: Avey-B eager and with each layer's forward compiled (as the release's decorator),
    a baseline once, at its default attention (no compile-layers series); a compile-layers point runs on ids all
    ones with the mean of its 3 timed calls."""
    authors = options.bench_options(options.BenchOptions(out="o", protocol="authors",
                                                         models=["avey-b-tiny", "modernbert-tiny"]))
    assert list(efficiency._series(authors, ["float32"])) == [
        ("avey-b-tiny", None, "eager", "float32"), ("avey-b-tiny", None, "compile-layers", "float32"),
        ("modernbert-tiny", "default", "eager", "float32")]
    compiled = []
    real = torch.compile

    def spy(fn, **kw):
        compiled.append(fn)
        return real(fn, **kw)

    monkeypatch.setattr(efficiency.torch, "compile", spy)
    seen = []
    monkeypatch.setattr(efficiency, "measure",
                        lambda forward, **kw: (seen.append(kw), timing.measure(forward, **kw))[1])
    out = tmp_path / "a"
    # float32, not the protocol's bf16: on a CPU without native bf16 its GEMM reference and forward are emulated
    # (13 minutes for this test on such a CPU); the series and the compiled layers are what is checked
    bench("run", "--protocol", "authors", "--models", "avey-b-tiny", "--modes", "compile-layers", "--lengths", "16",
          "--batch-size", "2", "--flops-up-to", "1", "--compile-backend", "eager", "--device", "cpu",
          "--dtype", "float32", "--out", str(out))
    (r,) = results.read_records(str(out / "results.jsonl"))
    assert len(compiled) == models.build_config("avey-b-tiny").num_hidden_layers
    assert (r["mode"], r["status"], r["ids"], r["batch_size"], r["warmup"], r["repeats"]) == (
        "compile-layers", "ok", "ones", 2, 3, 3)
    assert math.isclose(results.latency_of(r, "mean"), sum(r["times_s"]) / 3)
    assert [(kw["warmup"], kw["repeats"]) for kw in seen] == [(3, 3)]
    (run,) = read_jsonl(str(out / "options.jsonl"))
    assert run["options"]["protocol"] == "authors" and run["options"]["lengths"] == [16]


def test_release_code_is_timed_beside_the_library_in_the_same_shape(tmp_path, reference_copy):
    """``--release-code DIR``: the authors' own ``modeling_avey.py`` from a copy the user points to, built in the
    shape of each Avey-B model (its AveyConfig from the spec's d, L, S, k, vocabulary) and timed as its own series
    ``release:MODEL``, beside this library's; a baseline gets none. Timing is not checked, only that it runs and
    records. The authors' dtype is the protocol's default: bf16 weights under bf16 autocast."""
    from avey_b.benchmarking import release_code

    directory = reference_copy("avey-b-release")
    out = tmp_path / "r"
    bench("run", "--release-code", str(directory), "--models", "avey-b-tiny", "bert-tiny", "--attn", "sdpa",
          "--lengths", "16", "--batch-size", "2", "--warmup", "0", "--repeats", "1", "--flops-up-to", "0",
          "--device", "cpu", "--dtype", "float32", "--out", str(out))
    recs = {r["model"]: r for r in results.read_records(str(out / "results.jsonl"))}
    assert set(recs) == {"avey-b-tiny", "release:avey-b-tiny", "bert-tiny"}
    mine = recs["release:avey-b-tiny"]
    assert (mine["status"], mine["mode"], mine["seq_len"], mine["dtype"]) == ("ok", "eager", 16, "float32")
    assert str(directory) in mine["code"] and "code" not in recs["avey-b-tiny"]
    model = release_code.release_model(directory, models.build_config("avey-b-tiny"), "eager")
    assert type(model).__module__ == "avey_release.modeling_avey" and mine["n_params"] == sum(
        p.numel() for p in model.parameters())
    config, ours = model.config, models.build_config("avey-b-tiny")
    assert (config.d_embed, config.n_layers, config.chunk_size, config.k, config.vocab_size) == (
        ours.hidden_size, ours.num_hidden_layers, ours.split_size, ours.num_retrieved_splits, ours.vocab_size)
    (run,) = read_jsonl(str(out / "options.jsonl"))
    assert run["options"]["release_code"] == str(directory)
    with pytest.raises(ValueError, match="no modeling_avey.py, configuration_avey.py there"):
        options.BenchOptions(out="o", release_code=str(tmp_path))
    assert options.bench_options(options.BenchOptions(out="o", protocol="authors")).dtype == ["bfloat16-autocast"]
