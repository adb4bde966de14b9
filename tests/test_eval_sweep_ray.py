"""``avey-b evaluate --backend ray``: on a local Ray, a sweep writes the cell directories, failures and report of the
local backend; Ray's options are refused without it; the local backend never imports Ray."""

import json
import math
import os
import subprocess
import sys

import pytest

from avey_b import cli
from avey_b import testing as toy
from avey_b.evaluation import sweep
from avey_b.evaluation.suites import SuiteConfig

#: What differs from run to run whatever the backend: wall-clock times and rates.
TIMES = {"eval_seconds", "finished"}
TRAIN_TIMES = {"seconds", "tokens_per_s"}


def evaluate(argv):
    """``avey-b evaluate ARGV``, its errors raised (``--debug``) so that the tests see their type."""
    return cli.main(["--debug", "evaluate", *argv])


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("sweep-ray")
    return {
        **toy.encoders(root),
        "train": toy.sst2_tsv(str(root / "train.tsv"), 32, seed=0),
        "dev": toy.sst2_tsv(str(root / "dev.tsv"), 16, seed=1),
    }


@pytest.fixture(scope="module")
def local_ray():
    """One local Ray of 2 CPUs for the module (its start costs seconds); the sweeps find it initialized and use it."""
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def _args(env, out, models, *extra):
    return ["--models", *models, "--tasks", "sst2", "--lrs", "1e-3", "--seeds", "1", "--output-dir", str(out),
            "--train-file", env["train"], "--eval-file", env["dev"], "--batch-size", "16", "--max-length", "16",
            "--device", "cpu", "--precision", "fp32", "--max-steps", "2", *extra]


def _files(out) -> list[str]:
    return sorted(os.path.relpath(os.path.join(root, f), out) for root, _, files in os.walk(out) for f in files)


def _read(path) -> dict:
    return json.loads(path.read_text())


