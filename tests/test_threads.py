"""CPU threads wherever a model runs: ``--threads`` takes effect in the process of ``serve`` (reported by /health),
``embed`` (recorded in the manifest's run) and ``finetune``; every verb prints one start line with device,
precision and threads; and the shared-CPU watch (avey_b.utils.shared_cpu) finds a sustained slowdown within about
half a minute of work, whatever the step time, and not a slow window, a mild slowdown or a mix of cheap and dear
work. The torch thread count is restored after each test."""

import json
from types import SimpleNamespace

import pytest
import torch

from avey_b import cli
from avey_b import testing as toy
from avey_b.apps.embed.options import EmbedOptions
from avey_b.inference.encoder import Encoder
from avey_b.inference.options import LoadOptions
from avey_b.utils import device, shared_cpu
from avey_b.utils.shared_cpu import (
    WHY_FEWER,
    SharedCpuWatch,
    ThreadTuner,
    shared_cpu_message,
    thread_counts,
    thread_tuner,
)


@pytest.fixture(autouse=True)
def keep_threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


# ------------------------------------------------------------------------------------------ the watch's rule
def feed(watch, rate: float, seconds: float, step_s: float, shape=None):
    """``seconds`` of work at ``rate`` tokens/s in steps of ``step_s``; the seconds of work when the watch fired
    (counted from this call's start) and what it said, or None."""
    done = 0.0
    while done < seconds - 1e-9:
        done += step_s
        if found := watch.add(rate * step_s, step_s, shape):
            return done, found
    return None


@pytest.mark.parametrize("step_s", [0.05, 1.0, 3.3])  # 3.3 s: the report's 0.3 steps/s
def test_a_sustained_slowdown_is_said_within_about_half_a_minute_whatever_the_step_time(step_s):
    watch = SharedCpuWatch()
    assert feed(watch, 20_000, 60, step_s) is None  # warm-up, then the reference
    seconds, (reference, now) = feed(watch, 6_000, 120, step_s)
    assert seconds <= 30 + 5 + 2 * step_s  # patience + one window + step granularity, not minutes
    assert reference == pytest.approx(20_000) and now == pytest.approx(6_000)
    assert feed(watch, 6_000, 120, step_s) is None  # once


def test_noise_a_mild_slowdown_a_recovery_or_a_slow_start_say_nothing():
    watch = SharedCpuWatch()
    feed(watch, 20_000, 30, 0.5)
    for _ in range(10):  # one slow window in every three: noise, not a neighbour
        assert feed(watch, 6_000, 5, 0.5) is None
        assert feed(watch, 20_000, 10, 0.5) is None
    assert feed(watch, 12_000, 120, 0.5) is None  # slower, never under half
    watch = SharedCpuWatch()
    feed(watch, 20_000, 30, 0.5)
    assert feed(watch, 6_000, 25, 0.5) is None and feed(watch, 20_000, 6, 0.5) is None  # it recovered in time
    assert feed(watch, 6_000, 25, 0.5) is None  # ... so the slow spell starts again
    watch = SharedCpuWatch()
    assert feed(watch, 6_000, 300, 0.5) is None  # shared from the start: no fast reference (the start line's job)


def test_the_first_sample_of_each_shape_is_warm_up_and_shapes_are_compared_with_themselves():
    watch = SharedCpuWatch()
    assert watch.add(1.0, 30.0, "long") is None  # a very slow first call (allocation) sets no reference
    for _ in range(20):  # cheap short batches run at a tenth of the long ones' rate on an idle CPU: no finding
        assert feed(watch, 50_000, 3, 0.5, "long") is None
        assert feed(watch, 5_000, 3, 0.5, "short") is None
    found = None
    for _ in range(10):  # then both run at a quarter of their own rates
        found = found or feed(watch, 12_500, 3, 0.5, "long") or feed(watch, 1_250, 3, 0.5, "short")
    assert found is not None and found[1][1] / found[1][0] == pytest.approx(0.25)


