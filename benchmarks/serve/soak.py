"""A soak run of ``avey-b serve``: a mixed load on every route — valid requests and about 10% malformed ones — at a
bounded rate for a long time (30 minutes by default), with the server's memory (RSS) and each window's latency
percentiles recorded every 30 s. What it checks: no error that is not the client's (no 5xx but the queue's 503, no
dropped connection), memory flat, p99 stable.

    python benchmarks/serve/soak.py --minutes 30            # appends its windows and summary to soak.jsonl

Model: a tiny cross-encoder (``presets.tiny``, one label, seed 0, the toy WordPiece tokenizer of
``avey_b.testing``): it serves embeddings, classification and reranking; fill-mask answers 400 (a masked-LM
route), which is counted as the client's error it is. Server: ``avey-b serve MODEL --api-key KEY --threads 1
--precision fp32`` (default limits but ``--max-request-inputs 64``). Load: ``--clients`` threads (httpx, one
kept-alive connection each) share a rate of ``--rate`` requests a second (a token bucket); each request is drawn
(seeded) from the valid requests of every route (texts of 1 to ``--longest`` toy words, log-uniform; a tenth of the
requests are the next turn, of 1 to 100 words, of a conversation of 20 turns re-embedded whole at every turn, which
the prefix cache serves) or, with probability
``--malformed``, from the malformed ones (invalid JSON, a wrong type, an unknown field, no key, a wrong key, an empty
input, too many inputs, a token id outside the vocabulary, an unknown route, a wrong method). Each window line:
requests by outcome, the server's RSS (``VmRSS``) at its end, p50/p99 latency of the valid requests answered 200,
the load average. The machine is shared: the load average beside each window says how busy it was.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import signal
import statistics
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from run import serve  # this folder's one way to start a server

from avey_b.testing import served_model

HERE = Path(__file__).resolve().parent
KEY = "soak-key"
WORDS = ("the film was good and the plot was weak but the cast made it worth a second look on a rainy day "
         "where who what alice bob paris london river mountain story music").split()


def text(rng: random.Random, longest: int) -> str:
    n = max(1, int(math.exp(rng.uniform(0, math.log(longest)))))
    return " ".join(rng.choice(WORDS) for _ in range(n))


def valid(rng: random.Random, longest: int, conversation: list[str], sessions: dict[str, bool] | None = None,
          long_words: int = 0) -> tuple[str, str, object, int]:
    """(method, path, JSON body or None, the status expected). With ``sessions`` (this client's session ids ->
    whether each exists now, updated as if each request succeeds), a tenth of the requests work on one of them;
    with ``long_words``, one request in a hundred embeds a text of that many words (the state path's blocks)."""
    t = lambda: text(rng, longest)  # noqa: E731
    if sessions is not None and rng.random() < 0.1:
        name = rng.choice(sorted(sessions))
        if not sessions[name]:
            sessions[name] = True
            return "POST", "/v1/sessions", {"id": name, "text": t()}, 200
        if rng.random() < 0.05:
            sessions[name] = False
            return "DELETE", f"/v1/sessions/{name}", None, 200
        if rng.random() < 0.2:
            return "GET", f"/v1/sessions/{name}", None, 200
        return "POST", f"/v1/sessions/{name}/append", {"text": " " + text(rng, 100)}, 200
    if long_words and rng.random() < 0.01:
        return "POST", "/v1/embeddings", {"input": " ".join(rng.choice(WORDS) for _ in range(long_words))}, 200
    if rng.random() < 0.1:  # a conversation re-embedded at every turn (the prefix cache's case), 20 turns long
        if len(conversation) == 20:
            conversation.clear()
        conversation.append(text(rng, 100))
        return "POST", "/v1/embeddings", {"input": " ".join(conversation)}, 200
    return rng.choice([
        ("GET", "/health", None, 200), ("GET", "/metrics", None, 200), ("GET", "/v1/models", None, 200),
        ("GET", "/v1/models/soak", None, 200), ("GET", "/info", None, 200),
        ("POST", "/v1/embeddings", {"input": [t() for _ in range(rng.randint(1, 8))]}, 200),
        ("POST", "/v1/embeddings", {"input": t(), "encoding_format": "base64"}, 200),
        ("POST", "/v1/embeddings", {"input": t(), "chunk_tokens": rng.randint(1, 64)}, 200),
        ("POST", "/v1/classify", {"input": [t(), t()]}, 200),
        ("POST", "/v1/fill-mask", {"input": "a [MASK] film"}, 400),
        ("POST", "/v1/rerank", {"query": t(), "documents": [t() for _ in range(rng.randint(1, 8))]}, 200),
        ("POST", "/v2/rerank", {"query": t(), "documents": [{"text": t()}], "top_n": 1}, 200),
        ("POST", "/embed", {"inputs": [t() for _ in range(rng.randint(1, 8))], "truncate": True}, 200),
        ("POST", "/embed_all", {"inputs": t()}, 200),
        ("POST", "/predict", {"inputs": [t(), t()]}, 200),
        ("POST", "/rerank", {"query": t(), "texts": [t(), t()], "return_text": True}, 200),
        ("POST", "/tokenize", {"inputs": t()}, 200),
        ("POST", "/decode", {"ids": [[5, 6, 7], [8, 9]]}, 200),
        ("POST", "/", {"inputs": t()}, 200),
    ])


MALFORMED = [  # (method, path, raw body, headers override, the status expected)
    ("POST", "/v1/embeddings", b'{"input": ["a", ', None, 422),
    ("POST", "/embed", b'{"inputs": 42}', None, 422),
    ("POST", "/v1/embeddings", b'{"input": "a", "colour": "red"}', None, 422),
    ("POST", "/v1/embeddings", b'{"input": "a"}', {}, 401),
    ("POST", "/embed", b'{"inputs": "a"}', {"authorization": "Bearer wrong"}, 401),
    ("POST", "/v1/classify", b'{"input": ""}', None, 400),
    ("POST", "/embed", json.dumps({"inputs": ["a"] * 65}).encode(), None, 413),
    ("POST", "/embed", b'{"inputs": [1, 2, 99999999]}', None, 400),  # TEI reads ids as the model's: outside it
    ("POST", "/v1/nothing", b'{}', None, 404),
    ("PUT", "/embed", b'{"inputs": "a"}', None, 405),
    ("POST", "/rerank", b'{"query": "a", "texts": []}', None, 400),
    ("POST", "/decode", b'{"ids": "abc"}', None, 422),
]


def rss_mb(pid: int) -> float:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


class Bucket:
    """A token bucket: ``take()`` returns when the next request may be sent (``rate`` a second in all)."""

    def __init__(self, rate: float):
        self.interval, self.next, self.lock = 1 / rate, time.monotonic(), threading.Lock()

    def take(self) -> None:
        with self.lock:
            now = time.monotonic()
            self.next = max(self.next + self.interval, now)
            wait = self.next - now
        time.sleep(wait)


def client(url: str, seed: int, args, bucket: Bucket, stop: threading.Event, results: list) -> None:
    import httpx

    rng, conversation = random.Random(seed), []
    sessions = {f"soak-{seed}-{i}": False for i in range(5)} if args.sessions else None
    with httpx.Client(base_url=url, timeout=60, headers={"authorization": f"Bearer {KEY}"}) as http:
        while not stop.is_set():
            bucket.take()
            if rng.random() < args.malformed:
                method, path, raw, headers, want = rng.choice(MALFORMED)
                sent = {"content": raw, "headers": {"content-type": "application/json", **(headers or {})}}
                if headers == {}:
                    sent["headers"]["authorization"] = ""
                kind = "malformed"
            else:
                method, path, body, want = valid(rng, args.longest, conversation, sessions, args.long_words)
                sent, kind = ({"json": body} if body is not None else {}), "valid"
            started = time.monotonic()
            try:
                response = http.request(method, path, **sent)
                status, message = response.status_code, None
                if status >= 400:
                    message = (response.json().get("error") or {}).get("message") if response.content else None
            except Exception as error:  # noqa: BLE001 -- a dropped or reset connection is a finding
                status, message = None, f"{type(error).__name__}: {error}"
            results.append({"t": started, "kind": kind, "path": path, "want": want, "status": status,
                            "ms": (time.monotonic() - started) * 1000, "message": message})


def outcome(r: dict) -> str:
    if r["status"] is None:
        return "transport_error"
    if r["status"] == 503:
        return "busy_503"
    if r["status"] >= 500:
        return "server_error"
    if r["status"] != r["want"]:
        return "unexpected_status"
    if r["status"] >= 400 and not r["message"]:
        return "unnamed_4xx"
    return "ok_" + r["kind"]


def held_bytes(url: str, store: Path | None) -> dict[str, float]:
    """What the server says it holds (the prefix cache's and the warm sessions' bytes, and the cache's evictions so
    far, from /metrics) and the
    state store directory's bytes on disk."""
    import httpx

    text_ = httpx.get(url + "/metrics", headers={"authorization": f"Bearer {KEY}"}, timeout=30).text
    found = {line.split()[0]: float(line.split()[1]) for line in text_.splitlines()
             if line.startswith(("avey_b_prefix_cache_bytes", "avey_b_session_warm_bytes",
                                 "avey_b_prefix_cache_evictions_total"))}
    out = {"cache_mb": round(found.get("avey_b_prefix_cache_bytes", 0) / 2**20, 1),
           "cache_evictions": int(found.get("avey_b_prefix_cache_evictions_total", 0)),
           "sessions_mb": round(found.get("avey_b_session_warm_bytes", 0) / 2**20, 1)}
    if store is not None:
        out["store_mb"] = round(sum(f.stat().st_size for f in store.glob("*.session")) / 2**20, 1)
    return out


def window(records: list[dict], pid: int, started: float, index: int) -> dict:
    counts: dict[str, int] = {}
    for r in records:
        counts[outcome(r)] = counts.get(outcome(r), 0) + 1
    ms = sorted(r["ms"] for r in records if r["kind"] == "valid" and r["status"] == 200)
    q = statistics.quantiles(ms, n=100) if len(ms) >= 2 else [float("nan")] * 99
    odd = [f"{r['path']} {r['status']} {r['message']}" for r in records if not outcome(r).startswith("ok_")][:5]
    return {"window": index, "minute": round((time.monotonic() - started) / 60, 2), "requests": len(records),
            "outcomes": counts, "rss_mb": round(rss_mb(pid), 1), "p50_ms": round(q[49], 2),
            "p99_ms": round(q[98], 2), "loadavg": open("/proc/loadavg").read().split()[:3], "examples": odd}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=30)
    parser.add_argument("--rate", type=float, default=20, help="requests a second, all clients together")
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--malformed", type=float, default=0.1)
    parser.add_argument("--longest", type=int, default=1000, help="the longest text, in words")
    parser.add_argument("--window-s", type=float, default=30)
    parser.add_argument("--sessions", action="store_true",
                        help="a tenth of each client's requests make, append to, read and delete its 5 sessions, kept "
                             "in a --state-store directory")
    parser.add_argument("--long-words", type=int, default=0, help="one request in a hundred embeds this many words")
    parser.add_argument("--prefix-cache-bytes", type=int, default=None,
                        help="the server's prefix-cache bound (default: its own): a small one is passed early, so "
                             "the run shows memory once the cache evicts as much as it adds")
    parser.add_argument("--out", default=str(HERE / "soak.jsonl"))
    args = parser.parse_args()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp) / "soak"
        served_model(str(directory), "cross-encoder")
        store = Path(tmp) / "states" if args.sessions else None
        extra = ["--state-store", str(store)] if store else []
        if args.prefix_cache_bytes is not None:
            extra += ["--prefix-cache-bytes", str(args.prefix_cache_bytes)]
        server, url = serve(directory, 1, "--api-key", KEY, "--threads", "1", "--precision", "fp32", "--log-level",
                            "warning", "--max-request-inputs", "64", *extra)
        results: list[dict] = []
        stop, bucket = threading.Event(), Bucket(args.rate)
        threads = [threading.Thread(target=client, args=(url, seed, args, bucket, stop, results), daemon=True)
                   for seed in range(args.clients)]
        started = time.monotonic()
        for thread in threads:
            thread.start()
        windows, taken = [], 0
        with open(args.out, "a") as out:
            head = {"run": "soak", "commit": commit, "minutes": args.minutes, "rate": args.rate,
                    "clients": args.clients, "malformed": args.malformed, "longest": args.longest,
                    "sessions": args.sessions, "long_words": args.long_words,
                    "prefix_cache_bytes": args.prefix_cache_bytes,
                    "rss_mb_start": round(rss_mb(server.pid), 1), "loadavg": open("/proc/loadavg").read().split()[:3]}
            print(json.dumps(head), file=out, flush=True)
            while time.monotonic() - started < args.minutes * 60:
                time.sleep(args.window_s)
                records, taken = results[taken:len(results)], len(results)
                windows.append({**window(records, server.pid, started, len(windows)), **held_bytes(url, store)})
                print(json.dumps(windows[-1]), file=out, flush=True)
            stop.set()
            for thread in threads:
                thread.join(60)
            server.send_signal(signal.SIGTERM)
            log, _ = server.communicate(timeout=120)
            totals: dict[str, int] = {}
            for w in windows:
                for k, v in w["outcomes"].items():
                    totals[k] = totals.get(k, 0) + v
            rss = [w["rss_mb"] for w in windows]
            p99 = [w["p99_ms"] for w in windows]
            half = len(windows) // 2
            summary = {"summary": True, "requests": len(results), "outcomes": totals, "rss_mb_first": rss[0],
                       "rss_mb_last": rss[-1], "rss_mb_max": max(rss),
                       "held_mb_first": {k: windows[0][k] for k in ("cache_mb", "sessions_mb", "store_mb")
                                         if k in windows[0]},
                       "held_mb_last": {k: windows[-1][k] for k in ("cache_mb", "sessions_mb", "store_mb")
                                        if k in windows[-1]},
                       "rss_mb_growth_second_half": round(rss[-1] - rss[half], 1) if windows else None,
                       "p99_ms_median_first_half": statistics.median(p99[:half] or p99),
                       "p99_ms_median_second_half": statistics.median(p99[half:]),
                       "server_exit": server.returncode, "server_log_tail": log[-1500:]}
            print(json.dumps(summary), file=out, flush=True)
            print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
