"""Runs are never lost or mixed: a non-empty run_dir needs --resume or --overwrite (which moves the old run
aside), pruning only touches the current run's checkpoints, and --resume refuses changed settings that cannot
change mid-run while applying and recording the others."""

import hashlib
import json
import os
import shutil

import pytest
from test_train_loop import corpus, overrides  # noqa: F401  (the module's corpus fixture)

from avey_b import cli
from avey_b.data.tokenization import train_bpe_tokenizer
from avey_b.model import presets
from avey_b.training import rundir
from avey_b.training.checkpoint import (
    DamagedCheckpoint,
    UnverifiedCheckpoint,
    list_checkpoints,
    load_train_state,
    run_id_of,
    save_checkpoint,
    verify,
)


def main(argv):
    """``avey-b pretrain ARGV``, its errors raised (``--debug``) so that the tests see their type."""
    return cli.main(["--debug", "pretrain", *argv])


def history(run_dir):
    return [json.loads(line) for line in open(run_dir / "history.jsonl")]


def test_rerun_into_an_existing_run_dir_is_refused_and_overwrite_moves_the_old_run_aside(corpus, tmp_path):  # noqa: F811
    run = tmp_path / "run"
    first = overrides(corpus, run, steps=6, **{"checkpoint.every": 2, "checkpoint.keep_last": 2})
    assert main(first) == 0
    old_ckpts = [p.name for p in list_checkpoints(run)]
    assert old_ckpts == ["step_00000004", "step_00000006"]
    old_config = (run / "config.yaml").read_text()

    again = overrides(corpus, run, steps=3, **{"checkpoint.every": 2, "checkpoint.keep_last": 2})
    with pytest.raises(rundir.RunDirError, match=r"already holds a run .*checkpoints/ \(step_00000004 … step_00000006\)"
                                                 r".*--resume.*--overwrite"):
        main(again)
    assert (run / "config.yaml").read_text() == old_config  # nothing was touched
    assert [p.name for p in list_checkpoints(run)] == old_ckpts

    assert main(["--overwrite"] + again) == 0
    (aside,) = tmp_path.glob("run.old-*")
    assert [p.name for p in list_checkpoints(aside)] == old_ckpts  # the old run, whole, beside the new one
    assert (aside / "config.yaml").read_text() == old_config
    assert [p.name for p in list_checkpoints(run)] == ["step_00000002", "step_00000003"]
    assert load_train_state(list_checkpoints(run)[-1])["step"] == 3
    events = [e["event"] for e in history(run)]
    assert events == ["overwrite", "start"] and history(run)[0]["previous_run_moved_to"] == str(aside)


def test_pruning_keeps_other_runs_checkpoints(tmp_path):
    tok = train_bpe_tokenizer(["a b c d e f g"] * 20, 300)
    from avey_b import AveyBForMaskedLM

    model = AveyBForMaskedLM(presets.tiny(vocab_size=len(tok)))
    for step in (10, 20, 30):  # an older run's checkpoints, with higher step numbers
        save_checkpoint(tmp_path, step, model, tok, {"step": step, "run_id": "old"}, keep_last=2)
    for step in (1, 2, 3):
        save_checkpoint(tmp_path, step, model, tok, {"step": step, "run_id": "new"}, keep_last=2)
    kept = {p.name: run_id_of(p) for p in list_checkpoints(tmp_path)}
    assert kept == {"step_00000002": "new", "step_00000003": "new", "step_00000020": "old", "step_00000030": "old"}


