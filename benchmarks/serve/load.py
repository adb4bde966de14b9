"""A recorded load on ``avey-b serve``: 8 concurrent clients send 200 requests of 1–20K tokens of real text to
``POST /v1/embeddings``; latency percentiles, tokens/s, errors and the server's peak memory, for the eager and the
int8 ONNX runtime at 1 and 2 threads; then SIGTERM in the middle of a load: what happens to the requests in flight
and to the new ones.

    python benchmarks/serve/load.py --data ../shared/data          # appends to benchmarks/serve/load.jsonl

Model: as ``int8.py`` (the ``small`` preset, random weights, seed 0, the 8,192-token BPE of ``run.py``, exported
with ``--head embedding --quantize int8``). Requests: lengths drawn log-uniformly from 1 to 20,000 tokens (seeded;
every setting sends the same 200 requests in the same order), each a passage of WikiText-2 valid cut at that many
of the model's tokens and decoded back to text (the server tokenizes it again: ``usage.prompt_tokens`` is what is
counted). Each setting starts its own server (``avey-b serve MODEL --threads T [--onnx FILE]``, default batching),
sends 8 warm-up requests, then the load: 8 client threads (httpx) take the next request as soon as their last one is
answered. tokens/s: the tokens of the answered requests over the wall time of the load. Peak RSS: the server
process's ``VmHWM`` (the kernel's high-water mark of its resident memory) after the load. ``--max-seconds`` stops
sending new requests in a setting (the record says how many were sent).

SIGTERM mid-load (eager, 1 thread): a load of ``--drain-requests`` requests; when a quarter of them are answered,
the server gets SIGTERM; every request then in flight and every request sent afterwards is recorded with its
outcome (answered 200, another status, refused connection, connection dropped), with the server's exit code and
how long it took to exit.

The settings run one after another (each its own server), not alternated: the load average before and after each is
recorded, and the machine is shared with other engineers' jobs, so figures minutes apart move with their load.
"""

from __future__ import annotations

import argparse
import math
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent


def make_requests(tok, text: str, count: int, longest: int, seed: int = 0) -> list[str]:
    """``count`` passages of ``text`` of log-uniform lengths in [1, ``longest``] tokens, as text."""
    ids = tok(text, add_special_tokens=False)["input_ids"]
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        n = max(1, int(math.exp(rng.uniform(0, math.log(longest)))))
        start = rng.randrange(0, len(ids) - n)
        out.append(tok.decode(ids[start:start + n]))
    return out


def peak_rss_mb(pid: int) -> float | None:
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def start_server(directory: Path, threads: int, onnx: str | None, port: int):
    import httpx

    command = [str(Path(sys.executable).with_name("avey-b")), "serve", str(directory), "--port", str(port),
               "--threads", str(threads)] + (["--onnx", onnx] if onnx else [])
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    for _ in range(1200):
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return proc, url, " ".join(command[1:])
        except httpx.TransportError:
            time.sleep(0.25)
        if proc.poll() is not None:
            break
    proc.kill()
    raise RuntimeError(proc.stdout.read())


def send(client, url: str, text: str) -> dict:
    """One request: its outcome (``200``, another status, ``refused``, ``dropped``), seconds and tokens."""
    import httpx

    t0 = time.perf_counter()
    try:
        r = client.post(url + "/v1/embeddings", json={"input": text})
        outcome = str(r.status_code)
        tokens = r.json()["usage"]["prompt_tokens"] if r.status_code == 200 else 0
    except httpx.ConnectError:
        outcome, tokens = "refused", 0
    except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError):
        outcome, tokens = "dropped", 0
    return {"outcome": outcome, "seconds": time.perf_counter() - t0, "tokens": tokens, "start": t0}


def load(url: str, texts: list[str], clients: int, max_seconds: float, on_answer=None) -> tuple[list[dict], float]:
    """Send ``texts`` from ``clients`` threads, each taking the next text when its last request is answered."""
    import httpx

    results: list[dict] = []
    lock, position, started = threading.Lock(), [0], time.perf_counter()

    def client_loop():
        with httpx.Client(timeout=900) as client:
            while True:
                with lock:
                    i = position[0]
                    if i >= len(texts) or time.perf_counter() - started > max_seconds:
                        return
                    position[0] += 1
                result = send(client, url, texts[i]) | {"index": i}
                with lock:
                    results.append(result)
                    if on_answer is not None:
                        on_answer(results)

    with ThreadPoolExecutor(clients) as pool:
        for f in [pool.submit(client_loop) for _ in range(clients)]:
            f.result()
    return results, time.perf_counter() - started


def summary(results: list[dict], wall: float) -> dict:
    ok = [r for r in results if r["outcome"] == "200"]
    latencies = sorted(r["seconds"] for r in ok)
    q = statistics.quantiles(latencies, n=100, method="inclusive") if len(latencies) >= 2 else latencies * 99
    errors: dict[str, int] = {}
    for r in results:
        if r["outcome"] != "200":
            errors[r["outcome"]] = errors.get(r["outcome"], 0) + 1
    tokens = sum(r["tokens"] for r in ok)
    return {"requests_sent": len(results), "answered": len(ok), "errors": errors, "tokens": tokens,
            "seconds": round(wall, 1), "tokens_per_s": round(tokens / wall), "p50_s": round(q[49], 3),
            "p90_s": round(q[89], 3), "p99_s": round(q[98], 3), "max_s": round(latencies[-1], 3) if ok else None}


