"""The paper's downstream protocol (paper §5.1): every model x task x learning rate x seed, then the report.

    avey-b evaluate --config paper
    avey-b evaluate --models avey-b=runs/avey-b-base bert=google-bert/bert-base-uncased \\
        --tasks sst2 conll2003 --lrs 2e-5 6e-5 1e-4 5e-4 --seeds 10 --output-dir runs/eval
    avey-b evaluate --config paper --workers 4 --devices 0,1,2,3   # one cell per GPU
    avey-b evaluate --config paper --backend ray --ray-address auto  # one cell per GPU of a Ray cluster

One directory per cell, ``<output-dir>/<model>/<protocol>/<task>/lr<lr>_seed<seed>/``, holding
``results.json`` when the cell finished and ``error.json`` (exception and traceback, or exit code and log
tail) when it failed. A rerun skips finished cells, so an interrupted sweep resumes where it stopped, and
retries failed ones; a finished cell whose recorded settings differ from the requested ones is an error
(pick another output directory) rather than a silent mix of two protocols. A failing cell never stops
the sweep: the others run, the failures are listed at the end and in the report, and the exit code is 1.

Retrieval under ``--protocol paper`` (the paper's IR protocol, :mod:`avey_b.evaluation.ir_paper`): MLDR, MS MARCO
and NQ cells train nothing; each scores zero-shot the model of one training cell per (model, lr, seed),
``<model>/paper/msmarco_pairs/lr<lr>_seed<seed>/`` (``model/`` and ``trained.json``; its data and settings are
``data.msmarco_pairs`` and ``task_overrides.msmarco_pairs`` of the suite, or ``--train-file`` with one task).
Training cells run first, once; a rerun reuses a finished one; a failed one fails its scorings with its error.

Cells run in this process one after the other (``--workers 1``, the default), or each in its own
``python -m avey_b.evaluation.sweep --run-cell`` subprocess (``--isolate``, implied by ``--workers > 1``),
spread over ``--devices`` (each subprocess sees one GPU through ``CUDA_VISIBLE_DEVICES``), so that a
crash, an out-of-memory error or a hung library cannot take other cells with it.

On a Ray cluster (``--backend ray``, ``pip install 'avey-b[ray]'``): each cell is a Ray task, on the cluster at
``--ray-address`` (``auto``: the one this machine belongs to) or on a local Ray started for the sweep. Where the
cluster has GPUs a cell takes one (``num_gpus=1``: Ray places it and gives it a fresh worker process); on a CPU-only
cluster a cell takes ``1/--workers`` of a node's CPUs (default: a whole node) and runs that many threads. This
process stays the driver: it decides what is done, writes the report and lists the failures; the tasks write their
cell directories, so ``--output-dir`` must be a filesystem every node sees (and ``avey_b`` installed on every node,
with the same data paths). The cell directories, resume rules and failure records are those of the local backend;
a task whose process dies (a crash, an out-of-memory kill, a lost node) is recorded as a failed cell, and a rerun
retries it.

Precedence of settings: RunConfig defaults < the protocol's table (``paper``: EncodEval's settings per task,
:mod:`avey_b.evaluation.protocol`) < the suite's ``defaults`` < its ``task_overrides[task]`` < its settings of the
model (``models: {name: {model: ..., trust_remote_code: true}}``) < its ``settings`` (where the command-line flags
go).
The learning rates and seeds come from the first of: ``--lrs``/``--seeds``, ``--grid``, the suite's ``lrs``/``seeds``,
its ``grid``, the paper's grid (4 x 10, what the release's driver ran; ``--grid encodeval``: every config file the
release ships, 6 x 20).

A suite is a YAML file (a path, or the name of one shipped in ``avey_b/configs/eval/``) read by the package's
config dialect (:mod:`avey_b.configs`) into :class:`~avey_b.evaluation.suites.SuiteConfig`: its keys are that
class's fields, and a key it does not have is an error listing the valid ones. The command line is applied over it
once (:func:`~avey_b.evaluation.suites.suite_from_args`); :func:`build_cells` and :func:`evaluate` take the
resulting suite, the Python API.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import dataclasses
import itertools
import json
import os
import queue
import re
import subprocess
import sys
import time
import traceback
import uuid
from typing import Any

import transformers

from avey_b.configs import from_args
from avey_b.utils.cluster import check_backend, cluster_gpus, start_ray
from avey_b.utils.device import set_cpu_threads, usable_cpus
from avey_b.utils.files import content_hash
from avey_b.utils.progress import Progress
from avey_b.utils.records import slug, write_json_atomic

from .finetune import run_cell
from .ir_paper import MODEL_DIR, PAIRS_TASK, TRAINED_FILE, is_zero_shot, train_pairs
from .protocol import GRIDS, grid, run_config
from .report import write_report
from .settings import DataFiles, RunConfig
from .suites import (
    EvaluateOptions,
    SuiteConfig,
    evaluate_parser,
    load_suite,  # noqa: F401 -- part of this module's interface
    parse_models,
    suite_from_args,
)
from .tasks import TASKS

PAPER_LRS = GRIDS["paper"][0]

@dataclasses.dataclass
class Cell:
    model_name: str
    model: str
    task: str
    cfg: RunConfig
    files: DataFiles
    tokenizer: str | None = None
    trained_by: str | None = None
    """Key of the training cell whose model this cell scores zero-shot (paper-protocol retrieval), else None."""

    @property
    def key(self) -> str:
        return f"{self.model_name}/{self.cfg.protocol}/{self.task}/lr{self.cfg.lr:g}_seed{self.cfg.seed}"

    @property
    def trains_only(self) -> bool:
        """A training cell of the paper's IR protocol: it saves a model for other cells and scores nothing."""
        return self.task == PAIRS_TASK

    @property
    def done_file(self) -> str:
        return TRAINED_FILE if self.trains_only else "results.json"

    def fingerprint(self, output_dir: str | None = None) -> dict[str, str]:
        """Hashes of what the cell reads: every local data file or directory, and the model's files (a Hub id
        or name stands for itself); for a zero-shot scoring, the run id of its training cell's model. A finished
        cell whose fingerprint differs is stale and runs again."""
        out = {}
        if self.trained_by is not None and output_dir is not None:
            trained = os.path.join(output_dir, *self.trained_by.split("/"), TRAINED_FILE)
            out["trained"] = _read_json(trained).get("run_id", "?") if os.path.isfile(trained) else "missing"
        for name, value in dataclasses.asdict(self.files).items():
            if isinstance(value, str) and os.path.exists(value):
                out[f"data.{name}"] = content_hash(value)
        for name, value in (("model", self.model), ("tokenizer", self.tokenizer)):
            if value and os.path.exists(value):
                out[name] = content_hash(value)
        return out

    def spec(self) -> dict[str, Any]:
        """What identifies the cell's settings (compared on resume); the device and the CPU threads are not part of
        it."""
        cfg = self.cfg.to_dict()
        cfg.pop("device")
        cfg.pop("threads")
        spec = {"model_name": self.model_name, "model": self.model, "task": self.task, "tokenizer": self.tokenizer,
                "cfg": cfg, "files": dataclasses.asdict(self.files)}
        return spec | ({"trained_by": self.trained_by} if self.trained_by else {})