def test_resume_refuses_frozen_changes_and_records_allowed_ones(corpus, tmp_path):  # noqa: F811
    run = tmp_path / "run"
    assert main(overrides(corpus, run, steps=4, **{"checkpoint.every": 2})) == 0
    config = (run / "config.yaml").read_text()
    changed = overrides(corpus, run, steps=4, **{"checkpoint.every": 2, "optim.lr": 1e-2,
                                                 "model.overrides": "{hidden_size: 64, num_hidden_layers: 2, "
                                                 "split_size: 8, num_retrieved_splits: 2}"})
    with pytest.raises(rundir.RunDirError, match="cannot change in the middle of a run") as e:
        main(["--resume", str(list_checkpoints(run)[0])] + changed)
    assert "optim.lr: 0.003 (checkpoint) -> 0.01 (requested)" in str(e.value)
    assert "model.overrides: {'hidden_size': 32," in str(e.value) and "{'hidden_size': 64," in str(e.value)
    assert (run / "config.yaml").read_text() == config  # a rejected resume leaves the run as it was

    longer = overrides(corpus, run, steps=6, **{"checkpoint.every": 2, "logging.every": 2})
    # an override right after --resume is an override, not the checkpoint path (--resume's value is optional)
    first = next(o for o in longer if o.startswith("train.max_steps="))
    assert main(["--resume", first] + [o for o in longer if o != first]) == 0
    assert load_train_state(list_checkpoints(run)[-1])["step"] == 6
    last = history(run)[-1]
    assert last["event"] == "resume" and last["step"] == 4
    assert last["changes"] == {"logging.every": [1, 2], "train.max_steps": [4, 6]}
    assert "max_steps: 6" in (run / "config.yaml").read_text()


def test_resume_into_a_run_dir_of_another_run_is_refused(corpus, tmp_path):  # noqa: F811
    a, b = tmp_path / "a", tmp_path / "b"
    assert main(overrides(corpus, a, steps=2, **{"checkpoint.every": 2})) == 0
    assert main(overrides(corpus, b, steps=2, **{"checkpoint.every": 2})) == 0
    with pytest.raises(rundir.RunDirError, match="holds another run"):
        main(["--resume", str(list_checkpoints(a)[-1])] + overrides(corpus, b, steps=4))


def test_resume_of_a_run_killed_before_its_first_checkpoint_starts_afresh_in_its_run_dir(corpus, tmp_path):  # noqa: F811
    """Found by the kill schedule (benchmarks/kills/): a run killed before its first checkpoint leaves its config,
    history and metrics; --resume then said the directory "already holds a run. Pass --resume to continue it"."""
    run = tmp_path / "run"
    assert main(overrides(corpus, run, steps=2, **{"checkpoint.every": 0})) == 0
    shutil.rmtree(run / "checkpoints")
    shutil.rmtree(run / "model")  # what a kill before the first checkpoint leaves: config, history, metrics
    assert main(["--resume"] + overrides(corpus, run, steps=2, **{"checkpoint.every": 0})) == 0
    assert [p.name for p in list_checkpoints(run)] == ["step_00000002"] and (run / "model").is_dir()


def test_misspelled_model_overrides_are_errors_for_hf_architectures_too(corpus, tmp_path):  # noqa: F811
    bert = overrides(corpus, tmp_path / "bert", steps=1, **{"model.arch": "bert",
                                                           "model.overrides": "{hidden_sise: 32}"})
    with pytest.raises(KeyError, match=r"unknown config key 'hidden_sise' \(did you mean 'hidden_size'\?\)"):
        main(bert)
    avey = overrides(corpus, tmp_path / "avey", steps=1, **{"model.overrides": "{split_sise: 8}"})
    with pytest.raises(KeyError, match=r"did you mean 'split_size'"):
        main(avey)
    assert not (tmp_path / "bert" / "config.yaml").exists()  # nothing recorded for a run that never started


