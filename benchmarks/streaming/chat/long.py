"""Short requests while a long one runs on ``avey-b serve``: p50/p99 latency of short embedding requests sent while
a ``--long-tokens`` request is being embedded, before (``--prefix-cache-bytes 0 --block-tokens 0``: the long input
runs as one forward, the path before the state path) and after (the defaults: the long input runs as a document
state a block at a time, and the batcher runs the short requests between its blocks).

    python benchmarks/streaming/chat/long.py --data ../shared/data --model /work/qs/model   # appends to long.jsonl

The long input: the first ``--long-tokens`` tokens of the project's real English text
(:func:`avey_b.benchmarking.english_text.english_text`), decoded back to text. Short inputs: SST-2 sentences (about
10-30 tokens). Each setting starts its own server; after warm-up, the long request is sent, and ``--lead`` seconds
later (the time to read and tokenize it) one short request every ``--interval`` seconds (open loop: none waits for
another) until the long one is answered; the queue holds them all (``--queue-size 100000``: with the default, 256,
the server refuses the short requests past it with 503 while a long input runs whole). Latency: from a short
request's send to its answer; the record also holds the long request's own time, the server's peak RSS (VmHWM)
and the short latency on the idle server. The settings alternate (before, after, before, ... ``--rounds`` of
each); the load average is recorded with each.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

import numpy as np
from common import Server, percentiles

from avey_b.benchmarking.english_text import english_text
from avey_b.utils.records import Envelope, append_jsonl

HERE = Path(__file__).resolve().parent
SETTINGS = {"before": ("--prefix-cache-bytes", "0", "--block-tokens", "0"), "after": ()}


async def post(client, url: str, text: str) -> tuple[float, np.ndarray | int]:
    """Seconds to the answer, and the vector (or the status of a refusal)."""
    t0 = time.perf_counter()
    r = await client.post(url + "/v1/embeddings", json={"input": text, "encoding_format": "float"})
    seconds = time.perf_counter() - t0
    return seconds, np.array(r.json()["data"][0]["embedding"]) if r.status_code == 200 else r.status_code


async def during(url: str, long_text: str, shorts: list[str], lead: float, interval: float) -> dict:
    import httpx

    async with httpx.AsyncClient(timeout=7200, limits=httpx.Limits(max_connections=None)) as client:
        idle = [(await post(client, url, s))[0] for s in shorts[:20]]
        long = asyncio.create_task(post(client, url, long_text))
        await asyncio.sleep(lead)
        sent = []
        while not long.done():
            sent.append(asyncio.create_task(post(client, url, shorts[len(sent) % len(shorts)])))
            await asyncio.sleep(interval)
        long_seconds, vector = await long
        answers = await asyncio.gather(*sent)
    latencies = [s for s, v in answers if not isinstance(v, int)]
    return {"long_seconds": round(long_seconds, 1), "short_refused": len(answers) - len(latencies),
            "short_latency": percentiles(latencies),
            "short_latency_idle": percentiles(idle), "vector": vector}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default="../shared/data", help="the shared data folder (english_text's sources)")
    p.add_argument("--model", required=True, help="a saved Avey-B with its tokenizer (e.g. the quickstart's)")
    p.add_argument("--long-tokens", type=int, default=200_000)
    p.add_argument("--lead", type=float, default=5.0, help="seconds between the long request and the first short")
    p.add_argument("--interval", type=float, default=0.5, help="seconds between two short requests")
    p.add_argument("--rounds", type=int, default=1, help="times each setting runs, alternated")
    p.add_argument("--threads", type=int, default=1, help="the server's --threads")
    p.add_argument("--out", default=str(HERE / "long.jsonl"))
    args = p.parse_args()

    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(args.model)
    data = Path(args.data)
    ids = tokenizer(english_text(data), add_special_tokens=False)["input_ids"][:args.long_tokens]
    long_text = tokenizer.decode(ids)
    shorts = [line.split("\t")[0] for line in (data / "sst2" / "train.tsv").read_text().splitlines()[1:2001]]
    vectors = {}
    for _ in range(args.rounds):
        for setting, extra in SETTINGS.items():
            server = Server(args.model, "--threads", str(args.threads), "--max-tokens", str(args.long_tokens + 5000),
                            "--queue-size", "100000", "--log-level", "warning", *extra)
            try:
                env = Envelope.begin()
                result = asyncio.run(during(server.url, long_text, shorts, args.lead, args.interval))
                vectors[setting] = result.pop("vector")
                record = {"benchmark": "short requests during a long one", "setting": setting, "model": args.model,
                          "long_tokens": args.long_tokens, "lead_s": args.lead, "interval_s": args.interval,
                          "threads": args.threads, "server": " ".join(server.command), "start_line": server.line,
                          **result, "peak_rss_mb": server.peak_rss_mb(),
                          "long_vector_max_abs_difference_to_before": float(np.abs(vectors[setting]
                                                                                   - vectors["before"]).max()),
                          "command": "python " + " ".join(sys.argv), **env.end()}
                append_jsonl(args.out, record, echo=True)
            finally:
                server.stop()


if __name__ == "__main__":
    main()
