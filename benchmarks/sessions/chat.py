"""The chat workload three ways on ``avey-b serve``: conversations of WikiText-2 text growing by about
``--turn-tokens`` tokens a turn up to ``--longest`` tokens, each turn's vector asked for

* **through a session** (``POST /v1/sessions/{id}/append`` with the turn's new text only: the server re-tokenizes
  the tail and computes the new splits),
* **through the prefix cache** (``/v1/embeddings`` with the whole conversation each turn, as a chat application
  re-embeds it: the server tokenizes it all, finds the cached prefix by hashing its splits, computes the rest), and
* **whole** (``/v1/embeddings`` with the whole conversation to a server without the cache, ``--prefix-cache-bytes 0
  --block-tokens 0``: one full forward a turn), on the turns ``--whole-turns`` only (every turn would take hours);

tokens computed, bytes sent, p50/p99 latency per turn, and the latency by the conversation's length (is it flat?).

    python benchmarks/sessions/chat.py --data ../shared/data --model /work/qs/model   # appends to chat.jsonl

Conversations: ``--conversations`` passages of WikiText-2 valid starting at evenly spaced places; turn ``t`` ends at
the character where the passage's ``t · turn_tokens``-th token (the model's tokenizer) ends, so each turn's text
extends the last one's. Turns go round-robin over the conversations, one request at a time; at each turn the three
ways run in an order that rotates, on two server processes (sessions and the cache on one, whole on the other), so
they see the same machine load. Every session answer is compared with the cache's answer of the same text (and with
the whole forward's where it ran): the largest difference is recorded.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "streaming" / "chat"))
from common import Server, percentiles  # noqa: E402 -- the server and percentiles the chat benchmarks share

from avey_b.utils.records import Envelope, append_jsonl  # noqa: E402


def conversations(tokenizer, text: str, count: int, turn_tokens: int, longest: int) -> list[list[str]]:
    """``count`` conversations, each its turns' texts, each text a prefix of the next (``turn_tokens`` more tokens a
    turn, up to ``longest``)."""
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    ends = [e for _, e in enc["offset_mapping"]]
    stride = (len(ends) - longest - 1) // max(1, count - 1)
    out = []
    for c in range(count):
        first = c * stride
        start = enc["offset_mapping"][first][0]
        out.append([text[start:ends[first + n - 1]] for n in range(turn_tokens, longest + 1, turn_tokens)])
    return out


def by_length(seconds: list[float], tokens: list[int], bins: int = 4) -> list[dict]:
    """p50 of ``seconds`` in ``bins`` ranges of the conversation's length."""
    top = max(tokens)
    out = []
    for b in range(bins):
        lo, hi = top * b / bins, top * (b + 1) / bins
        picked = [s for s, n in zip(seconds, tokens, strict=True) if lo < n <= hi]
        out.append({"tokens": f"{int(lo):,}-{int(hi):,}", **percentiles(picked)})
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default="../shared/data", help="folder with wikitext-2/valid.tokens.txt")
    p.add_argument("--model", required=True, help="a saved Avey-B with its tokenizer (e.g. the quickstart's)")
    p.add_argument("--conversations", type=int, default=20)
    p.add_argument("--turn-tokens", type=int, default=100)
    p.add_argument("--longest", type=int, default=16_000, help="tokens of a conversation's last turn")
    p.add_argument("--whole-turns", default="1,40,80,120,160",
                   help="the turns (1-based) also embedded whole, on the server without the cache")
    p.add_argument("--threads", type=int, default=1, help="each server's --threads")
    p.add_argument("--out", default=str(HERE / "chat.jsonl"))
    args = p.parse_args()

    import httpx
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(args.model)
    text = (Path(args.data) / "wikitext-2" / "valid.tokens.txt").read_text(encoding="utf-8")
    chats = conversations(tokenizer, text, args.conversations, args.turn_tokens, args.longest)
    turns = len(chats[0])
    whole_turns = {int(t) - 1 for t in args.whole_turns.split(",") if 0 < int(t) <= turns}
    common = ["--threads", str(args.threads), "--max-tokens", str(args.longest + 1000), "--log-level", "warning",
              "--prefix-cache-min-tokens", "16", "--max-input-chars", str(10 * len(chats[0][-1]))]
    servers = {"state": Server(args.model, *common),
               "whole": Server(args.model, *common, "--prefix-cache-bytes", "0", "--block-tokens", "0")}
    name = servers["state"].line.split(" as ")[1].split("'")[1]
    ways = ["session", "cache", "whole"]
    seconds = {w: [] for w in ways}
    lengths = {w: [] for w in ways}
    sent = dict.fromkeys(ways, 0)
    computed = dict.fromkeys(ways, 0)
    differs = {"session vs cache": 0.0, "session vs whole": 0.0}
    split = int(json.loads((Path(args.model) / "config.json").read_text())["split_size"])
    clients = {k: httpx.Client(base_url=s.url, timeout=3600) for k, s in servers.items()}
    env = Envelope.begin()
    started = time.perf_counter()
    try:
        for turn in range(turns):
            for c, chat in enumerate(chats):
                vectors, new = {}, chat[turn][len(chat[turn - 1]):] if turn else chat[0]
                tokens = None
                for i in range(3):
                    way = ways[(turn * len(chats) + c + i) % 3]
                    if way == "whole" and turn not in whole_turns:
                        continue
                    if way == "session":
                        path, body = ((f"/v1/sessions/chat-{c}/append", {"text": new}) if turn else
                                      ("/v1/sessions", {"id": f"chat-{c}", "text": new}))
                    else:
                        path, body = "/v1/embeddings", {"model": name, "input": chat[turn]}
                    raw = json.dumps(body).encode()
                    client = clients["whole" if way == "whole" else "state"]
                    t0 = time.perf_counter()
                    answer = client.post(path, content=raw, headers={"Content-Type": "application/json"})
                    seconds[way].append(time.perf_counter() - t0)
                    answer.raise_for_status()
                    data = answer.json()
                    sent[way] += len(raw)
                    if way == "session":
                        tokens = data["tokens"]
                        computed["session"] += data["computed_splits"] * split
                        vectors[way] = np.array(data["embedding"])
                    else:
                        tokens = data["usage"]["prompt_tokens"]
                        vectors[way] = np.array(data["data"][0]["embedding"])
                        if way == "whole":
                            computed["whole"] += tokens
                    lengths[way].append(tokens)
                differs["session vs cache"] = max(differs["session vs cache"],
                                                  float(np.abs(vectors["session"] - vectors["cache"]).max()))
                if "whole" in vectors:
                    differs["session vs whole"] = max(differs["session vs whole"],
                                                      float(np.abs(vectors["session"] - vectors["whole"]).max()))
            print(f"turn {turn + 1}/{turns}: {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
        metrics = servers["state"].metrics()
        computed["cache"] = int(metrics["avey_b_prefix_cache_tokens_computed_total"])
        every_turn_tokens = sum(lengths["cache"])
        record = {
            "benchmark": "chat workload: sessions, prefix cache, whole", "model": args.model,
            "conversations": len(chats), "turns_per_conversation": turns, "turn_tokens": args.turn_tokens,
            "longest_tokens": args.longest, "whole_turns": sorted(t + 1 for t in whole_turns),
            "threads": args.threads, "servers": {k: " ".join(s.command) for k, s in servers.items()},
            "start_lines": {k: s.line for k, s in servers.items()},
            "tokens_of_every_turn": every_turn_tokens,
            "tokens_computed": computed, "bytes_sent": sent,
            "whole_tokens_if_every_turn": every_turn_tokens,
            "latency": {w: percentiles(v) for w, v in seconds.items()},
            "latency_by_length": {w: by_length(seconds[w], lengths[w]) for w in ways if seconds[w]},
            "latency_at_the_longest_turn": {w: percentiles([s for s, n in zip(seconds[w], lengths[w], strict=True)
                                                            if n >= max(lengths[w]) * 0.95]) for w in ways},
            "session_metrics": {k.removeprefix("avey_b_session_"): v for k, v in metrics.items()
                                if k.startswith("avey_b_session_")},
            "peak_rss_mb": {k: s.peak_rss_mb() for k, s in servers.items()},
            "max_abs_difference": differs, "command": "python " + " ".join(sys.argv), **env.end()}
        append_jsonl(args.out, record, echo=True)
    finally:
        for server in servers.values():
            server.stop()


if __name__ == "__main__":
    main()