def model_settings(items: list[str] | dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The RunConfig fields a suite sets for one model (``neobert: {model: chandar-lab/NeoBERT,
    trust_remote_code: true}``): over the suite's defaults and task overrides, under the command line."""
    if not isinstance(items, dict):
        return {}
    out = {}
    for name, value in items.items():
        if isinstance(value, dict):
            if "model" not in value:
                raise ValueError(f"model {name!r}: a mapping needs a 'model' key (its path or Hub id), "
                                 f"got {sorted(value)}")
            out[slug(str(name))] = {k: v for k, v in value.items() if k != "model"}
    return out


def build_cells(suite: SuiteConfig) -> tuple[list[Cell], str, str]:
    """Expand the suite's lr x seed grid (never one file per point); the command line's flags are already in
    ``suite`` (:func:`~avey_b.evaluation.suites.suite_from_args`). Returns (cells, output_dir, aggregate)."""
    models = parse_models(suite.models)
    per_model = model_settings(suite.models)
    lrs, seeds = _grid(suite, models)
    if not suite.output_dir:
        raise ValueError("no output directory: pass --output-dir or set 'output_dir' in the suite")
    cli_cfg, cli_data = _command_line_settings(suite, per_model)
    cells: list[Cell] = []
    training: dict[str, Cell] = {}
    for task in suite.tasks:
        settings, data = _task_settings(suite, task)
        for (name, path), lr, seed in itertools.product(models.items(), lrs, seeds):
            cfg = run_config(task, settings | per_model.get(name, {}) | cli_cfg | {"lr": lr, "seed": seed})
            if not is_zero_shot(task, cfg):
                cells.append(Cell(name, path, task, cfg, DataFiles(**(data | cli_data)), suite.tokenizer))
                continue
            pairs_settings, pairs_data = _task_settings(suite, PAIRS_TASK)
            pairs_given = pairs_settings | per_model.get(name, {}) | cli_cfg | {"protocol": "paper"}
            trainer = _training_cell(name, path, cfg, (pairs_given, pairs_data), cli_data, suite.tokenizer)
            if trainer.key not in training:
                training[trainer.key] = trainer
                cells.append(trainer)
            cells.append(Cell(name, path, task, cfg, _scoring_files(task, data, cli_data), suite.tokenizer,
                              trained_by=trainer.key))
    return cells, suite.output_dir, suite.aggregate


_RUN_FIELDS = frozenset(f.name for f in dataclasses.fields(RunConfig))
_DATA_FIELDS = frozenset(f.name for f in dataclasses.fields(DataFiles))


def _grid(suite: SuiteConfig, models: dict[str, str]) -> tuple[list[float], list[int]]:
    """The suite's learning rates and seeds (``lrs``/``seeds``, else its grid's), once its models and tasks are
    checked: some, and only known tasks."""
    if not models:
        raise ValueError("no models: pass --models or set 'models' in the suite")
    if not suite.tasks:
        raise ValueError("no tasks: pass --tasks or set 'tasks' in the suite")
    unknown = [t for t in suite.tasks if t not in TASKS]
    if unknown:
        raise ValueError(f"unknown tasks {unknown}; known: {', '.join(TASKS)}")
    default_lrs, default_seeds = grid(suite.grid or "paper")
    lrs = [float(x) for x in (suite.lrs or default_lrs)]
    seeds = default_seeds if suite.seeds is None else suite.seeds
    seeds = list(range(int(seeds))) if isinstance(seeds, (int, str)) else [int(s) for s in seeds]
    if not seeds:
        raise ValueError("no seeds")
    return lrs, seeds


def _command_line_settings(suite: SuiteConfig, per_model: dict[str, dict[str, Any]]
                           ) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the RunConfig fields, the data) the command line sets for every cell, checked with the models' settings:
    known keys only, and local data for a single task."""
    cli_cfg = dict(suite.settings)
    cli_data = dict(suite.files)
    bad = sorted(set(cli_data) - _DATA_FIELDS)
    if bad:
        raise ValueError(f"unknown data keys {bad} in 'files'")
    if cli_data and len(suite.tasks) > 1:
        raise ValueError("--train-file/--eval-file/--holdout/... apply to one task; use the suite's 'data' for several")
    for where, values in [(f"model {m}", v) for m, v in per_model.items()] + [("'settings'", cli_cfg)]:
        bad = sorted(set(values) - _RUN_FIELDS)
        if bad:
            raise ValueError(f"unknown settings {bad} for {where}; valid: {sorted(_RUN_FIELDS)}")
    return cli_cfg, cli_data


def _task_settings(suite: SuiteConfig, task: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the RunConfig fields, the data) the suite sets for ``task``: its ``defaults`` and ``protocol``, then the
    task's overrides; its ``data``. Unknown keys are errors."""
    settings = dict(suite.defaults) | ({"protocol": suite.protocol} if suite.protocol is not None else {})
    settings |= dict(suite.task_overrides.get(task) or {})
    bad = sorted(set(settings) - _RUN_FIELDS)
    if bad:
        raise ValueError(f"unknown settings {bad} for task {task}; valid: {sorted(_RUN_FIELDS)}")
    data = dict(suite.data.get(task) or {})
    bad = sorted(set(data) - _DATA_FIELDS)
    if bad:
        raise ValueError(f"unknown data keys {bad} for task {task}")
    return settings, data


