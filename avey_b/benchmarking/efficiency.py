"""``avey-b bench``: latency (s/forward) and throughput (tokens/s) vs sequence length (paper §5.4).

Four steps, each after ``run`` reading its output:

``avey-b bench run``   time every (model, attention, mode, dtype, length) point; one JSON line per point
                       (stdout and ``OUT/results.jsonl``, appended and flushed, so ``--resume`` continues an
                       interrupted run), then ``OUT/results.csv``; ``OUT/options.jsonl`` records the options of
                       each invocation.
``avey-b bench fit``   least-squares power laws over a long-context range: ``T(N) ∝ N^-α`` (throughput) and
                       ``latency ∝ N^β``, per series, next to the paper's values (:mod:`.fit`).
``avey-b bench table`` markdown tables of throughput and latency per length ("—", "OOM", "skip" as such).
``avey-b bench plot``  log-log throughput and latency vs length (:mod:`.plot`).

The options of every step are declared once in :mod:`.options` (``run``'s: :class:`~.options.BenchOptions`, which
:func:`run_benchmark` takes). Every model goes through the same loop (:func:`run_point`): Avey-B from its presets
and any Hugging Face encoder built from its config with random weights (:mod:`avey_b.utils.model_spec`), under
``torch.no_grad``:

* ``--dtype``: ``float32``; ``bfloat16`` (weights and activations in bf16); ``autocast-bf16`` (fp32 weights,
  bf16 autocast, the paper's "mixed precision"); ``bfloat16-autocast`` (bf16 weights under bf16 autocast, the
  authors' scripts, ``--protocol authors``' default). Default: ``bfloat16`` on GPU, ``float32`` on CPU.
* ``--release-code DIR``: also time the authors' own ``modeling_avey.py`` (a copy the user points to) in the shape
  of each Avey-B model, as the series ``release:MODEL`` (:mod:`.release_code`), beside this library's.
* ``--modes``: ``eager`` and/or ``compile`` (``torch.compile``; dynamo is reset and the model recompiled
  for every length so no point falls back to eager after the recompile limit; the first warm-up call,
  which includes compilation, is recorded as ``first_call_s``).
* ``--attn``: attention implementations of the Transformer baselines (:mod:`.attention`): by default ``sdpa``,
  ``flex_attention`` and ``flash_attention_2``, so that Avey-B is compared with each baseline at its fastest;
  ``flex_attention``'s kernel is compiled for each length with static shapes (:func:`.attention.static_shapes`,
  its compile time in ``first_call_s``). One that cannot run here (FlashAttention-2 on a CPU or without
  flash-attn) is recorded as status ``unavailable`` with the reason. ``bench table`` adds a row per baseline
  with its fastest attention at each length. Avey-B has no attention: one series.
* ``--text FILE ...``: time on real text's token ids (cl100k_base by default, renumbered into each model's
  vocabulary; :mod:`.inputs`) instead of random ids, which have as many distinct ids as tokens and hide the ranker's
  vocabulary path. Every record names its ids (``ids``, ``distinct_ids``).
* ``--no-compressor``: also run every Avey-B model with ``compressor=False`` (the paper's ablation,
  4.37× slower), as a separate series.

A point that cannot run is data, not a crash: ``max_length`` (past a learned position table, shown
"—"), ``oom`` (out of memory; longer lengths of that series are then recorded as ``oom`` without
running, ``inferred: true``), ``skipped_time`` (``--max-latency`` exceeded at a shorter length),
``unavailable``. ``status == "ok"`` points carry ``latency_median_s``/``min``/``max`` over ``repeats``
timed calls (after ``warmup``), ``throughput_tok_s = batch·N / median latency``, peak memory
(see :mod:`.timing` for how memory is measured on CPU and GPU), the forward's ``flops`` (matrix products,
FlopCounterMode) and its ``utilization``: FLOP/s at the fastest call over the rate of a same-dtype GEMM timed in
the same process right before and after the point (``gemm_flop_s``), so that figures from different runs or
machines are compared by utilization, not by raw time. Every timed point, and each invocation's line in
``OUT/options.jsonl``, carries its :class:`~avey_b.utils.records.Envelope` (machine, commit, versions, load average
before and after, time).

Example (the paper's GPU setting)::

    avey-b bench run --models avey-b-base modernbert-base neobert --attn sdpa flash_attention_2 \\
        --modes eager compile --batch-size 8 --out runs/bench-gpu
    avey-b bench fit runs/bench-gpu/results.jsonl --min-length 8192
    avey-b bench plot runs/bench-gpu/results.jsonl --out runs/bench-gpu
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import dataclasses
import io
import os
import statistics
import sys
from collections.abc import Iterable
from typing import Any

import torch

from avey_b import configs
from avey_b.utils.counting import count_flops, count_parameters
from avey_b.utils.device import autocast, is_oom, pick_device, runtime_line, set_cpu_threads
from avey_b.utils.model_spec import (
    build_config,
    is_avey_b,
    max_length,
    parse_spec,
    random_batch,
    random_model,
)
from avey_b.utils.progress import Progress
from avey_b.utils.records import Envelope, append_jsonl, length_table, utc_timestamp, write_text_atomic

from .attention import is_compiled, static_shapes, unavailable_reason
from .fit import fit_table_from_file
from .inputs import TextIds, text_ids
from .options import DTYPES, BenchOptions, FitOptions, PlotOptions, TableOptions, bench_options
from .plot import plot_results
from .release_code import RELEASE_PREFIX, release_model
from .results import latency_of, point_key, read_records, series_key, throughput_of
from .timing import gemm_rate, measure

CSV_FIELDS = [
    "model",
    "attn",
    "mode",
    "dtype",
    "device",
    "batch_size",
    "seq_len",
    "status",
    "inferred",
    "latency_median_s",
    "latency_min_s",
    "latency_max_s",
    "throughput_tok_s",
    "repeats",
    "warmup",
    "first_call_s",
    "peak_mem_bytes",
    "peak_mem_delta_bytes",
    "mem_method",
    "flops",
    "utilization",
    "n_params",
    "threads",
    "error",
]


def _dtype_setup(dtype: str, device: torch.device):
    """(weight dtype, autocast context factory) for a ``--dtype`` choice."""
    if dtype == "float32":
        return torch.float32, contextlib.nullcontext
    if dtype == "bfloat16":
        return torch.bfloat16, contextlib.nullcontext
    if dtype == "autocast-bf16":
        return torch.float32, lambda: autocast(device)
    if dtype == "bfloat16-autocast":  # the authors' scripts: bf16 weights under bf16 autocast
        return torch.bfloat16, lambda: autocast(device)
    raise ValueError(f"--dtype {dtype!r} is not one of {DTYPES}")


def run_point(model, config, *, length: int, options: BenchOptions, device: torch.device, autocast,
              flop_model=None, gemm_dtype: torch.dtype | None = None, text: TextIds | None = None) -> dict[str, Any]:
    """Time ``model`` on a batch of ``options.batch_size`` sequences of ``length`` tokens (``options.warmup``,
    ``repeats``, ``max_point_seconds``, ``seed`` of the ids). Returns the measured fields (raises on OOM / errors).

    With ``flop_model`` (the eager model behind a compiled one, or the model itself) the forward's FLOPs are
    counted once (up to ``options.flops_up_to``) and its utilization is reported against a ``gemm_dtype`` GEMM timed
    right before and after the point, in this process. ``text``: real-text ids instead of random ones."""
    batch_size = options.batch_size
    if text is None and options.ids == "ones":  # the authors' scripts: torch.ones ids, no mask
        ids = torch.ones(batch_size, length, dtype=torch.long, device=device)
        mask, facts = torch.ones_like(ids), {"ids": "ones"}
    elif text is None:
        ids, mask = random_batch(config, batch_size, length, device, seed=options.seed)
        facts = {"ids": f"random (seed {options.seed})"}
    else:
        ids, mask, facts = text.batch(config.vocab_size, batch_size, length, device)
        facts = {"ids": text.source, **facts}

    def forward(m=model):
        with torch.no_grad(), autocast():
            return m(input_ids=ids, attention_mask=mask)

    g0 = gemm_rate(gemm_dtype, device=device) if gemm_dtype is not None else None
    t = measure(forward, device=device, warmup=options.warmup, repeats=options.repeats,
                max_seconds=options.max_point_seconds)
    extra: dict[str, Any] = {}
    if gemm_dtype is not None:
        g = (g0 + gemm_rate(gemm_dtype, device=device)) / 2
        extra = {"gemm_flop_s": g}
        counted = flop_model or model
        # FlopCounterMode cannot run flex_attention's operator (a higher-order op outside torch.compile): such points
        # carry no FLOP count, as points past --flops-up-to do not.
        flex = getattr(getattr(counted, "config", None), "_attn_implementation", None) == "flex_attention"
        if not flex and (options.flops_up_to is None or length <= options.flops_up_to):
            flops = count_flops(lambda: forward(counted))
            extra.update(flops=flops, utilization=flops / t.min_s / g)
    return {**extra, **facts,
        "status": "ok",
        "latency_median_s": t.median_s,
        "latency_min_s": t.min_s,
        "latency_max_s": t.max_s,
        "latency_mean_s": statistics.fmean(t.times_s),
        "throughput_tok_s": batch_size * length / t.median_s,
        "repeats": len(t.times_s),
        "warmup": options.warmup,
        "first_call_s": t.first_call_s,
        "times_s": t.times_s,
        "cpu_median_s": statistics.median(t.cpu_times_s),
        "cpu_min_s": min(t.cpu_times_s),
        "cpu_times_s": t.cpu_times_s,
        "peak_mem_bytes": t.peak_mem_bytes,
        "peak_mem_delta_bytes": t.peak_mem_delta_bytes,
        "mem_method": t.mem_method,
    }


def _series(options: BenchOptions, dtypes: list[str]) -> Iterable[tuple[str, str | None, str, str]]:
    """(model spec, attn, mode, dtype) for every requested series, in run order."""
    specs = list(options.models)
    if options.no_compressor:
        for s in options.models:
            if s.startswith("avey-b") or "avey" in s:
                specs.append(s + (":" if ":" not in s else ",") + "compressor=False")
    for spec in specs:
        config = build_config(spec)
        attns = [None] if is_avey_b(config) else options.attn
        for dtype in dtypes:
            for mode in options.modes:
                if mode == "compile-layers" and not is_avey_b(config):
                    continue  # the release compiles Avey-B's layers; a baseline has no such series
                for attn in attns:
                    yield spec, attn, mode, dtype
                if options.release_code and is_avey_b(config):  # the authors' own code in this model's shape
                    yield RELEASE_PREFIX + spec, None, mode, dtype


#: Statuses that a ``--resume`` run keeps; skipped and inferred-OOM points are tried again (e.g. with a
#: larger ``--max-latency``), and the newer record then supersedes the older one.
FINAL_STATUSES = ("ok", "max_length", "unavailable")


def _done_keys(path: str) -> set[tuple]:
    if not os.path.exists(path):
        return set()
    return {
        point_key(r) for r in read_records(path) if r["status"] in FINAL_STATUSES and not r.get("inferred")
    }


def run_benchmark(options: BenchOptions) -> list[dict[str, Any]]:
    """``bench run``: every point of every series (module docstring), one JSON line each in ``OUT/results.jsonl``,
    then ``results.csv`` and the throughput table of the whole results file; ``OUT/options.jsonl`` gets one line per
    invocation (the options, the environment). Returns the records of this invocation."""
    device = pick_device(options.device)
    set_cpu_threads(options.threads)
    print(runtime_line(device, ", ".join(options.dtype or (["bfloat16"] if device.type == "cuda" else ["float32"])),
                       options.threads), file=sys.stderr, flush=True)
    dtypes = options.dtype or (["bfloat16"] if device.type == "cuda" else ["float32"])
    for d in dtypes:
        _dtype_setup(d, device)  # validate early
    lengths = sorted(set(options.lengths))
    text = None
    if options.text:
        text = text_ids(options.text, options.tokenizer)
        print(f"ids: {text.source}", file=sys.stderr)
    os.makedirs(options.out, exist_ok=True)
    jsonl = os.path.join(options.out, "results.jsonl")
    if not options.resume and os.path.exists(jsonl):
        raise FileExistsError(f"{jsonl} exists: pass --resume to continue it or choose another --out")
    done = _done_keys(jsonl) if options.resume else set()
    env = {"device": device.type, "threads": torch.get_num_threads()}
    append_jsonl(os.path.join(options.out, "options.jsonl"),  # the invocation's envelope: its machine, commit, ...
                 {"options": dataclasses.asdict(options), "dtypes": dtypes, **env, **Envelope.begin().end()})
    records: list[dict[str, Any]] = []
    series = list(_series(options, dtypes))
    progress = Progress(len(series) * len(lengths), "bench", unit="point", every=0.0)

    def emit(rec: dict[str, Any]) -> None:
        records.append(_emit(jsonl, rec))
        progress.update()

    for spec, attn, mode, dtype in series:
        _run_series(spec, attn, mode, dtype, options, lengths=lengths, done=done, device=device, text=text,
                    env=env, emit=emit)
    progress.close()
    all_records = read_records(jsonl)
    write_csv(all_records, os.path.join(options.out, "results.csv"))
    print(format_table(all_records, stat="mean" if options.protocol == "authors" else "median"), file=sys.stderr)
    return records


def _run_series(spec_str: str, attn: str | None, mode: str, dtype: str, options: BenchOptions, *,
                lengths: list[int], done: set, device: torch.device, text: TextIds | None, env: dict[str, Any],
                emit) -> None:
    """The points of one series (model, attention, mode, dtype) that ``done`` lacks, shortest first: a length past
    the model's limit is ``max_length``; after an OOM or a latency over ``--max-latency``, the longer lengths are
    recorded as such without running (``inferred``)."""
    release = spec_str.startswith(RELEASE_PREFIX)
    spec = parse_spec(spec_str.removeprefix(RELEASE_PREFIX))
    config = build_config(spec)
    weight_dtype, autocast_ctx = _dtype_setup(dtype, device)
    limit = max_length(config)
    batch_size = options.batch_size
    label = RELEASE_PREFIX + spec.label if release else spec.label
    base = {"model": label, "attn": attn, "mode": mode, "dtype": dtype, "batch_size": batch_size, **env}
    if release:
        base["code"] = f"the release's modeling_avey.py ({options.release_code})"
    todo = [n for n in lengths if (label, attn, mode, dtype, batch_size, n) not in done]
    if not todo:
        return
    reason = unavailable_reason(attn, device) if attn else None
    try:
        if reason is None:
            model = _series_model(config, attn, mode, options, release).to(device=device, dtype=weight_dtype)
    except (ValueError, ImportError) as e:  # the model class does not support this attention implementation
        reason = str(e)
    if reason is not None:
        for n in todo:
            emit({**base, "seq_len": n, "status": "unavailable", "error": reason[:300]})
        return
    n_params = count_parameters(model)
    stop: tuple[str, str] | None = None  # (status, reason) for the remaining lengths
    for n in todo:
        rec = {**base, "seq_len": n, "n_params": n_params}
        if limit is not None and n > limit:
            emit({**rec, "status": "max_length", "error": f"max length {limit}"})
            continue
        if stop is not None:
            emit({**rec, "status": stop[0], "inferred": True, "error": stop[1]})
            continue
        envelope = Envelope.begin()
        rec.update(_time_length(model, config, n, mode, dtype, options, device=device, text=text,
                                autocast_ctx=autocast_ctx, attn=attn), **envelope.end())
        if rec["status"] == "oom":
            stop = ("oom", f"OOM at length {n}")
        emit(rec)
        if rec["status"] == "ok" and options.max_latency and rec["latency_median_s"] > options.max_latency:
            stop = ("skipped_time", f"latency {rec['latency_median_s']:.2f}s > --max-latency at length {n}")


def _series_model(config, attn: str | None, mode: str, options: BenchOptions, release: bool) -> torch.nn.Module:
    """The random-weight model of a series: this library's (``compile-layers``: each layer's forward compiled, as
    the release's ``@torch.compile`` does, torch's defaults) or, for ``release``, the release's own code in
    ``config``'s shape (:func:`.release_code.release_model`, which compiles its layers itself)."""
    if release:
        return release_model(options.release_code, config, mode)
    model = random_model(config, attn_implementation=None if attn == "default" else attn)
    if mode == "compile-layers":
        for layer in model.layers:
            layer.forward = torch.compile(layer.forward, backend=options.compile_backend)
    return model


