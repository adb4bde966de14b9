"""The authors' NIAH sets replayed (``niah generate --generator authors-replay``): byte for byte the files of their
``gen_niah.py`` (hashes of its own output, ``tests/fixtures/gen_niah_sha256.json``), and read back with the
library's fields."""

import hashlib
import json
import os
import re
from pathlib import Path

import pytest

from avey_b import cli
from avey_b.data import niah_replay
from avey_b.data.niah_authors import HAYSTACK_WORDS
from avey_b.evaluation.niah import sets
from avey_b.evaluation.niah.cli import generate
from avey_b.evaluation.niah.options import niah_generate_options

FIXTURE = json.loads((Path(__file__).parent / "fixtures" / "gen_niah_sha256.json").read_text())


def _hashes(root: Path) -> dict[str, str]:
    return {f"{d.name}/{f.name}": hashlib.sha256(f.read_bytes()).hexdigest()
            for d in sorted(root.iterdir()) if d.is_dir() for f in sorted(d.iterdir())}


@pytest.mark.parametrize("run", FIXTURE["runs"], ids=lambda r: r["args"][:40])
def test_replay_writes_the_authors_files_byte_for_byte(run, tmp_path):
    """Every file of each run of their script (their default seed and distributions; a seed and distributions of
    two and four needles), the first examples of their own 1,000-word NIAH-1 training set included."""
    call = dict(run["replay"])
    if "distributions" in call:
        call["distributions"] = {s: {int(k): p for k, p in d.items()} for s, d in call["distributions"].items()}
    manifest = niah_replay.replay(str(tmp_path), log=lambda s: None, **call)
    assert _hashes(tmp_path) == run["sha256"]
    assert manifest["seed"] == call.get("seed", 11) and manifest["stream_order"] == ["word", "number"]


def test_generate_under_the_paper_protocol_replays_their_stream_and_writes_only_the_tasks_asked(tmp_path):
    """``--protocol paper`` picks the replay, seed 11 (their script's); ``--tasks niah-2`` still draws the word sets
    first (the stream), so the number files are those of the full run."""
    (run,) = [r for r in FIXTURE["runs"] if r["args"].startswith("--context-lengths 40 64")]
    argv = ["generate", "--protocol", "paper", "--lengths", "40", "64", "--n-train", "6", "--n-test", "4"]
    opts = niah_generate_options(cli.parse("niah", [*argv, "--out", str(tmp_path / "all")]))
    assert (opts.generator, opts.seed) == ("authors-replay", 11)
    assert generate(opts) == 0
    assert _hashes(tmp_path / "all") == run["sha256"]
    assert generate(niah_generate_options(cli.parse("niah", [*argv, "--tasks", "niah-2", "--out",
                                                             str(tmp_path / "two")]))) == 0
    assert _hashes(tmp_path / "two") == {k: v for k, v in run["sha256"].items() if k.startswith("number_")}
    with pytest.raises(SystemExit, match="--train-lengths must equal --lengths"):
        generate(niah_generate_options(cli.parse("niah", [*argv, "--train-lengths", "40", "--out",
                                                          str(tmp_path / "x")])))


def test_their_layout_is_read_with_the_library_fields(tmp_path):
    """Needles recovered from the passage (the asked one at its ordinal), unique ids (theirs kept), the split's
    distribution from dataset_infos.json; the evaluation finds the sets where the data holds no task folder."""
    niah_replay.replay(str(tmp_path), lengths=[30, 50], n_train=5, n_test=30, seed=5,
                       distributions={"train": {0: 0.3, 2: 0.7}, "test": {3: 0.5, 1: 0.5}}, log=lambda s: None)
    task_dir = str(tmp_path / "niah-1")
    assert sets.available_lengths(task_dir, None) == [30, 50]
    path = sets.set_path(task_dir, "test", 30)
    assert path == os.path.join(str(tmp_path), "word_30_controllable", "test.jsonl")
    rows = sets.read_set(path)
    haystack = set(HAYSTACK_WORDS)
    assert len({r["id"] for r in rows}) == 30 and {r["distractors"] for r in rows} == {"1:0.5,3:0.5"}
    assert {r["num_needles"] for r in rows} == {2, 4}
    for r, line in zip(rows, (tmp_path / "word_30_controllable" / "test.jsonl").read_text().splitlines(), strict=True):
        theirs = json.loads(line)
        assert (r["authors_id"], r["context"], r["answers"]) == (theirs["id"], theirs["context"], theirs["answers"])
        assert r["needles"][r["ordinal"] - 1] == r["answers"]["text"][0] and r["target_length"] == 30
        assert sorted(r["needles"]) == sorted(w for w in r["context"].split(" ") if w not in haystack)
        for x, s in zip(r["needles"], r["needle_char_starts"], strict=True):
            assert r["context"][s:s + len(x)] == x
    assert sets.read_set(sets.set_path(str(tmp_path / "niah-2"), "train", 50))[0]["task"] == "niah-2"
    bad = tmp_path / "word_30_controllable" / "train.jsonl"
    lines = bad.read_text().splitlines()
    lines[1] = re.sub(r"What is the \w+ special", "Which is the special", lines[1])
    bad.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=r"train\.jsonl, line 2: question"):
        sets.read_set(str(bad))