_TRAINING_DATA = ("train", "train_split")


def _training_cell(name: str, path: str, cfg: RunConfig, pairs: tuple[dict[str, Any], dict[str, Any]],
                   cli_data: dict[str, Any], tokenizer: str | None) -> Cell:
    """The MS MARCO-pairs training cell that a paper-protocol retrieval cell of (model, lr, seed) scores: the
    settings and data of ``msmarco_pairs`` in the suite, the command line's training data."""
    settings, data = pairs
    cfg = run_config(PAIRS_TASK, settings | {"lr": cfg.lr, "seed": cfg.seed})  # over the protocol's table
    bad = sorted(set(data) - set(_TRAINING_DATA))
    if bad:
        raise ValueError(f"data.{PAIRS_TASK}: only {list(_TRAINING_DATA)} apply to a training set, got {bad}")
    return Cell(name, path, PAIRS_TASK, cfg, DataFiles(**(data | {k: v for k, v in cli_data.items()
                                                                 if k in _TRAINING_DATA})), tokenizer)


def _scoring_files(task: str, data: dict[str, Any], cli_data: dict[str, Any]) -> DataFiles:
    """A zero-shot scoring reads only evaluation data; training data in the suite is a mistake worth naming."""
    bad = sorted(k for k in data if k in (*_TRAINING_DATA, "holdout"))
    if bad:
        raise ValueError(f"data.{task}: {bad} do not apply under the paper protocol, where {task} is scored "
                         f"zero-shot by the model trained on {PAIRS_TASK}; give its data as data.{PAIRS_TASK}")
    if "holdout" in cli_data:
        raise ValueError(f"--holdout does not apply to {task} under the paper protocol (scored zero-shot)")
    return DataFiles(**(data | {k: v for k, v in cli_data.items() if k not in _TRAINING_DATA}))