# ------------------------------------------------------------------------------------------ the tuner (auto)
class Machine:
    """A fake CPU: the seconds a unit of work takes at each thread count (``step_s``, changed by the test), the
    counts the tuner set, and what it said."""

    def __init__(self, threads: int, step_s: dict[int, float]):
        self.threads, self.step_s, self.set, self.said = threads, step_s, [], []

    def set_threads(self, n: int) -> None:
        self.set.append(n)
        self.threads = n

    def tuner(self, adapt: bool = True, **kw) -> ThreadTuner:
        return ThreadTuner(self.threads, adapt=adapt, report=self.said.append, what="training", advice="ADVICE",
                           unit="steps", set_threads=self.set_threads, **kw)

    def run(self, tuner: ThreadTuner, seconds: float, shape=None) -> None:
        """``seconds`` of work (at the current counts' speeds), one unit at a time, fed to ``tuner``."""
        done = 0.0
        while done < seconds:
            step = self.step_s[self.threads]
            tuner.add(1000.0, step, shape)
            done += step


@pytest.fixture
def quiet_load(monkeypatch):
    monkeypatch.setattr(shared_cpu, "load_note", lambda: "other processes keep 2.0 of the 2 CPUs busy now")


def test_the_counts_tried_halve_down_to_one():
    assert thread_counts(8) == [8, 4, 2, 1] and thread_counts(6) == [6, 3, 1] and thread_counts(1) == [1]


def test_auto_drops_to_the_count_that_runs_fastest_and_says_so_once(quiet_load):
    cpu = Machine(2, {2: 0.25, 1: 0.1})  # a shared CPU from the start: two threads 2.5 times slower than one
    tuner = cpu.tuner()
    cpu.run(tuner, 30)
    assert tuner.threads == cpu.threads == 1 and cpu.set[-1] == 1
    assert cpu.said == ["the CPU is shared (other processes keep 2.0 of the 2 CPUs busy now): 2 -> 1 thread(s), "
                        f"2.5x faster on the last steps ({WHY_FEWER})"]
    assert "each step waits for its slowest thread" in WHY_FEWER
    cpu = Machine(4, {4: 0.4, 2: 0.1, 1: 0.15})  # four: the middle count is the fastest
    tuner = cpu.tuner()
    cpu.run(tuner, 30)
    assert tuner.threads == 2 and tuner.changes == [(4, 2, pytest.approx(4.0))] and len(cpu.said) == 1


def test_auto_keeps_the_count_when_fewer_threads_are_not_faster_by_more_than_noise(quiet_load):
    for one_s in (0.2, 0.095):  # one thread slower, or only 5% faster: noise
        cpu = Machine(2, {2: 0.1, 1: one_s})
        tuner = cpu.tuner()
        cpu.run(tuner, 30)
        assert tuner.threads == cpu.threads == 2 and cpu.said == [] and cpu.set[-1] == 2


def test_auto_acts_when_the_watch_fires_and_goes_back_up_when_the_load_goes(quiet_load):
    cpu = Machine(2, {2: 0.1, 1: 0.18})  # an idle machine: two threads are faster, and stay
    tuner = cpu.tuner(recheck_s=60)
    cpu.run(tuner, 60)
    assert tuner.threads == 2 and cpu.said == []
    cpu.step_s = {2: 0.5, 1: 0.2}  # a neighbour starts: two threads now five times slower than before
    cpu.run(tuner, 60)
    assert tuner.threads == 1 and cpu.said == ["the CPU is shared (other processes keep 2.0 of the 2 CPUs busy "
                                               f"now): 2 -> 1 thread(s), 2.5x faster on the last steps ({WHY_FEWER})"]
    cpu.step_s = {2: 2.0, 1: 1.0}  # it gets worse: one thread is the least there is, and says nothing more
    cpu.run(tuner, 60)
    assert tuner.threads == 1 and len(cpu.said) == 1
    cpu.step_s = {2: 0.1, 1: 0.18}  # it ends: a later trial with the starting count goes back up
    cpu.run(tuner, 120)
    assert tuner.threads == 2 and cpu.said[-1].startswith("the CPU is less busy (")
    assert "1 -> 2 thread(s)" in cpu.said[-1] and cpu.said[-1].endswith("(more cores are free now)")


