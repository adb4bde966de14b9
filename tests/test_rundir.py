"""Runs are never lost or mixed: a non-empty run_dir needs --resume or --overwrite (which moves the old run
aside), pruning only touches the current run's checkpoints, and --resume refuses changed settings that cannot
change mid-run while applying and recording the others."""

import json

import pytest
from test_train_loop import corpus, overrides  # noqa: F401  (the module's corpus fixture)

from avey_b import presets
from avey_b.tokenization import train_bpe_tokenizer
from avey_b.training import rundir
from avey_b.training.checkpoint import list_checkpoints, load_train_state, run_id_of, save_checkpoint
from avey_b.training.pretrain import main


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


def test_misspelled_model_overrides_are_errors_for_hf_architectures_too(corpus, tmp_path):  # noqa: F811
    bert = overrides(corpus, tmp_path / "bert", steps=1, **{"model.arch": "bert",
                                                           "model.overrides": "{hidden_sise: 32}"})
    with pytest.raises(KeyError, match=r"unknown config key 'hidden_sise' \(did you mean 'hidden_size'\?\)"):
        main(bert)
    avey = overrides(corpus, tmp_path / "avey", steps=1, **{"model.overrides": "{split_sise: 8}"})
    with pytest.raises(KeyError, match=r"did you mean 'split_size'"):
        main(avey)
    assert not (tmp_path / "bert" / "config.yaml").exists()  # nothing recorded for a run that never started