# ------------------------------------------------------------------------------------------ running


def cell_dir(output_dir: str, cell: Cell) -> str:
    return os.path.join(output_dir, *cell.key.split("/"))


def is_done(output_dir: str, cell: Cell, log=None) -> bool:
    """Whether the cell has a result for its settings *and* its current data and model (see ``fingerprint``)."""
    path = os.path.join(cell_dir(output_dir, cell), cell.done_file)
    if not os.path.isfile(path):
        return False
    if cell.trains_only and not os.path.isdir(os.path.join(cell_dir(output_dir, cell), MODEL_DIR)):
        return False
    record = _read_json(path)
    recorded = record.get("cell")
    if recorded is not None and isinstance(recorded.get("cfg"), dict):
        # a cell recorded before a RunConfig field existed ran with that field's default
        defaults = {k: v for k, v in RunConfig().to_dict().items() if k not in ("device", "threads")}
        recorded = recorded | {"cfg": defaults | recorded["cfg"]}
    if record.get("fingerprint") != cell.fingerprint(output_dir):
        if log is not None:
            what = "its training cell's model" if cell.trained_by else "its data or model"
            log(f"{cell.key}: {what} changed since {path} was written; running it again")
        return False
    if recorded is not None and recorded != cell.spec():
        raise ValueError(
            f"{path} was produced with other settings than requested now; use another --output-dir "
            f"or delete that cell. Recorded: {recorded} Requested: {cell.spec()}"
        )
    return True


def _read_json(path: str) -> dict[str, Any]:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def run_in_process(output_dir: str, cell: Cell) -> str | None:
    """Run one cell here; None on success, else the error summary (recorded in error.json)."""
    directory = cell_dir(output_dir, cell)
    try:
        if cell.trains_only:
            record = train_pairs(cell.model, cell.cfg, cell.files, os.path.join(directory, MODEL_DIR), cell.tokenizer)
            record |= {"run_id": uuid.uuid4().hex, "model": cell.model, "task": cell.task, "lr": cell.cfg.lr,
                       "seed": cell.cfg.seed, "config": cell.cfg.to_dict(), "data": vars(cell.files)}
        elif cell.trained_by is not None:
            finetuned = os.path.join(output_dir, *cell.trained_by.split("/"), MODEL_DIR)
            record = run_cell(cell.model, cell.task, cell.cfg, cell.files, cell.tokenizer, finetuned=finetuned)
        else:
            record = run_cell(cell.model, cell.task, cell.cfg, cell.files, cell.tokenizer)
    except Exception as e:  # a failing cell is data for the report, not the end of the sweep
        summary = f"{type(e).__name__}: {e}"
        write_json_atomic(os.path.join(directory, "error.json"),
                          {"cell": cell.spec(), "error": summary, "traceback": traceback.format_exc()})
        return summary
    record |= {"cell": cell.spec(), "model_name": cell.model_name, "fingerprint": cell.fingerprint(output_dir)}
    write_json_atomic(os.path.join(directory, cell.done_file), record)
    _remove(os.path.join(directory, "error.json"))
    return None


