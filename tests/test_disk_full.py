"""A disk that fills up mid-job: the error names the file being written, nothing partial is left under a real name
(nor a temporary file eating the space), and the job run again once there is space ends with the uninterrupted run's
output. Two ways: a real small file system (a tmpfs of a given size: needs the right to mount, root in a
container; skipped otherwise) and, everywhere, a simulated ENOSPC from the atomic writer's file object after a number
of bytes (what a full disk does to a write, without mounting anything)."""

import errno
import json
import os
import subprocess

import pytest

from avey_b.apps.embed import EmbedOptions, embed_corpus
from avey_b.inference.options import LoadOptions
from avey_b.utils import records

pq = pytest.importorskip("pyarrow.parquet")
WORDS = "the a film plot cast was very good awful weak and music superb bob alice paris today".split()


def corpus(path, n=60):
    import random

    rng = random.Random(0)
    path.write_text("".join(json.dumps({"text": " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 40)))})
                            + "\n" for _ in range(n)))
    return path


def embed(model_dir, source, out):
    options = EmbedOptions(load=LoadOptions(precision="fp32", threads=1), shard_size=6, progress=False)
    return embed_corpus(str(model_dir), str(source), str(out), options)


def check_stopped_cleanly(out, error):
    assert error.errno == errno.ENOSPC and str(out) in str(error) and "free space and run the job again" in str(error)
    assert not [p for p in out.iterdir() if p.name.startswith(".")]  # no temporary file left behind
    for shard in out.glob("part-*.parquet"):  # a shard under its name reads whole
        pq.read_table(shard)


@pytest.fixture
def small_disk(tmp_path):
    """A tmpfs mounted on ``tmp_path / "disk"``; yields a function that sets its size in bytes."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(disk)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {mounted.stderr.decode().strip()}")

    def size(n: int) -> None:
        subprocess.run(["mount", "-o", f"remount,size={n}", str(disk)], check=True)

    yield disk, size
    subprocess.run(["umount", str(disk)], check=False)


def test_embed_on_a_disk_that_fills_up_stops_naming_the_file_and_resumes_when_there_is_space(
        tmp_path, model_dir, small_disk):
    disk, size = small_disk
    source = corpus(tmp_path / "d.jsonl")
    embed(model_dir, source, tmp_path / "whole")
    needed = sum(4096 * -(-p.stat().st_size // 4096) for p in (tmp_path / "whole").iterdir())
    size(needed // 2)
    with pytest.raises(OSError) as full:
        embed(model_dir, source, disk / "out")
    check_stopped_cleanly(disk / "out", full.value)
    assert list((disk / "out").glob("part-*.parquet"))  # it stopped mid-job: some shards done
    size(4 * needed)  # space again
    embed(model_dir, source, disk / "out")
    assert pq.read_table(disk / "out").equals(pq.read_table(tmp_path / "whole"))


def test_a_simulated_enospc_mid_shard_stops_naming_the_file_and_the_rerun_equals_the_uninterrupted_run(
        tmp_path, model_dir, monkeypatch):
    source = corpus(tmp_path / "d.jsonl")
    embed(model_dir, source, tmp_path / "whole")
    budget = {"bytes": sum(p.stat().st_size for p in (tmp_path / "whole").glob("part-*.parquet")) // 2}
    fdopen = os.fdopen

    class Full:
        """A file object whose writes fail with ENOSPC once the budget of bytes is spent, as on a full disk."""

        def __init__(self, f):
            self.f = f

        def write(self, data):
            budget["bytes"] -= len(data)
            if budget["bytes"] < 0:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return self.f.write(data)

        def __getattr__(self, name):
            return getattr(self.f, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return self.f.__exit__(*exc)

    monkeypatch.setattr(records.os, "fdopen", lambda *a, **k: Full(fdopen(*a, **k)))
    with pytest.raises(OSError) as full:
        embed(model_dir, source, tmp_path / "out")
    monkeypatch.setattr(records.os, "fdopen", fdopen)
    check_stopped_cleanly(tmp_path / "out", full.value)
    assert "part-" in full.value.filename and list((tmp_path / "out").glob("part-*.parquet"))
    embed(model_dir, source, tmp_path / "out")
    assert pq.read_table(tmp_path / "out").equals(pq.read_table(tmp_path / "whole"))