def test_a_typo_in_model_overrides_writes_nothing_so_the_corrected_command_runs(corpus, tmp_path):  # noqa: F811
    run = tmp_path / "run"
    bpe = {"tokenizer.path": "null", "tokenizer.vocab_size": 320}  # trained into run_dir/tokenizer/
    fields = "hidden_size: 32, num_hidden_layers: 2, split_size: 8, num_retrieved_splits: 2"
    typo = overrides(corpus, run, steps=2, **bpe,
                     **{"model.overrides": "{" + fields.replace("hidden_size", "hidden_szie") + "}"})
    with pytest.raises(KeyError, match=r"'hidden_szie' \(did you mean 'hidden_size'\?\)"):
        main(typo)
    assert not run.exists() or not any(run.iterdir())
    assert main(overrides(corpus, run, steps=2, **bpe)) == 0
    assert (run / "tokenizer" / "tokenizer.json").exists()

    # --overwrite with a typo: the old run is not moved aside for a run that cannot start
    before = sorted(p.relative_to(run) for p in run.rglob("*"))
    with pytest.raises(KeyError, match="did you mean 'hidden_size'"):
        main(["--overwrite"] + typo)
    assert sorted(p.relative_to(run) for p in run.rglob("*")) == before and not list(tmp_path.glob("run.old-*"))


# -- integrity ---------------------------------------------------------------------------------------------------