def _time_length(model, config, n: int, mode: str, dtype: str, options: BenchOptions, *, device: torch.device,
                 text: TextIds | None, autocast_ctx, attn: str | None = None) -> dict[str, Any]:
    """:func:`run_point` at length ``n``, compiled for it with static shapes under ``--modes compile`` or with a
    compiled attention kernel (``flex_attention``); out of memory is recorded as status ``oom``, any other error is
    raised."""
    compiled = mode == "compile" or is_compiled(attn)  # compile-layers: compiled once, as the release
    fwd = model
    with static_shapes() if compiled else contextlib.nullcontext():
        if mode == "compile":
            fwd = torch.compile(model, backend=options.compile_backend, dynamic=False)
        try:
            return run_point(fwd, config, length=n, options=options, device=device, autocast=autocast_ctx,
                             flop_model=model, gemm_dtype=torch.float32 if dtype == "float32" else torch.bfloat16,
                             text=text)
        except Exception as e:  # OOM is data; anything else is a bug and is re-raised
            if not is_oom(e):
                raise
            return {"status": "oom", "error": str(e).splitlines()[0][:300]}
        finally:
            del fwd
            if device.type == "cuda":
                torch.cuda.empty_cache()


def _emit(path: str, rec: dict[str, Any]) -> dict[str, Any]:
    rec.setdefault("time", utc_timestamp())
    append_jsonl(path, rec, echo=True)
    return rec