def run_subprocess(output_dir: str, cell: Cell, device: str | None, threads: int | None) -> str | None:
    """Run one cell in a fresh interpreter (``--run-cell``), pinned to ``device``; None on success."""
    directory = cell_dir(output_dir, cell)
    os.makedirs(directory, exist_ok=True)
    spec_path = os.path.join(directory, "cell.json")
    write_json_atomic(spec_path, cell.spec())
    env = dict(os.environ)
    if device is not None:
        env["CUDA_VISIBLE_DEVICES"] = device
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    log_path = os.path.join(directory, "log.txt")
    with open(log_path, "w", encoding="utf-8") as log:
        rc = subprocess.call([sys.executable, "-m", "avey_b.evaluation.sweep", "--run-cell", spec_path,
                              "--output-dir", output_dir], stdout=log, stderr=subprocess.STDOUT, env=env)
    if rc == 0 and os.path.isfile(os.path.join(directory, cell.done_file)):
        return None
    if os.path.isfile(os.path.join(directory, "error.json")):  # the child caught and recorded it
        with open(os.path.join(directory, "error.json"), encoding="utf-8") as f:
            return json.load(f)["error"]
    with open(log_path, encoding="utf-8", errors="replace") as f:
        tail = f.read()[-4000:]
    summary = f"subprocess exited with code {rc}"
    write_json_atomic(os.path.join(directory, "error.json"), {"cell": cell.spec(), "error": summary, "log_tail": tail})
    return summary


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass


def run_sweep(cells: list[Cell], output_dir: str, workers: int | None = 1, devices: list[str] | None = None,
              isolate: bool = False, log=print, backend: str = "local",
              ray_address: str | None = None) -> dict[str, str]:
    """Run the cells not yet done, training cells first (their scorings need their models); returns {cell key:
    error summary} for the failures, a scoring whose training failed included. ``backend="ray"``: each cell a Ray
    task on the cluster at ``ray_address`` (None: a local Ray, started only when a cell is to run and shut down
    at the end); ``workers`` is then the cells at once per node on a CPU-only cluster (None: 1)."""
    check_backend(backend, {"--ray-address": ray_address is not None})
    if backend == "ray" and (devices or isolate):
        raise ValueError("--devices and --isolate apply to the local backend; on Ray every cell is a task in a Ray "
                         "worker process, on a GPU of its own where the cluster has GPUs")
    if workers is not None and workers < 1:
        raise ValueError(f"--workers must be at least 1, got {workers}")
    todo = [c for c in cells if not is_done(output_dir, c, log)]
    retrained = {c.key for c in todo if c.trains_only}  # a model trained again is scored again
    todo += [c for c in cells if c.trained_by in retrained and c not in todo]
    log(f"{len(cells)} cells, {len(cells) - len(todo)} already done, {len(todo)} to run")
    with contextlib.ExitStack() as cleanup:  # a Ray started here is shut down however the sweep ends
        on_ray = _ray_runner(ray_address, workers, output_dir, cleanup, log) if backend == "ray" and todo else None
        return _run_todo(cells, todo, output_dir, log, on_ray or (
            lambda batch: _finished(batch, output_dir, workers or 1, devices, isolate)))


