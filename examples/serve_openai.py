"""Serve an Avey-B over HTTP and call it with the clients you already use: the ``openai`` SDK for embeddings, and
plain HTTP for the Text Embeddings Inference routes. The script starts ``avey-b serve`` itself and stops it at the end.

    python examples/serve_openai.py --model runs/quickstart/model
    python examples/serve_openai.py --small

By hand: ``avey-b serve MODEL --port 8000`` in one terminal, then the client code below in another.
"""

import argparse
import os
import signal
import socket
import subprocess
import sys
import time

import httpx
from openai import OpenAI

parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("--model", default="runs/quickstart/model", help="a saved Avey-B with its tokenizer")
parser.add_argument("--small", action="store_true", help="a tiny random model built here instead")
args = parser.parse_args()

if args.small:
    from _small import tiny_model

    args.model = tiny_model()
with socket.socket() as s:  # a free port
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
server = subprocess.Popen([sys.executable, "-m", "avey_b.cli", "serve", args.model, "--port", str(port),
                           "--api-key", "secret", "--threads", "1"], env={**os.environ})
url = f"http://127.0.0.1:{port}"
try:
    for _ in range(600):  # wait until it answers (loading the model takes a few seconds)
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                break
        except httpx.TransportError:
            time.sleep(0.5)
        if server.poll() is not None:
            raise SystemExit("the server stopped; its output is above")

    client = OpenAI(base_url=f"{url}/v1", api_key="secret")
    name = client.models.list().data[0].id
    documents = ["The cast met in Paris.", "The music was awful.", "Alice Smith said the plot was great."]
    vectors = [d.embedding for d in client.embeddings.create(model=name, input=documents).data]
    query = client.embeddings.create(model=name, input="who liked the story?").data[0].embedding
    scores = [sum(q * v for q, v in zip(query, vector, strict=True)) for vector in vectors]  # unit vectors: cosine
    print(f"model {name!r}; best match: {documents[max(range(len(scores)), key=scores.__getitem__)]!r}")

    headers = {"Authorization": "Bearer secret"}
    print("TEI /embed:", len(httpx.post(f"{url}/embed", json={"inputs": documents}, headers=headers).json()),
          "vectors")
    print("TEI /tokenize:", httpx.post(f"{url}/tokenize", json={"inputs": "The cast met."}, headers=headers).json())
finally:
    server.send_signal(signal.SIGTERM)  # graceful: requests in flight are answered first
    server.wait(timeout=60)