def write_csv(records: list[dict[str, Any]], path: str) -> None:
    out = io.StringIO()
    w = csv.DictWriter(out, fieldnames=CSV_FIELDS, extrasaction="ignore")
    w.writeheader()
    for r in records:
        w.writerow({k: ("" if r.get(k) is None else r.get(k)) for k in CSV_FIELDS})
    write_text_atomic(path, out.getvalue())


def cell(rec: dict[str, Any] | None, what: str = "throughput", stat: str = "median") -> str:
    """How a point reads in a table: the number, "—" past the max length, "OOM", or a short status."""
    if rec is None:
        return ""
    status = rec["status"]
    if status == "ok":
        if what == "latency":
            return f"{latency_of(rec, stat):.4g}"
        return f"{throughput_of(rec, stat):,.0f}"
    return {"max_length": "—", "oom": "OOM", "skipped_time": "skip", "unavailable": "n/a"}.get(status, status)


def fastest_attention(records: list[dict[str, Any]], stat: str = "median") -> dict[tuple, dict[int, dict]]:
    """Each Transformer baseline's fastest attention at each length: ``{(model, mode, dtype, batch): {length:
    record}}`` over the ``ok`` points of its attention series, for the baselines timed with more than one."""
    groups: dict[tuple, dict[int, list[dict]]] = {}
    for r in records:
        if r.get("attn") and r["status"] == "ok":
            key = (r["model"], r["mode"], r["dtype"], r["batch_size"])
            groups.setdefault(key, {}).setdefault(r["seq_len"], []).append(r)
    out = {}
    for key, by_length in groups.items():
        if len({r["attn"] for recs in by_length.values() for r in recs}) > 1:
            out[key] = {n: min(recs, key=lambda r: latency_of(r, stat)) for n, recs in by_length.items()}
    return out


