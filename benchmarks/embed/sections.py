"""The sections measured in one process, after the sides (``run.py``'s docstring): ``local`` against ``st``
alternated, the local backend's overhead over the model's forward, and late chunking against each chunk alone. Each
alternates by hand, swapping the order every round (``timing.alternate`` keeps one order), and times each whole job
with :func:`avey_b.benchmarking.timing.timed_call`."""

from __future__ import annotations

import json
import shutil
import statistics
from pathlib import Path

from sides import gemm


def in_process(args, facts: dict, base: dict) -> None:
    """``local`` against ``st`` in one process, in turns (same jobs as the sides: model loading included)."""
    import numpy as np
    import torch
    from sentence_transformers import SentenceTransformer

    from avey_b import LoadOptions
    from avey_b.apps.embed import EmbedOptions, embed_corpus
    from avey_b.benchmarking.timing import timed_call
    from avey_b.utils.device import autocast, use_bf16
    from avey_b.utils.records import Envelope, append_jsonl, load_average

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

    env, g0 = Envelope.begin(), gemm(dtype)
    times: dict[str, list[float]] = {"local": [], "st": []}
    for r in range(args.rounds):
        for name, fn in (("local", local), ("st", st)) if r % 2 == 0 else (("st", st), ("local", local)):
            seconds, _, _ = timed_call(fn)
            times[name].append(seconds)
            print(f"# in-process round {r}: {name} {seconds:.1f} s, load {load_average()}", flush=True)
    append_jsonl(args.out, {**base, "section": "in_process", "dtype": dtype, "seconds": times,
                            "st_batch_size": facts["st_batch_size"],
                            "st_over_local_per_round": [b / a for a, b in zip(times["local"], times["st"],
                                                                              strict=True)],
                            "gemm_gflop_s": [g0, gemm(dtype)], **env.end()}, echo=True)


def overhead(args, facts: dict, base: dict) -> None:
    """The local backend's per-shard work against the embedding head's forward on the same batches (docstring)."""
    import itertools
    import tempfile

    import torch

    from avey_b.apps.embed import Settings, encoder_for, read_documents, run_shard
    from avey_b.benchmarking.timing import timed_call
    from avey_b.utils.batching import pad_right, token_budget_batches
    from avey_b.utils.device import autocast
    from avey_b.utils.records import Envelope, append_jsonl

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
    env, g0 = Envelope.begin(), gemm(dtype)
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
                            "gemm_gflop_s": [g0, gemm(dtype)], **env.end()}, echo=True)


def late_vs_alone(args, facts: dict, base: dict, model_dir: str, weights: str, key: str) -> None:
    """Late chunking against each chunk embedded alone, alternated: time and the cosines (``run.py``'s docstring)."""
    import numpy as np
    import pyarrow.parquet as pq
    import torch

    from avey_b import LoadOptions
    from avey_b.apps.embed import EmbedOptions, embed_corpus
    from avey_b.benchmarking.timing import timed_call
    from avey_b.utils.device import use_bf16
    from avey_b.utils.records import Envelope, append_jsonl

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
    alone = lambda out: embed_corpus(  # noqa: E731
        model_dir, str(alone_corpus), out, EmbedOptions(id_column="id", **common))
    env, g0 = Envelope.begin(), gemm(dtype)
    times: dict[str, list[float]] = {"late": [], "alone": []}
    for r in range(args.late_rounds):
        for name, fn in (("late", late), ("alone", alone)) if r % 2 == 0 else (("alone", alone), ("late", late)):
            out = work / f"{name}-{r}"
            seconds, _, _ = timed_call(lambda fn=fn, out=out: fn(out))
            times[name].append(seconds)
    g1, _ = gemm(dtype), env.end()  # the load after the timed rounds, not after the cosines below
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
                            "cosine_late_vs_alone": stats(same),
                            "cosine_neighbour_chunks_alone": stats(neighbours_alone),
                            "cosine_neighbour_chunks_late": stats(neighbours_late), "gemm_gflop_s": [g0, g1],
                            **env.end()}, echo=True)
    shutil.rmtree(work)


