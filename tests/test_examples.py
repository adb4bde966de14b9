"""Every script of ``examples/`` runs to the end with ``--small`` (a tiny local model and tiny data, no download),
so none can rot."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted(p for p in (ROOT / "examples").glob("*.py") if not p.name.startswith("_"))


def test_there_are_examples_and_each_has_the_small_switch():
    assert len(EXAMPLES) >= 3
    assert [p.name for p in EXAMPLES if "--small" not in p.read_text(encoding="utf-8")] == []


@pytest.mark.slow
@pytest.mark.parametrize("script", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_the_example_runs_small(script, tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    run = subprocess.run([sys.executable, str(script), "--small"], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=900)
    assert run.returncode == 0, f"{script.name} --small failed:\n{run.stdout[-2000:]}\n{run.stderr[-4000:]}"
