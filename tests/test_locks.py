"""One writer per output directory (avey_b.utils.locks): a second ``avey-b embed``, pretraining run or fine-tuning
run started on a directory that a running one writes is refused at once, naming the directory and the other
process, before it writes anything; the kernel drops the lock when the holder dies, SIGKILL included."""

import json
import os
import signal
import subprocess
import sys
import threading

import pytest

from avey_b import cli
from avey_b.utils import locks
from avey_b.utils.locks import DirectoryBusyError, exclusive_directory, lock_path

# the holder loads the lock's module alone (it imports nothing else of the package): no torch, a quick start
HOLD = """
import importlib.util, sys, time
spec = importlib.util.spec_from_file_location("locks", sys.argv[2])
locks = importlib.util.module_from_spec(spec)
spec.loader.exec_module(locks)
with locks.exclusive_directory(sys.argv[1], "holder"):
    print("held", flush=True)
    time.sleep(120)
"""


@pytest.fixture
def held(tmp_path):
    """A directory whose lock another process holds: (directory, that process)."""
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(out), locks.__file__], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "held\n"
    yield out, proc
    proc.kill()
    proc.wait()


def test_a_second_holder_is_refused_naming_the_directory_and_the_process_and_sigkill_frees_it(held):
    out, proc = held
    with pytest.raises(DirectoryBusyError) as refused:
        with exclusive_directory(out / "." / ".." / "out", "second"):  # another spelling of the same directory
            pass
    assert str(out) in str(refused.value).replace("/./../out", "") and f"pid {proc.pid}: holder" in str(refused.value)
    assert not out.exists()  # the lock is beside the directory: nothing made, nothing written into it
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    with exclusive_directory(out, "after") as path:  # the kernel dropped the dead holder's lock
        assert path == lock_path(out) and path.read_text().startswith(f"pid {os.getpid()}: after")


def _cli_error(capsys, argv) -> str:
    assert cli.main(argv) == 1
    return capsys.readouterr().err


def test_every_job_that_writes_a_directory_over_time_is_refused_while_another_holds_it(held, capsys, tmp_path):
    """embed, pretrain and finetune each take the lock first: the refusal comes before any input is read, and
    nothing is written."""
    out, proc = held
    (tmp_path / "d.jsonl").write_text(json.dumps({"text": "the film"}) + "\n")
    for argv in (["embed", str(tmp_path / "missing-model"), str(tmp_path / "d.jsonl"), str(out)],
                 ["pretrain", "--config", "quickstart", f"run_dir={out}"],
                 ["finetune", "--task", "text-classification", "--model", str(tmp_path / "missing-model"),
                  "--train-file", str(tmp_path / "d.jsonl"), "--output-dir", str(out)]):
        err = _cli_error(capsys, argv)
        assert f"DirectoryBusyError: {out} is being written by another job (pid {proc.pid}" in err, (argv, err)
    assert not out.exists()


def test_a_second_embed_into_the_directory_a_running_embed_writes_is_refused(tmp_path, model_dir, monkeypatch):
    """The issue's case, both jobs real: the first is held mid-job (after its first shard), the second refused; the
    first then finishes as it would have alone."""
    from avey_b.apps.embed import EmbedOptions, embed_corpus, shards
    from avey_b.inference.options import LoadOptions

    (tmp_path / "d.jsonl").write_text("".join(json.dumps({"text": f"the film {w}"}) + "\n"
                                              for w in ("was good", "bob", "alice", "paris today", "a", "b")))
    options = EmbedOptions(load=LoadOptions(precision="fp32"), shard_size=2, progress=False)
    mid_job, go_on = threading.Event(), threading.Event()
    write = shards.write_shard

    def held_after_first(path, table):
        write(path, table)
        mid_job.set()
        assert go_on.wait(60)

    monkeypatch.setattr(shards, "write_shard", held_after_first)
    results = {}
    first = threading.Thread(target=lambda: results.update(
        manifest=embed_corpus(str(model_dir), str(tmp_path / "d.jsonl"), str(tmp_path / "out"), options)))
    first.start()
    try:
        assert mid_job.wait(60)
        with pytest.raises(DirectoryBusyError, match=f"{tmp_path / 'out'} is being written by another job "
                                                     rf"\(pid {os.getpid()}: avey-b embed"):
            embed_corpus(str(model_dir), str(tmp_path / "d.jsonl"), str(tmp_path / "out"), options)
    finally:
        go_on.set()
        first.join(60)
    assert results["manifest"]["status"] == "complete" and results["manifest"]["counts"]["embedded"] == 6
