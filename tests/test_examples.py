"""Every script of ``examples/`` runs to the end with ``--small`` (a tiny local model and tiny data, no download),
so none can rot; and those that take only a model run offline from a local model directory, as their docstrings
say (``--model runs/quickstart/model``): everything, the tokenizer included, comes from that directory."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from avey_b import testing

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


#: The examples whose only input is a model (the others also read data files, which ``--small`` makes).
MODEL_ONLY = ["fill_mask", "late_chunking", "export_int8", "serve_openai"]


@pytest.fixture(scope="module")
def local_model(tmp_path_factory) -> Path:
    """A directory as the library saves one: a tiny masked-LM Avey-B and its tokenizer beside it."""
    directory = tmp_path_factory.mktemp("model")
    testing.avey_b(str(directory), testing.tokenizer(str(directory)))
    return directory


def run_offline(name: str, model: Path, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, str(ROOT / "examples" / f"{name}.py"), "--model", str(model)], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=900)


def test_every_model_only_example_is_listed():
    takes_data = {p.stem for p in EXAMPLES if any(flag in p.read_text(encoding="utf-8")
                                                   for flag in ('"--docs"', '"--csv"', '"--pairs"'))}
    assert sorted(MODEL_ONLY) == sorted({p.stem for p in EXAMPLES} - takes_data)


def test_fill_mask_runs_offline_from_a_local_model_directory_with_its_own_tokenizer(local_model, tmp_path):
    run = run_offline("fill_mask", local_model, tmp_path)
    assert run.returncode == 0, f"{run.stdout[-2000:]}\n{run.stderr[-4000:]}"
    assert "The capital of France is [MASK]. ->" in run.stdout  # the directory's mask token, not the release's


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in MODEL_ONLY if n != "fill_mask"])
def test_the_example_runs_offline_from_a_local_model_directory(name, local_model, tmp_path):
    run = run_offline(name, local_model, tmp_path)
    assert run.returncode == 0, f"{name} --model DIR failed:\n{run.stdout[-2000:]}\n{run.stderr[-4000:]}"