def damage(path, *, truncate=False):
    """Zero 4 KB (at most a quarter of the file) in the middle of ``path``, or cut it to half its size."""
    size = path.stat().st_size
    if truncate:
        os.truncate(path, size // 2)
        return
    n = min(4096, size // 4)
    with open(path, "r+b") as f:
        f.seek(size // 2 - n // 2)
        f.write(b"\0" * n)


def test_every_checkpoint_records_the_sha256_of_each_of_its_files(corpus, tmp_path):  # noqa: F811
    run = tmp_path / "run"
    assert main(overrides(corpus, run, steps=2, **{"checkpoint.every": 2})) == 0
    (ckpt,) = list_checkpoints(run)
    manifest = dict(line.split("  ")[::-1] for line in (ckpt / "SHA256SUMS").read_text().splitlines())
    files = {p.relative_to(ckpt).as_posix() for p in ckpt.rglob("*") if p.is_file() and p.name != "SHA256SUMS"}
    assert set(manifest) == files and {"model.safetensors", "train_state.pt", "config.json"} <= files
    assert all(manifest[f] == hashlib.sha256((ckpt / f).read_bytes()).hexdigest() for f in files)  # sha256sum -c
    assert verify(run / "model") is True  # the final model directory too


@pytest.mark.parametrize("victim, truncate", [("train_state.pt", False), ("model.safetensors", True)])
def test_a_damaged_checkpoint_is_refused_on_resume_and_nothing_is_pruned(corpus, tmp_path, victim, truncate):  # noqa: F811
    run = tmp_path / "run"
    first = overrides(corpus, run, steps=4, **{"checkpoint.every": 2, "checkpoint.keep_last": 2})
    assert main(first) == 0
    older, newest = list_checkpoints(run)
    damage(newest / victim, truncate=truncate)
    longer = overrides(corpus, run, steps=6, **{"checkpoint.every": 2, "checkpoint.keep_last": 2})
    with pytest.raises(DamagedCheckpoint, match=rf"{newest / victim} is damaged.*newest intact checkpoint beside it "
                                                rf"is {older}: to continue from there, resume with --resume {older}"):
        main(longer + ["--resume"])
    assert list_checkpoints(run) == [older, newest]  # nothing pruned, nothing overwritten
    # the user's choice: continue from the intact one (which rewrites step 4 and goes on to 6)
    assert main(["--resume", str(older)] + longer) == 0
    assert load_train_state(list_checkpoints(run)[-1])["step"] == 6


def test_a_checkpoint_that_does_not_read_back_stops_the_run_before_pruning(tmp_path, monkeypatch):
    tok = train_bpe_tokenizer(["a b c d e f g"] * 20, 300)
    from avey_b import AveyBForMaskedLM
    from avey_b.utils import records

    model = AveyBForMaskedLM(presets.tiny(vocab_size=len(tok)))
    kept = save_checkpoint(tmp_path, 1, model, tok, {"step": 1, "run_id": "r"}, keep_last=1)
    write_manifest = records.write_manifest

    def then_the_disk_flips_a_byte(directory):
        write_manifest(directory)
        damage(directory / "train_state.pt")

    monkeypatch.setattr(records, "write_manifest", then_the_disk_flips_a_byte)
    with pytest.raises(DamagedCheckpoint, match="step_00000002/train_state.pt is damaged"):
        save_checkpoint(tmp_path, 2, model, tok, {"step": 2, "run_id": "r"}, keep_last=1)
    assert kept in list_checkpoints(tmp_path) and verify(kept)


def test_a_truncated_weights_file_is_named_when_loading(tmp_path):
    from transformers import AutoModelForMaskedLM

    from avey_b import AveyBForMaskedLM

    AveyBForMaskedLM(presets.tiny()).save_pretrained(tmp_path)
    damage(tmp_path / "model.safetensors", truncate=True)
    with pytest.raises(OSError, match=rf"{tmp_path / 'model.safetensors'}: cannot be read as safetensors"):
        AutoModelForMaskedLM.from_pretrained(tmp_path)


def test_a_checkpoint_without_sha256sums_is_refused_unless_trusted(corpus, tmp_path):  # noqa: F811
    run = tmp_path / "run"
    assert main(overrides(corpus, run, steps=4, **{"checkpoint.every": 2, "checkpoint.keep_last": 2})) == 0
    older, newest = list_checkpoints(run)
    (newest / "SHA256SUMS").unlink()
    damage(newest / "model.safetensors")  # unnoticed without the manifest
    longer = overrides(corpus, run, steps=6, **{"checkpoint.every": 2, "checkpoint.keep_last": 2})
    with pytest.raises(UnverifiedCheckpoint, match=rf"{newest} has no SHA256SUMS.*newest intact checkpoint beside it "
                                                   rf"is {older}: to continue from there, resume with --resume {older}"
                                                   r".*add --trust-unverified"):
        main(longer + ["--resume"])
    assert list_checkpoints(run) == [older, newest]  # nothing pruned, nothing overwritten
    assert [e["event"] for e in history(run)] == ["start"]
    assert main(longer + ["--resume", "--trust-unverified"]) == 0  # the user's explicit choice
    assert history(run)[-1]["checkpoint"] == history(run)[-1]["unchecked"] == str(newest)  # on the record
    assert load_train_state(list_checkpoints(run)[-1])["step"] == 6


def test_model_init_from_without_sha256sums_is_refused_unless_trusted(corpus, tmp_path):  # noqa: F811
    assert main(overrides(corpus, tmp_path / "a", steps=2)) == 0
    weights = tmp_path / "a" / "model"
    (weights / "SHA256SUMS").unlink()
    start = overrides(corpus, tmp_path / "b", steps=2, **{"model.init_from": str(weights)})
    with pytest.raises(UnverifiedCheckpoint, match=rf"{weights} has no SHA256SUMS.*add --trust-unverified"):
        main(start)
    assert not (tmp_path / "b").exists()  # refused before anything was written
    assert main(start + ["--trust-unverified"]) == 0
    assert history(tmp_path / "b")[-1]["unchecked"] == str(weights) and "unchecked" not in history(tmp_path / "a")[-1]


def test_model_init_from_a_directory_no_run_wrote_starts_unchecked(corpus, tmp_path):  # noqa: F811
    # save_pretrained / `avey-b convert` / a download write no manifest: nothing was lost, so no flag is needed
    assert main(overrides(corpus, tmp_path / "a", steps=2)) == 0
    weights = tmp_path / "saved"
    shutil.copytree(tmp_path / "a" / "model", weights)
    (weights / "SHA256SUMS").unlink()
    assert main(overrides(corpus, tmp_path / "b", steps=2, **{"model.init_from": str(weights)})) == 0
    assert history(tmp_path / "b")[-1]["unchecked"] == str(weights)