def _run_todo(cells: list[Cell], todo: list[Cell], output_dir: str, log, finished) -> dict[str, str]:
    """Run ``todo`` through ``finished`` (cells -> ``(cell, error or None, seconds)`` as each ends): the training
    cells, then the cells whose training succeeded (the others fail with its error)."""
    failures: dict[str, str] = {}
    progress = Progress(len(todo), "evaluate", unit="cell", every=0.0)
    done = 0

    def run(batch: list[Cell]) -> None:
        nonlocal done
        for cell, err, seconds in finished(batch):
            done += 1
            _log_cell(log, done, len(todo), cell, err, seconds, output_dir)
            progress.update()
            if err:
                failures[cell.key] = err

    run([c for c in todo if c.trains_only])
    ready = []
    trainers = {c.key: c for c in cells if c.trains_only}
    for cell in (c for c in todo if not c.trains_only):
        if cell.trained_by is None or is_done(output_dir, trainers[cell.trained_by]):
            ready.append(cell)
            continue
        err = f"its training cell {cell.trained_by} failed: {failures.get(cell.trained_by, 'no trained model')}"
        write_json_atomic(os.path.join(cell_dir(output_dir, cell), "error.json"), {"cell": cell.spec(), "error": err})
        done += 1
        _log_cell(log, done, len(todo), cell, err, 0.0, output_dir)
        progress.update()
        failures[cell.key] = err
    run(ready)
    progress.close()
    return failures