def _close(a, b, rel=1e-5) -> bool:
    """Equal JSON documents, their floats within ``rel`` of each other."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k], rel) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_close(x, y, rel) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) or isinstance(b, float):
        return math.isclose(a, b, rel_tol=rel, abs_tol=1e-9)
    return a == b


@pytest.mark.slow
def test_a_sweep_on_ray_writes_the_cells_of_the_local_run(env, tmp_path, local_ray, capsys):
    models = [f"avey-b={env['avey']}", f"bert={env['bert']}"]
    assert evaluate(_args(env, tmp_path / "local", models)) == 0
    assert evaluate(_args(env, tmp_path / "ray", models, "--backend", "ray", "--workers", "2")) == 0
    assert "each cell a task on 1 of a node's 2 CPUs" in capsys.readouterr().out  # two cells at once

    assert _files(tmp_path / "ray") == _files(tmp_path / "local") == [
        "avey-b/standard/sst2/lr0.001_seed0/results.json", "bert/standard/sst2/lr0.001_seed0/results.json",
        "report.json", "report.md"]
    for name in ("avey-b", "bert"):
        cell = os.path.join(name, "standard", "sst2", "lr0.001_seed0", "results.json")
        local, on_ray = _read(tmp_path / "local" / cell), _read(tmp_path / "ray" / cell)
        for record in (local, on_ray):
            for key in TIMES:
                record.pop(key)
            for key in TRAIN_TIMES:
                record["train"].pop(key)
        assert on_ray["score"] == pytest.approx(local["score"]) and on_ray["train"]["steps"] == 2
        assert _close(on_ray, local)  # metrics, losses, the cell's settings and fingerprint, device, ...
        assert not _close(on_ray, {**local, "score": local["score"] + 1e-3})  # (the comparison can fail)
    assert _close(_read(tmp_path / "ray" / "report.json"), _read(tmp_path / "local" / "report.json"))

    # resume on Ray: the finished cells are skipped and Ray is not even started
    assert evaluate(_args(env, tmp_path / "ray", models, "--backend", "ray")) == 0
    out = capsys.readouterr().out
    assert "2 cells, 2 already done, 0 to run" in out and "Ray cluster" not in out
    # ... and other settings in the same directory are refused, as locally
    with pytest.raises(ValueError, match="other settings than requested"):
        evaluate(_args(env, tmp_path / "ray", models, "--backend", "ray", "--warmup-ratio", "0.2"))


@pytest.mark.slow
def test_a_failing_cell_on_ray_is_reported_as_locally(env, tmp_path, local_ray, capsys):
    models = [f"broken={tmp_path / 'no-such-model'}"]
    errors = {}
    for backend in ("local", "ray"):
        assert evaluate(_args(env, tmp_path / backend, models, "--backend", backend)) == 1
        out, stderr = capsys.readouterr()
        assert ("Ray cluster: 2 CPUs" in out) == (backend == "ray")
        assert "1 cell(s) failed" in stderr and "broken/standard/sst2/lr0.001_seed0: " in stderr
        errors[backend] = _read(tmp_path / backend / "broken" / "standard" / "sst2" / "lr0.001_seed0" / "error.json")
        assert _read(tmp_path / backend / "report.json")["failed"] == [
            {"dir": os.path.join("broken", "standard", "sst2", "lr0.001_seed0"), "error": errors[backend]["error"]}]
    assert "no-such-model" in errors["ray"]["error"]
    assert errors["ray"]["error"] == errors["local"]["error"] and errors["ray"]["cell"] == errors["local"]["cell"]
    assert "Traceback" in errors["ray"]["traceback"]


@pytest.mark.slow
def test_a_ray_task_whose_process_dies_is_a_failed_cell(env, tmp_path, local_ray):
    def dies(output_dir, cell, threads):  # (a local function: Ray ships it by value)
        os._exit(3)  # a crash that no Python handler sees, as a segfault or an out-of-memory kill

    cells, _, _ = sweep.build_cells(SuiteConfig(models={"bert": env["bert"]}, tasks=["sst2"], lrs=[1e-3], seeds=1,
                                                output_dir=str(tmp_path)))
    task = local_ray.remote(max_retries=0, num_cpus=1)(dies)
    [(cell, err, _)] = list(sweep._on_ray(local_ray, cells, str(tmp_path), task, None))
    assert err == "the Ray task ended without a result: WorkerCrashedError"
    record = _read(tmp_path / "bert" / "standard" / "sst2" / "lr0.001_seed0" / "error.json")
    assert record["error"] == err and record["cell"] == cell.spec()
    assert "died" in record["ray_error"] and "\x1b[" not in record["ray_error"]  # Ray's account, without colours


def test_ray_options_need_the_ray_backend(env, tmp_path):
    with pytest.raises(ValueError, match="--ray-address applies with --backend ray"):
        evaluate(_args(env, tmp_path, [f"bert={env['bert']}"], "--ray-address", "auto"))
    with pytest.raises(ValueError, match="--devices and --isolate apply to the local backend"):
        evaluate(_args(env, tmp_path, [f"bert={env['bert']}"], "--backend", "ray", "--devices", "0,1"))
    with pytest.raises(ValueError, match="--workers must be at least 1, got 0"):
        evaluate(_args(env, tmp_path, [f"bert={env['bert']}"], "--backend", "ray", "--workers", "0"))
    assert not os.path.exists(tmp_path / "bert")  # refused before any cell ran


def test_without_ray_installed_the_ray_backend_names_the_extra(env, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # what `import ray` meets where Ray is not installed
    with pytest.raises(ImportError, match=r"--backend ray needs Ray: pip install 'avey-b\[ray\]'"):
        evaluate(_args(env, tmp_path, [f"bert={env['bert']}"], "--backend", "ray"))


@pytest.mark.slow
def test_the_local_backend_never_imports_ray(env, tmp_path):
    args = _args(env, tmp_path, [f"broken={tmp_path / 'no-such-model'}"])  # a cell that fails fast: no model to load
    script = (
        "import sys\n"
        "from avey_b import cli\n"
        "from avey_b.apps import embed  # noqa: F401  (imported, as a user would, without Ray)\n"
        "from avey_b.evaluation import sweep\n"
        f"assert cli.main(['evaluate', *{args!r}]) == 1\n"
        "assert 'ray' not in sys.modules, 'the local backend imported ray'\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