def test_a_count_given_explicitly_never_changes_and_the_watch_only_says_it(quiet_load, monkeypatch, tmp_path):
    monkeypatch.setattr(device, "usable_cpus", lambda: 2)
    read_from(monkeypatch, fake_proc(tmp_path, running=3))
    cpu = Machine(2, {2: 0.25, 1: 0.1})
    tuner = cpu.tuner(adapt=False)
    cpu.run(tuner, 60)
    cpu.step_s = {2: 1.0, 1: 0.1}  # four times slower than its reference
    cpu.run(tuner, 120)
    assert cpu.set == [] and tuner.threads == 2 and tuner.changes == []
    assert len(cpu.said) == 1 and "the CPU looks shared" in cpu.said[0] and "ADVICE" in cpu.said[0]


def test_a_tuner_only_where_the_threads_can_change():
    assert thread_tuner("cuda:0", 8, None, print, "x", "-") is None
    assert thread_tuner("cpu", 1, None, print, "x", "-") is None
    assert thread_tuner("cpu", 2, None, print, "x", "-").adapt  # auto
    assert not thread_tuner(torch.device("cpu"), 2, 2, print, "x", "-").adapt  # --threads 2


def test_every_threads_flag_takes_auto_by_default_a_count_or_says_what_is_wrong(capsys):
    for verb, argv in (("demo", []), ("finetune", ["--model", "M", "--task", "sst2", "--lr", "1e-4",
                                                  "--output-dir", "O"]),
                       ("evaluate", ["--models", "m=M", "--tasks", "sst2", "--output-dir", "O"]),
                       ("embed", ["M", "in.txt", "out"]), ("serve", ["M"])):
        assert getattr(cli.parse(verb, argv), "threads", None) is None  # finetune, evaluate: the settings' default
        assert cli.parse(verb, [*argv, "--threads", "auto"]).threads is None
        assert cli.parse(verb, [*argv, "--threads", "3"]).threads == 3
        for bad in ("0", "two"):
            with pytest.raises(SystemExit):
                cli.parse(verb, [*argv, "--threads", bad])
            assert f"argument --threads: takes auto or a positive number of CPU threads, got '{bad}'" in \
                capsys.readouterr().err
    from avey_b.training.config import load_config

    assert load_config(None, ["train.max_steps=1", "train.threads=auto"]).train.threads is None
    assert load_config(None, ["train.max_steps=1", "train.threads=2"]).train.threads == 2


