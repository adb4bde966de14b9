"""A long schema-driven fuzz run of ``avey-b serve`` (issue 52): ``schemathesis`` (``st run``) against the server's
own ``/openapi.json``, every route, all four phases (examples, coverage, fuzzing, stateful), valid and invalid data,
with the API key, and the checks of tests/test_serve_fuzz.py (no 5xx; status, content type, headers and body as the
schema says; invalid data refused; every 4xx names the problem). Runs follow one another, alternating a tiny
cross-encoder (embeds, classifies, reranks) and a tiny masked LM (embeds, fills masks), each a real ``avey-b serve``
process, until ``--cases`` test cases were sent or ``--minutes`` passed; then a run without the key. Each run's
line (cases generated, passed, failed, seconds, the load average) is appended to fuzz.jsonl; a failing run's report
is kept beside it (fuzz-failure-N.txt).

    python benchmarks/serve/fuzz.py --cases 10000 --minutes 30
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from run import serve  # this folder's one way to start a server

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
KEY = "fuzz-key"
CHECKS = ("not_a_server_error,status_code_conformance,content_type_conformance,response_headers_conformance,"
          "response_schema_conformance,negative_data_rejection,error_names_the_problem")


def start(directory: Path) -> tuple[subprocess.Popen, str]:
    return serve(directory, 1, "--api-key", KEY, "--precision", "fp32", "--threads", "1", "--max-tokens", "4096",
                 "--max-request-inputs", "64", "--log-level", "warning")


def run(url: str, seed: int, seconds: int, with_key: bool) -> tuple[dict, str]:
    command = [sys.executable, "-m", "schemathesis.cli", "run", f"{url}/openapi.json", "--checks", CHECKS,
               "--mode", "all", "--seed", str(seed),
               "--max-time", str(seconds), "--workers", "2", "--request-timeout", "60", "--suppress-health-check",
               "all", "--warnings", "off", "--max-examples", "200",
               "--phases", "examples,coverage,fuzzing,stateful" if with_key else "examples,fuzzing"]
    if with_key:
        command += ["-H", f"Authorization: Bearer {KEY}"]
    env = {**os.environ, "SCHEMATHESIS_HOOKS": str(ROOT / "tests" / "fixtures" / "serve_fuzz_checks.py"),
           "NO_COLOR": "1"}
    started = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    out = done.stdout + done.stderr
    generated = re.search(r"(\d+) generated", out)
    unique = re.search(r"(\d+) unique failure", out)
    return {"seed": seed, "with_key": with_key, "exit": done.returncode,
            "generated": int(generated.group(1)) if generated else 0,
            "unique_failures": int(unique.group(1)) if unique else 0, "seconds": round(time.monotonic() - started, 1),
            "loadavg": open("/proc/loadavg").read().split()[:3]}, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=10_000)
    parser.add_argument("--minutes", type=float, default=30)
    parser.add_argument("--run-seconds", type=int, default=120, help="each st run's time budget")
    parser.add_argument("--out", default=str(HERE / "fuzz.jsonl"))
    args = parser.parse_args()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=ROOT).stdout.strip()
    total, seed, failures, started = 0, 0, 0, time.monotonic()
    from avey_b.testing import served_model

    with tempfile.TemporaryDirectory() as tmp, open(args.out, "a") as record:
        servers = {}
        for kind in ("cross-encoder", "masked-lm"):
            served_model(str(Path(tmp) / kind), kind)
            servers[kind] = start(Path(tmp) / kind)
        print(json.dumps({"run": "fuzz", "commit": commit, "target_cases": args.cases, "minutes": args.minutes}),
              file=record, flush=True)
        try:
            while total < args.cases and time.monotonic() - started < args.minutes * 60:
                kind = ("cross-encoder", "masked-lm")[seed % 2]
                line, out = run(servers[kind][1], seed, args.run_seconds, with_key=True)
                line["model"] = kind
                total += line["generated"]
                if line["exit"] != 0:
                    failures += 1
                    (HERE / f"fuzz-failure-{seed}.txt").write_text(out)
                print(json.dumps(line), file=record, flush=True)
                seed += 1
            for kind, (_, url) in servers.items():
                line, out = run(url, seed, 20, with_key=False)
                line["model"] = kind
                total += line["generated"]
                print(json.dumps(line), file=record, flush=True)
            import httpx

            health = {k: httpx.get(u + "/health").status_code for k, (_, u) in servers.items()}
        finally:
            for proc, _ in servers.values():
                proc.terminate()
                proc.wait(60)
        summary = {"summary": True, "cases": total, "failed_runs": failures, "health_after": health,
                   "minutes": round((time.monotonic() - started) / 60, 1)}
        print(json.dumps(summary), file=record, flush=True)
        print(json.dumps(summary))


if __name__ == "__main__":
    main()
