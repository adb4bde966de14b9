"""The sides (``run.py``'s docstring): each side's whole job in a process of its own (``run.py --side NAME``), run
in turns by the parent, which samples the RSS of each side's process tree and compares their vectors."""

from __future__ import annotations

import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import threading
from pathlib import Path

HERE = Path(__file__).resolve().parent
SIDES = ("local", "st", "ray")


def gemm(dtype_name: str) -> float:
    """GFLOP/s of a square GEMM in the side's dtype (fp32, or bf16 when the side runs under bf16 autocast)."""
    import torch

    from avey_b.benchmarking.timing import gemm_rate

    return round(gemm_rate(torch.bfloat16 if dtype_name == "bf16" else torch.float32) / 1e9, 1)


def side(args) -> None:
    """One side's whole job in this process (called as ``run.py --side NAME``); prints ``RESULT {json}``."""
    import torch

    from avey_b.benchmarking.timing import timed_call
    from avey_b.utils.device import use_bf16
    from avey_b.utils.records import Envelope

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
    env, g0 = Envelope.begin(), gemm(dtype)
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
           "gemm_gflop_s": [g0, gemm(dtype)], **extra, **env.end()}
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
    cmd = [sys.executable, str(HERE / "run.py"), "--side", name, "--workdir", args.workdir,
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
            print(f"# round {r}: {name} {rec['seconds']:.1f} s, "
                  f"tree peak {rec['tree_peak_rss_bytes'] / 2**20:.0f} MiB, "
                  f"load {rec['load_after']}", flush=True)
            runs[name].append(rec)
    ids = [json.loads(line)["id"] for line in open(facts["corpus"], encoding="utf-8")]
    ref = vectors_of(Path(args.workdir) / "out" / "local", ids) if "local" in args.sides else None
    summary = {}
    for name, recs in runs.items():
        seconds = [x["seconds"] for x in recs]
        summary[name] = {"median_s": statistics.median(seconds),
                         "docs_per_s": facts["documents"] / statistics.median(seconds),
                         "tokens_per_s": facts["tokens"] / statistics.median(seconds),
                         "peak_tree_rss_mib": max(x["tree_peak_rss_bytes"] for x in recs) / 2**20,
                         "ru_maxrss_mib": max(x["ru_maxrss_bytes"] for x in recs) / 2**20}
        if ref is not None and name != "local":
            got = vectors_of(Path(args.workdir) / "out" / name, ids)
            summary[name]["max_abs_diff_vs_local"] = float(np.abs(got - ref).max())
    # imports torch: only after the sides ran (see run_side)
    from avey_b.utils.records import Envelope, append_jsonl

    ratios = {f"{name}_over_local": [b["seconds"] / a["seconds"]
                                     for a, b in zip(runs["local"], runs[name], strict=True)]
              for name in args.sides if name != "local" and "local" in args.sides}
    append_jsonl(args.out, {**base, "section": "sides", "runs": runs, "summary": summary,
                            "time_ratios_per_round": ratios, **Envelope(**facts["envelope"]).end()}, echo=True)

