"""The chat workload on ``avey-b serve``'s prefix cache: conversations that grow by about ``--turn-tokens`` tokens a
turn, each turn embedded whole through the openai SDK (as a chat application re-embeds its conversation), against a
server with the cache (the default) and one without it (``--prefix-cache-bytes 0 --block-tokens 0``: every input
one full forward, the path before the cache); tokens computed and p50/p99 latency of each.

    python benchmarks/streaming/chat/chat.py --data ../shared/data --model /work/qs/model   # appends to chat.jsonl

Conversations: ``--conversations`` passages of WikiText-2 valid, starting at evenly spaced places, tokenized with the
model's tokenizer; turn ``t`` is the passage's first ``t · turn_tokens`` tokens decoded back to text (the server
tokenizes it again, with its special tokens; a word cut at the turn's end may be tokenized otherwise the next
turn: the cache matches whole splits of equal ids only). The turns go round-robin over the conversations (turn 1 of
each, then turn 2, ...), one request at a time, each to both servers (which goes first alternates), so both see the
same machine load. Tokens computed: the cache's own count (``avey_b_prefix_cache_tokens_computed_total``, plus the
tokens of inputs shorter than a split, which it does not look up) against every token for the server without it.
Both servers' answers are compared (the largest difference of any vector element is recorded).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
from common import Server, percentiles

from avey_b.utils.records import Envelope, append_jsonl

HERE = Path(__file__).resolve().parent


def conversations(tokenizer, text: str, count: int, turn_tokens: int, longest: int) -> list[list[str]]:
    """``count`` conversations, each its turns' texts (``turn_tokens`` more tokens a turn, up to ``longest``)."""
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    stride = (len(ids) - longest) // max(1, count - 1)
    turns = range(turn_tokens, longest + 1, turn_tokens)
    return [[tokenizer.decode(ids[c * stride:c * stride + n]) for n in turns] for c in range(count)]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default="../shared/data", help="folder with wikitext-2/valid.tokens.txt")
    p.add_argument("--model", required=True, help="a saved Avey-B with its tokenizer (e.g. the quickstart's)")
    p.add_argument("--conversations", type=int, default=20)
    p.add_argument("--turn-tokens", type=int, default=100)
    p.add_argument("--longest", type=int, default=16_000, help="tokens of a conversation's last turn")
    p.add_argument("--threads", type=int, default=1, help="each server's --threads")
    p.add_argument("--out", default=str(HERE / "chat.jsonl"))
    args = p.parse_args()

    import openai
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(args.model)
    text = (Path(args.data) / "wikitext-2" / "valid.tokens.txt").read_text(encoding="utf-8")
    chats = conversations(tokenizer, text, args.conversations, args.turn_tokens, args.longest)
    common = ["--threads", str(args.threads), "--max-tokens", str(args.longest + 1000), "--log-level", "warning"]
    servers = {"cache": Server(args.model, *common), "no cache": Server(args.model, *common, "--prefix-cache-bytes",
                                                                         "0", "--block-tokens", "0")}
    try:
        clients = {k: openai.OpenAI(base_url=s.url + "/v1", api_key="unused", max_retries=0, timeout=3600)
                   for k, s in servers.items()}
        name = clients["cache"].models.list().data[0].id
        seconds = {k: [] for k in servers}
        tokens, short, differs, order = 0, 0, 0.0, list(servers)
        split = int(__import__("json").loads((Path(args.model) / "config.json").read_text())["split_size"])
        env = Envelope.begin()
        started = time.perf_counter()
        for turn in range(len(chats[0])):
            for chat in chats:
                vectors = {}
                for key in order:
                    t0 = time.perf_counter()
                    answer = clients[key].embeddings.create(model=name, input=chat[turn])
                    seconds[key].append(time.perf_counter() - t0)
                    vectors[key] = np.array(answer.data[0].embedding)
                n = answer.usage.prompt_tokens
                tokens += n
                short += n if n < split else 0
                differs = max(differs, float(np.abs(vectors["cache"] - vectors["no cache"]).max()))
                order.reverse()
            print(f"turn {turn + 1}/{len(chats[0])}: {time.perf_counter() - started:.0f} s", file=sys.stderr)
        cache = servers["cache"].metrics()
        computed = int(cache["avey_b_prefix_cache_tokens_computed_total"]) + short
        last = len(chats) * max(1, len(chats[0]) // 4)  # the last quarter of the turns: the longest inputs
        record = {
            "benchmark": "chat workload", "model": args.model, "conversations": len(chats),
            "turns_per_conversation": len(chats[0]), "turn_tokens": args.turn_tokens, "longest_tokens": args.longest,
            "requests_per_server": len(seconds["cache"]), "threads": args.threads,
            "servers": {k: " ".join(s.command) for k, s in servers.items()},
            "start_lines": {k: s.line for k, s in servers.items()},
            "tokens_sent": tokens, "tokens_computed": {"cache": computed, "no cache": tokens},
            "computed_fraction": round(computed / tokens, 4),
            "latency": {k: percentiles(v) for k, v in seconds.items()},
            "latency_last_quarter": {k: percentiles(v[-last:]) for k, v in seconds.items()},
            "seconds_total": {k: round(sum(v), 1) for k, v in seconds.items()},
            "cache_metrics": {k.removeprefix("avey_b_prefix_cache_"): v for k, v in cache.items()
                              if k.startswith("avey_b_prefix_cache_")},
            "peak_rss_mb": {k: s.peak_rss_mb() for k, s in servers.items()},
            "max_abs_difference": differs, "command": "python " + " ".join(sys.argv), **env.end()}
        append_jsonl(args.out, record, echo=True)
    finally:
        for server in servers.values():
            server.stop()


if __name__ == "__main__":
    main()