def drain(directory: Path, texts: list[str], clients: int, port: int) -> dict:
    """SIGTERM when a quarter of ``texts`` are answered; each request's outcome relative to the signal."""
    proc, url, command = start_server(directory, 1, None, port)
    signalled: dict = {}

    def on_answer(results):
        if not signalled and len(results) >= len(texts) // 4:
            signalled["at"] = time.perf_counter()
            proc.send_signal(signal.SIGTERM)

    results, wall = load(url, texts, clients, 1e9, on_answer)
    code = proc.wait(timeout=600)
    exited = time.perf_counter()
    output = proc.stdout.read()
    at = signalled["at"]
    in_flight = [r for r in results if r["start"] < at < r["start"] + r["seconds"]]
    after = [r for r in results if r["start"] >= at]

    def outcomes(rs):
        out: dict[str, int] = {}
        for r in rs:
            out[r["outcome"]] = out.get(r["outcome"], 0) + 1
        return out

    return {"setting": "SIGTERM mid-load", "server": command, "drain_requests": len(texts),
            "answered_before_signal": sum(1 for r in results if r["start"] + r["seconds"] <= at),
            "in_flight_at_signal": len(in_flight), "in_flight_outcomes": outcomes(in_flight),
            "sent_after_signal": len(after), "after_signal_outcomes": outcomes(after),
            "server_exit_code": code, "server_exit_s_after_signal": round(exited - at, 2),
            "last_in_flight_answer_s_after_signal": round(max((r["start"] + r["seconds"] - at for r in in_flight),
                                                              default=0.0), 2),
            "server_said_shut_down": "avey-b serve: shut down" in output, "load_wall_s": round(wall, 1)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default="../shared/data", help="folder with wikitext-2/ and sst2/")
    p.add_argument("--requests", type=int, default=200)
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--longest", type=int, default=20_000, help="longest request, tokens")
    p.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    p.add_argument("--runtimes", nargs="+", default=["eager", "int8"], choices=["eager", "onnx", "int8"])
    p.add_argument("--max-seconds", type=float, default=150.0, help="per setting: no new request after it")
    p.add_argument("--drain-requests", type=int, default=48, help="0: no SIGTERM run")
    p.add_argument("--workdir", help="the model and its ONNX files (made there when missing; int8.py's --workdir)")
    p.add_argument("--out", default=str(HERE / "load.jsonl"))
    args = p.parse_args()

    from run import build

    from avey_b.apps.export import export
    from avey_b.apps.export_options import ExportOptions

    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(args.workdir or tmp)
        if not (directory / "onnx" / "model.int8.onnx").is_file():
            build(directory, Path(args.data))
            export(str(directory), str(directory), ExportOptions(head="embedding", quantize="int8"))
        run_settings(args, directory)


def run_settings(args, directory: Path) -> None:
    """Every setting of ``args`` on the model in ``directory``, then the SIGTERM run; one JSON line each."""
    from run import free_port
    from transformers import AutoTokenizer

    from avey_b.utils.records import Envelope, append_jsonl

    tok = AutoTokenizer.from_pretrained(directory)
    text = (Path(args.data) / "wikitext-2" / "valid.tokens.txt").read_text(encoding="utf-8")
    texts = make_requests(tok, text, args.requests, args.longest)
    warm = make_requests(tok, text, 8, 2000, seed=1)
    onnx = {"eager": None, "onnx": str(directory / "onnx" / "model.onnx"),
            "int8": str(directory / "onnx" / "model.int8.onnx")}
    common = {"model": "small (d=256, L=8, S=64, k=3), random weights (seed 0), embedding head, BPE 8,192",
              "requests": f"{args.requests} of 1-{args.longest:,} tokens (log-uniform, seed 0), WikiText-2 valid",
              "clients": args.clients,
              "command": "python " + " ".join(sys.argv)}
    for runtime in args.runtimes:
        for threads in args.threads:
            proc, url, command = start_server(directory, threads, onnx[runtime], free_port())
            try:
                load(url, warm, args.clients, 1e9)
                env = Envelope.begin()
                results, wall = load(url, texts, args.clients, args.max_seconds)
                rec = {**common, "runtime": runtime, "threads": threads, "server": command,
                       **summary(results, wall), "peak_rss_mb": round(peak_rss_mb(proc.pid) or 0), **env.end()}
                append_jsonl(args.out, rec, echo=True)
            finally:
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout=600)
    if args.drain_requests:
        env = Envelope.begin()
        rec = {**common, **drain(directory, texts[: args.drain_requests], args.clients, free_port()), **env.end()}
        append_jsonl(args.out, rec, echo=True)


if __name__ == "__main__":
    main()