def format_table(records: list[dict[str, Any]], what: str = "throughput", stat: str = "median") -> str:
    """Markdown table: one row per series, one column per length (``what``: throughput or latency), then, for each
    baseline timed with several attention implementations, a row of its fastest one at each length (the cell names
    it: ``1,234 (flex_attention)``)."""
    if what not in ("throughput", "latency"):
        raise ValueError(f"what must be 'throughput' or 'latency', got {what!r}")
    rows: dict[str, dict[int, str]] = {}
    for r in records:
        rows.setdefault(series_key(r), {})[r["seq_len"]] = cell(r, what, stat)
    for (model, mode, dtype, _), best in fastest_attention(records, stat).items():
        rows[f"{model} [{mode}, fastest attention, {dtype}]"] = {
            n: f"{cell(r, what, stat)} ({r['attn']})" for n, r in best.items()}
    unit = "CPU-s" if stat == "cpu" else "s"
    title = (
        f"throughput (tokens/{unit}, {stat})" if what == "throughput" else f"latency ({unit}/forward, {stat})"
    )
    return length_table([title], [([key], cells) for key, cells in rows.items()])


def run(args: argparse.Namespace) -> int:
    """The runner of ``avey-b bench`` (:mod:`avey_b.cli`; its options: :mod:`.options`)."""
    if args.command == "run":
        run_benchmark(bench_options(configs.from_args(BenchOptions, args)))
    elif args.command == "fit":
        o = configs.from_args(FitOptions, args)
        _print(fit_table_from_file(args.results, min_length=o.min_length, max_length=o.max_length, stat=o.stat),
               o.out)
    elif args.command == "table":
        o = configs.from_args(TableOptions, args)
        records = read_records(args.results)
        _print(format_table(records, "throughput", o.stat) + "\n\n" + format_table(records, "latency", o.stat), o.out)
    elif args.command == "plot":
        o = configs.from_args(PlotOptions, args)
        for path in plot_results(args.results, o.out, title=o.title, stat=o.stat):
            print(path)
    return 0


def _print(text: str, out: str | None) -> None:
    """``text`` on stdout and, with ``out``, in that file."""
    print(text)
    if out:
        write_text_atomic(out, text + "\n")