def fake_proc(root, running: int, own_states: str = "R"):
    """A /proc with ``running`` runnable threads in ``loadavg`` and this process's threads in ``own_states`` (one
    state letter per thread; names with spaces and parentheses, as the kernel allows)."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "loadavg").write_text(f"2.61 1.20 0.80 {running}/412 31337\n")
    for i, state in enumerate(own_states):
        (root / "self" / "task" / str(100 + i)).mkdir(parents=True)
        (root / "self" / "task" / str(100 + i) / "stat").write_text(f"{100 + i} (pt worker (x) {i}) {state} 1 1 0\n")
    return root


def test_the_cpus_others_keep_busy_are_read_from_what_runs_now_not_the_minute_average(tmp_path, monkeypatch):
    monkeypatch.setattr(device.os, "getloadavg", lambda: (2.6, 2.0, 1.0))  # a pip install that just ended, say
    assert device.others_busy(proc=fake_proc(tmp_path / "idle", running=1)) == (0.0, True)  # only this thread runs
    ours = fake_proc(tmp_path / "ours", running=3, own_states="RRS")
    assert device.others_busy(samples=1, proc=ours) == (1.0, True)  # 3 running, 2 of them this process's threads
    busy = fake_proc(tmp_path / "busy", running=4, own_states="SS")
    assert device.others_busy(2, 0.0, busy) == (3.0, True)  # the thread reading counts, R or not
    assert device.others_busy(proc=tmp_path / "missing") == (2.6, False)  # no /proc (macOS): the load average


def read_from(monkeypatch, proc, real=device.others_busy):
    """``device.others_busy`` reading ``proc`` in place of /proc."""
    monkeypatch.setattr(device, "others_busy", lambda: real(proc=proc))


def test_the_message_says_what_it_measured_and_what_to_do(tmp_path, monkeypatch):
    monkeypatch.setattr(device, "usable_cpus", lambda: 2)
    read_from(monkeypatch, fake_proc(tmp_path, running=5, own_states="RR"))
    text = shared_cpu_message(20_100, 5_800, 2, "the model", "restart the server with --threads 1")
    assert "the model runs at 5,800 tokens/s, 29% of the 20,100" in text
    assert "other processes keep 3.0 of the 2 CPUs busy now; 2 threads here" in text
    assert "restart the server with --threads 1" in text
    read_from(monkeypatch, tmp_path / "missing")
    monkeypatch.setattr(device.os, "getloadavg", lambda: (3.2, 2.0, 1.0))
    text = shared_cpu_message(20_100, 5_800, 2, "the model", "restart the server with --threads 1")
    assert "load average 3.2 on 2 CPUs; 2 threads here" in text


# ------------------------------------------------------------------------------------------ the start line
def test_the_start_line_names_device_precision_threads_and_a_busy_machine(tmp_path, monkeypatch):
    monkeypatch.setattr(device, "usable_cpus", lambda: 2)
    monkeypatch.setattr(device.os, "getloadavg", lambda: (2.6, 2.0, 1.0))  # the minute before: no longer counted
    read_from(monkeypatch, fake_proc(tmp_path / "now-idle", running=1))
    assert device.runtime_line("cpu", "fp32", 2) == "PyTorch on cpu, fp32, 2 CPU threads (2 usable CPUs; --threads)"
    read_from(monkeypatch, fake_proc(tmp_path / "busy", running=3))  # two others running now
    busy = device.runtime_line("cpu", "fp32", 2, flag="train.threads")
    assert busy.splitlines()[1].startswith("note: other processes keep 2.0 of the 2 CPUs busy now")
    assert "train.threads 1" in busy
    assert "\n" not in device.runtime_line("cpu", "fp32", 1)  # one thread: nothing to suggest
    read_from(monkeypatch, tmp_path / "missing")  # without /proc, the load average says it
    busy = device.runtime_line("cpu", "fp32", 2, flag="train.threads")
    assert busy.splitlines()[1].startswith("note: the load average is 2.6 on 2 CPUs") and "train.threads 1" in busy


# ------------------------------------------------------------------------------------------ the verbs
def test_serve_threads_take_effect_in_the_server_process_and_health_reports_them(model_dir, monkeypatch, capsys):
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from avey_b.apps.serve import guard

    served = {}  # the app the server would run, instead of running it
    monkeypatch.setattr(guard, "server",
                        lambda app, options: SimpleNamespace(run=lambda: served.setdefault("app", app)))
    torch.set_num_threads(1)
    assert cli.main(["serve", str(model_dir), "--threads", "3", "--precision", "fp32"]) == 0
    assert torch.get_num_threads() == 3
    assert "PyTorch on cpu, fp32, 3 CPU threads" in capsys.readouterr().out
    with TestClient(served["app"]) as client:
        assert client.get("/health").json()["threads"] == 3


def test_embed_threads_take_effect_and_are_recorded(model_dir, tmp_path, capsys):
    pytest.importorskip("pyarrow")
    (tmp_path / "docs.txt").write_text("a good film\nthe plot was awful\n")
    torch.set_num_threads(2)
    assert cli.main(["embed", str(model_dir), str(tmp_path / "docs.txt"), str(tmp_path / "out"), "--lines",
                     "--threads", "1", "--precision", "fp32", "--no-progress"]) == 0
    assert torch.get_num_threads() == 1
    assert "PyTorch on cpu, fp32, 1 CPU thread " in capsys.readouterr().err
    assert json.loads((tmp_path / "out" / "_manifest.json").read_text())["runs"][-1]["threads"] == 1
    with pytest.raises(ValueError, match="threads must be at least 1"):
        EmbedOptions(load=LoadOptions(threads=0))


def test_finetune_threads_take_effect_and_are_not_a_cells_setting(tmp_path, capsys):
    from avey_b.evaluation.finetune import run_cell
    from avey_b.evaluation.settings import RunConfig
    from avey_b.evaluation.sweep import Cell
    from avey_b.evaluation.tasks import DataFiles

    models = toy.encoders(tmp_path)
    files = DataFiles(train=toy.sst2_tsv(str(tmp_path / "s.tsv"), 16, 0),
                      eval=toy.sst2_tsv(str(tmp_path / "d.tsv"), 8, 1))
    torch.set_num_threads(2)
    cfg = RunConfig(lr=1e-3, max_steps=1, batch_size=8, max_length=16, device="cpu", threads=1)
    run_cell(models["avey"], "sst2", cfg, files)
    assert torch.get_num_threads() == 1 and "1 CPU thread " in capsys.readouterr().err  # stdout: the results
    args = cli.parse("finetune", ["--model", "M", "--task", "sst2", "--lr", "1e-4", "--output-dir", "O", "--threads",
                                  "3"])
    assert args.threads == 3
    cell = Cell("m", "M", "sst2", cfg, files)
    assert "threads" not in cell.spec()["cfg"]  # a resume with other threads is the same cell


def test_the_encoder_reports_a_slowdown_through_the_verbs_channel(model_dir, monkeypatch):
    encoder = Encoder(str(model_dir), LoadOptions(precision="fp32", threads=2))
    said = []

    class Slowed(SharedCpuWatch):
        def add(self, work, seconds, shape=None):
            return (1000.0, 100.0) if len(said) == 0 and shape == (1, 3) else None  # a batch of 1 row of 4-7

    monkeypatch.setattr("avey_b.utils.shared_cpu.SharedCpuWatch", Slowed)
    encoder.watch_shared_cpu(said.append, "restart the server with --threads 1")
    batch, mask = encoder.pad([[5, 6, 7, 8, 9]])
    encoder.embed(batch, mask)
    encoder.embed(batch, mask)
    assert len(said) == 1 and "10% of the 1,000" in said[0] and "--threads 1" in said[0]
    one = Encoder(str(model_dir), LoadOptions(precision="fp32", threads=1))
    one.watch_shared_cpu(said.append, "-")
    assert one._watch is None  # one thread: nothing to change


def test_finetune_on_own_data_prints_its_start_line_and_fits_the_threads_of_its_trainer(tmp_path, capfd):
    from types import SimpleNamespace

    from test_finetune_own_data import common_flags, reviews_csv

    from avey_b.finetuning import threads

    models = toy.encoders(tmp_path)
    train = reviews_csv(tmp_path / "r.csv", n=24)
    out = tmp_path / "out"
    torch.set_num_threads(2)
    assert cli.main(["finetune", "--task", "text-classification", "--train-file", train, "--text-column", "review",
                     "--label-column", "sentiment", *common_flags(models["avey"], out), "--threads", "1"]) == 0
    err = capfd.readouterr().err
    assert f"finetune text-classification of {models['avey']}: PyTorch on cpu" in err and "1 CPU thread (" in err
    assert torch.get_num_threads() == 1

    added = []
    trainer = SimpleNamespace(args=SimpleNamespace(device=torch.device("cpu")), add_callback=added.append)
    options = SimpleNamespace(threads=None)
    torch.set_num_threads(2)
    threads.watch(trainer, options)  # auto on two threads: a callback that feeds each step's time to the tuner
    (callback,) = added
    assert isinstance(callback, threads.ThreadsCallback) and callback.tuner.adapt
    fed = []
    callback.tuner = SimpleNamespace(add=lambda work, seconds: fed.append((work, seconds)))
    for _ in range(2):
        callback.on_step_begin(None, None, None)
        callback.on_step_end(None, None, None)
    assert len(fed) == 2 and all(w == 1.0 and s >= 0 for w, s in fed)
    torch.set_num_threads(1)
    threads.watch(trainer, options)  # one thread: nothing to change
    assert len(added) == 1