def _finished(todo: list[Cell], output_dir: str, workers: int, devices: list[str] | None, isolate: bool):
    """``(cell, error or None, seconds)`` for every cell as it finishes: one after the other in this process, or
    in ``workers`` subprocesses (each on its device, or on its share of the CPU threads)."""
    if workers <= 1 and not isolate:
        for cell in todo:
            t0 = time.perf_counter()
            err = run_in_process(output_dir, cell)
            yield cell, err, time.perf_counter() - t0
        return
    slots: queue.Queue = queue.Queue()
    for i in range(max(1, workers)):
        slots.put(devices[i % len(devices)] if devices else None)
    threads = None if devices else max(1, usable_cpus() // max(1, workers))

    def work(cell: Cell) -> str | None:
        device = slots.get()
        try:
            return run_subprocess(output_dir, cell, device, threads)
        finally:
            slots.put(device)

    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        started = {pool.submit(work, c): (c, time.perf_counter()) for c in todo}
        for fut in concurrent.futures.as_completed(started):
            cell, t0 = started[fut]
            yield cell, fut.result(), time.perf_counter() - t0


def _ray_runner(address: str | None, workers: int | None, output_dir: str, cleanup: contextlib.ExitStack, log):
    """Join (or start) Ray and return the runner of a batch of cells as Ray tasks (see :func:`_on_ray`): one GPU
    a cell where the cluster has GPUs, else ``1/workers`` of the smallest node's CPUs."""
    ray = start_ray(address, cleanup)
    gpus = cluster_gpus(ray)
    if gpus:
        if workers is not None:
            log(f"--workers {workers} has no effect on a cluster with GPUs: each cell takes one GPU")
        resources, threads, share = {"num_gpus": 1}, None, "one GPU"
    else:
        node_cpus = min((int(n["Resources"]["CPU"]) for n in ray.nodes() if n["Alive"] and n["Resources"].get("CPU")),
                        default=1)
        threads = max(1, node_cpus // (workers or 1))
        resources, share = {"num_cpus": threads}, f"{threads} of a node's {node_cpus} CPUs"
    log(f"Ray cluster: {int(ray.cluster_resources().get('CPU', 0))} CPUs, {gpus:g} GPUs; each cell a task on {share}")
    task = ray.remote(max_retries=0, **resources)(_cell_task)  # a failed cell is retried by a rerun, as locally
    return lambda batch: _on_ray(ray, batch, output_dir, task, threads)


def _cell_task(output_dir: str, cell: Cell, threads: int | None) -> str | None:
    """One cell in a Ray worker process: :func:`run_in_process` (which records a failure in ``error.json``), on
    ``threads`` CPU threads when given."""
    if threads:
        set_cpu_threads(threads)
    _quiet_transformers()
    return run_in_process(output_dir, cell)


def _on_ray(ray, todo: list[Cell], output_dir: str, task, threads: int | None):
    """``(cell, error or None, seconds)`` for every cell as its Ray task finishes. A task that ends without an
    answer (its process crashed or was killed, its node lost) is recorded in the cell's ``error.json`` like a
    subprocess that exits without a result."""
    started = {task.remote(output_dir, cell, threads): (cell, time.perf_counter()) for cell in todo}
    pending = list(started)
    while pending:
        ready, pending = ray.wait(pending, num_returns=1)
        cell, t0 = started[ready[0]]
        try:
            err = ray.get(ready[0])
        except ray.exceptions.RayError as e:
            err = f"the Ray task ended without a result: {type(e).__name__}"
            account = re.sub(r"\x1b\[[0-9;]*m", "", str(e))  # Ray colours its messages for terminals
            write_json_atomic(os.path.join(cell_dir(output_dir, cell), "error.json"),
                              {"cell": cell.spec(), "error": err, "ray_error": account[-4000:]})
        done = os.path.join(cell_dir(output_dir, cell), cell.done_file)
        if err is None and not os.path.isfile(done):
            raise FileNotFoundError(f"{cell.key} finished on Ray, but {done} is not here: --output-dir must be a "
                                    "filesystem that this machine and every Ray node see")
        yield cell, err, time.perf_counter() - t0


def _log_cell(log, i: int, n: int, cell: Cell, err: str | None, seconds: float, output_dir: str) -> None:
    if err:
        log(f"[{i}/{n}] FAILED {cell.key} ({seconds:.0f}s): {err}")
        return
    rec = _read_json(os.path.join(cell_dir(output_dir, cell), cell.done_file))
    if cell.trains_only:
        log(f"[{i}/{n}] {cell.key}: trained {rec['steps']} steps, loss {rec['loss_first']:.3f} -> "
            f"{rec['loss_last']:.3f} ({seconds:.0f}s)")
        return
    log(f"[{i}/{n}] {cell.key}: {rec['metric']} = {rec['score']:.2f} ({seconds:.0f}s)")


def _quiet_transformers() -> None:
    """Every cell loads a model: one identical load report and progress bar per cell drowns the sweep's own log."""
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()


def _run_cell_file(spec_path: str, output_dir: str) -> int:
    with open(spec_path, encoding="utf-8") as f:
        spec = json.load(f)
    cell = Cell(spec["model_name"], spec["model"], spec["task"], RunConfig(**spec["cfg"]),
                DataFiles(**spec["files"]), spec.get("tokenizer"), spec.get("trained_by"))
    return 1 if run_in_process(output_dir, cell) else 0


# ------------------------------------------------------------------------------------------ CLI


def run(args: argparse.Namespace) -> int:
    """``avey-b evaluate`` (the arguments of :func:`avey_b.evaluation.suites.evaluate_parser`): the suite with the
    command line over it, its cells run (or listed: ``--dry-run``), then the report."""
    if hasattr(args, "run_cell"):
        return _run_cell_file(args.run_cell, args.output_dir)
    return evaluate(suite_from_args(args), from_args(EvaluateOptions, args))


def evaluate(suite: SuiteConfig, options: EvaluateOptions) -> int:
    """Run the suite's cells as ``options`` say (its suite fields are already in ``suite``), then write and print
    the report; 1 when a cell failed."""
    check_backend(options.backend, {"--ray-address": options.ray_address is not None})
    _quiet_transformers()
    cells, output_dir, aggregate = build_cells(suite)
    if options.dry_run:
        for c in cells:
            print(c.key, "(done)" if is_done(output_dir, c) else "")
        return 0
    failures: dict[str, str] = {}
    if not options.report_only:
        devices = options.devices.split(",") if options.devices else None
        # default: one worker per device; on Ray, one cell per GPU, or per CPU-only node
        workers = options.workers
        if workers is None and options.backend != "ray":
            workers = len(devices) if devices else 1
        failures = run_sweep(cells, output_dir, workers, devices, options.isolate, backend=options.backend,
                             ray_address=options.ray_address)

    md_path, _ = write_report(output_dir, aggregate=aggregate, protocol=cells[0].cfg.protocol,
                              models=list(dict.fromkeys(c.model_name for c in cells)),
                              tasks=list(dict.fromkeys(c.task for c in cells)))
    with open(md_path, encoding="utf-8") as f:
        print(f.read())
    if failures:
        print(f"{len(failures)} cell(s) failed:", file=sys.stderr)
        for key, err in failures.items():
            print(f"  {key}: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":  # the cells of --isolate / --workers > 1: `python -m avey_b.evaluation.sweep --run-cell`
    sys.exit(run(evaluate_parser().parse_args()))
