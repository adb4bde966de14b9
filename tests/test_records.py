"""The envelope every benchmark record carries (machine, commit and dirty flag, versions, load before and after,
time), read without importing torch."""

import builtins
import io
import subprocess
import sys

import pytest

from avey_b.utils import records
from avey_b.utils.records import Envelope


def test_benchmark_records_name_the_cpu_its_family_and_whether_it_has_native_bf16(monkeypatch):
    """Every benchmark record says which CPU ran it (this project's VMs change CPU between sessions), read from the
    first processor's block of /proc/cpuinfo; an unreadable file still gives a line."""
    cpuinfo = ("processor\t: 0\nmodel name\t: AMD EPYC 9R14\ncpu family\t: 25\nflags\t\t: fpu avx2 avx512_bf16\n\n"
               "processor\t: 1\nmodel name\t: something else\n")
    real_open = builtins.open
    monkeypatch.setattr(builtins, "open", lambda path, *a, **k: io.StringIO(cpuinfo) if path == "/proc/cpuinfo"
                        else real_open(path, *a, **k))
    monkeypatch.setattr(records.os, "cpu_count", lambda: 2)
    assert records.cpu_model() == "AMD EPYC 9R14 (family 25, avx512_bf16), 2 CPUs"
    cpuinfo = "processor\t: 0\nmodel name\t: Intel Xeon\nflags\t\t: fpu avx2\n"
    assert records.cpu_model() == "Intel Xeon (no native bf16), 2 CPUs"

    def missing(path, *a, **k):
        raise FileNotFoundError(path)

    monkeypatch.setattr(builtins, "open", missing)
    assert records.cpu_model() == "unknown CPU, 2 CPUs"


def test_the_envelope_has_every_field_and_takes_the_load_before_and_after(monkeypatch):
    loads = iter([(1.234, 2.0, 3.0), (4.0, 5.0, 6.789)])
    monkeypatch.setattr(records.os, "getloadavg", lambda: next(loads))
    env = Envelope.begin("pytest")
    assert env.load_before == [1.23, 2.0, 3.0] and env.load_after is None  # before: when the measurement began
    fields = env.end()
    assert fields["load_after"] == [4.0, 5.0, 6.79]  # after: when it ended
    assert env.end()["load_after"] == [4.0, 5.0, 6.79]  # a second end keeps the first's
    assert set(fields) == {"time", "machine", "commit", "dirty", "versions", "load_before", "load_after"}
    assert set(fields["machine"]) == {"host", "cpu", "cpus", "gpus", "threads"}
    assert fields["machine"]["cpu"] == records.cpu_model() and fields["machine"]["threads"] >= 1  # torch is imported
    assert fields["versions"]["python"] == ".".join(map(str, sys.version_info[:3]))
    assert fields["versions"]["torch"] and fields["versions"]["transformers"] and fields["versions"]["pytest"]
    assert fields["versions"]["avey_b"] == __import__("avey_b").__version__
    assert fields["time"].endswith("Z") and len(fields["time"]) == len("2026-11-22T15:04:05Z")
    assert Envelope(**fields) == env  # plain data: it travels between processes as its fields


def test_the_commit_and_the_dirty_flag_of_a_git_work_tree(tmp_path):
    def git(*args):
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=tmp_path, check=True,
                       capture_output=True)

    assert records.git_commit(tmp_path) == (None, None)  # not a git work tree
    git("init", "-q")
    (tmp_path / "a.txt").write_text("one")
    git("add", "a.txt")
    git("commit", "-q", "-m", "one")
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=tmp_path, capture_output=True, text=True)
    assert records.git_commit(tmp_path) == (head.stdout.strip(), False)
    (tmp_path / "b.txt").write_text("untracked")  # untracked files do not make it dirty
    assert records.git_commit(tmp_path)[1] is False
    (tmp_path / "a.txt").write_text("two")
    assert records.git_commit(tmp_path) == (head.stdout.strip(), True)
    env = Envelope.begin(repo=tmp_path)
    assert (env.commit, env.dirty) == (head.stdout.strip(), True)


def test_the_envelope_imports_no_torch():
    """A benchmark whose parent process must stay small (benchmarks/embed) can take an envelope: the package
    imports no torch (nor the model) until one of its model's names is used."""
    script = (
        "import sys\n"
        "from avey_b.utils.records import Envelope, append_jsonl\n"
        "fields = Envelope.begin('onnxruntime').end()\n"
        "assert fields['machine']['threads'] is None and fields['machine']['gpus'] == [], fields\n"
        "assert fields['versions']['torch'], fields\n"
        "assert 'torch' not in sys.modules, 'the envelope imported torch'\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.mark.parametrize("name", ["english_text"])
def test_the_shared_english_text_imports_no_torch(name):
    script = (
        "import sys\n"
        f"from avey_b.benchmarking.{name} import {name}\n"
        "assert 'torch' not in sys.modules, 'the English text imported torch'\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
