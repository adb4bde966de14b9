"""What the chat and long-request benchmarks share: a server process started as a user starts one, its metrics,
and percentiles."""

from __future__ import annotations

import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """``avey-b serve MODEL ARGS...`` on a free port, until :meth:`stop` (SIGTERM). ``line``: its start line."""

    def __init__(self, model: str, *args: str):
        import httpx

        self.command = ["avey-b", "serve", model, "--port", str(free_port()), *args]
        self.log = tempfile.NamedTemporaryFile("w+", suffix=".log")  # a pipe nobody reads would fill and block
        self.proc = subprocess.Popen([str(Path(sys.executable).with_name("avey-b")), *self.command[1:]],
                                     stdout=self.log, stderr=subprocess.STDOUT, text=True)
        self.url = f"http://127.0.0.1:{self.command[4]}"
        for _ in range(2400):
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.25)
            if self.proc.poll() is not None:
                raise RuntimeError(Path(self.log.name).read_text())
        self.line = next(line for line in Path(self.log.name).read_text().splitlines() if line.startswith("serving"))

    def metrics(self) -> dict[str, float]:
        """The server's Prometheus samples without labels, by name."""
        import httpx
        from prometheus_client.parser import text_string_to_metric_families

        return {s.name: s.value for f in text_string_to_metric_families(httpx.get(self.url + "/metrics").text)
                for s in f.samples if not s.labels}

    def peak_rss_mb(self) -> float:
        from avey_b.benchmarking.timing import status_mb

        return round(status_mb("VmHWM", self.proc.pid))

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=600)
        self.log.close()


def percentiles(seconds: list[float]) -> dict[str, float]:
    """p50, p99 and max of ``seconds``, rounded to the millisecond."""
    if not seconds:
        return {"n": 0}
    q = statistics.quantiles(seconds, n=100, method="inclusive") if len(seconds) > 1 else seconds * 99
    return {"n": len(seconds), "p50_s": round(q[49], 3), "p99_s": round(q[98], 3), "max_s": round(max(seconds), 3)}
