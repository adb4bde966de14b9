"""Load on ``avey-b serve``: requests/s and p50/p99 latency of ``POST /v1/embeddings`` on localhost, short and long
inputs, concurrency 1–32, and dynamic batching on vs off (each request alone), bounded in count and time.

    python benchmarks/serve/run.py --data ../shared/data            # appends to benchmarks/serve/results.jsonl

Model: the small config (d=256, L=8, S=64, k=3) as an embedding model with random weights (speed does not depend
on the weights) and a 8,192-token byte-level BPE fitted on the first 2,000 lines of WikiText-2 valid. Short inputs:
SST-2 sentences (about 10–30 tokens); long inputs: consecutive WikiText-2 passages of ``--long-tokens`` tokens.
Each setting starts its own server process (``avey-b serve``, as a user would) and is measured by a client
process with a thread pool; the server's threads are ``--threads``.
"""

import argparse
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from avey_b.utils.records import Envelope, append_jsonl

HERE = Path(__file__).resolve().parent


def build(directory: Path, data: Path, seed: int = 0) -> tuple[list[str], list[str]]:
    """Save the model and tokenizer into ``directory``; return (short texts, long-text source lines)."""
    import torch

    from avey_b import AveyBForSentenceEmbedding
    from avey_b.data.tokenization import train_bpe_tokenizer
    from avey_b.model import presets

    wiki = [line.strip() for line in open(data / "wikitext-2" / "valid.tokens.txt", encoding="utf-8") if line.strip()]
    tok = train_bpe_tokenizer(wiki[:2000], 8192)
    torch.manual_seed(seed)
    AveyBForSentenceEmbedding(presets.small(vocab_size=len(tok), pad_token_id=tok.pad_token_id)).save_pretrained(
        directory)
    tok.save_pretrained(directory)
    short = [line.split("\t")[0] for line in open(data / "sst2" / "train.tsv", encoding="utf-8")][1:2001]
    return short, wiki


def long_texts(tok, lines: list[str], tokens: int, count: int) -> list[str]:
    out, current, n = [], [], 0
    for line in lines:
        current.append(line)
        n += len(tok(line)["input_ids"])
        if n >= tokens:
            out.append(" ".join(current))
            current, n = [], 0
            if len(out) == count:
                break
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve(directory: Path, threads: int, *extra: str):
    """``avey-b serve DIRECTORY --port FREE *extra`` in a process of its own with ``threads`` OpenMP threads, once
    its ``/health`` answers: (process, url). The one way this folder's scripts start a server."""
    import httpx

    port = free_port()
    proc = subprocess.Popen([str(Path(sys.executable).with_name("avey-b")), "serve", str(directory),
                             "--port", str(port), *extra], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "OMP_NUM_THREADS": str(threads)})
    url = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                return proc, url
        except httpx.TransportError:
            time.sleep(0.2)
        if proc.poll() is not None:  # it stopped: say why now, not after the wait
            break
    proc.kill()
    raise RuntimeError(proc.stdout.read())


def load(url: str, texts: list[str], concurrency: int, requests: int, max_seconds: float) -> dict:
    import httpx

    client = httpx.Client(timeout=600)
    latencies, started = [], time.perf_counter()

    def one(i):
        if time.perf_counter() - started > max_seconds:
            return None
        t = time.perf_counter()
        r = client.post(url + "/v1/embeddings", json={"input": texts[i % len(texts)]})
        r.raise_for_status()
        return time.perf_counter() - t

    with ThreadPoolExecutor(concurrency) as pool:
        latencies = [x for x in pool.map(one, range(requests)) if x is not None]
    wall = time.perf_counter() - started
    q = statistics.quantiles(latencies, n=100) if len(latencies) >= 2 else latencies * 99
    return {"requests": len(latencies), "seconds": round(wall, 2), "requests_per_s": round(len(latencies) / wall, 2),
            "p50_ms": round(statistics.median(latencies) * 1000, 1), "p99_ms": round(q[98] * 1000, 1)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default="../shared/data", help="folder with wikitext-2/ and sst2/")
    p.add_argument("--concurrency", nargs="+", type=int, default=[1, 4, 16, 32])
    p.add_argument("--short-requests", type=int, default=256)
    p.add_argument("--long-requests", type=int, default=32)
    p.add_argument("--long-tokens", type=int, default=8192)
    p.add_argument("--max-seconds", type=float, default=60.0, help="per setting")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", default=str(HERE / "results.jsonl"))
    args = p.parse_args()
    from transformers import AutoTokenizer

    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        short, wiki = build(directory, Path(args.data))
        tok = AutoTokenizer.from_pretrained(directory)
        longs = long_texts(tok, wiki[2000:], args.long_tokens, 8)
        common = {"model": "small (d=256, L=8, S=64, k=3), random weights, embedding head",
                  "server_threads": args.threads,
                  "command": "python " + " ".join(sys.argv)}
        settings = [("batching", ()), ("batching, 5 ms wait", ("--batch-wait-ms", "5")),
                    ("each request alone", ("--max-batch-tokens", "1"))]
        for name, extra in settings:
            proc, url = serve(directory, args.threads, *extra)
            try:
                for kind, texts, n in (("short", short, args.short_requests), ("long", longs, args.long_requests)):
                    for c in args.concurrency:
                        load(url, texts, c, min(n, 2 * c), args.max_seconds)  # warm-up
                        tokens = statistics.mean(len(tok(t)["input_ids"]) for t in texts[:64])
                        env = Envelope.begin()
                        measured = load(url, texts, c, n, args.max_seconds)
                        rec = {**common, "setting": name, "inputs": kind, "mean_tokens": round(tokens),
                               "concurrency": c, **measured, **env.end()}
                        append_jsonl(args.out, rec, echo=True)
            finally:
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout=120)


if __name__ == "__main__":
    main()
