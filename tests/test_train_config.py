"""Run configs: every shipped YAML parses, overrides are typed, unknown keys are named; LR schedules."""

from pathlib import Path

import pytest

from avey_b.training.config import describe, load_config
from avey_b.training.schedule import lr_multiplier, warmup_steps

CONFIGS = sorted((Path(__file__).parent.parent / "avey_b" / "configs" / "pretrain").glob("*.yaml"))
assert CONFIGS, "no shipped pretraining configs found"


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_every_shipped_config_parses(path):
    cfg = load_config(str(path))
    assert cfg.steps >= 1
    # a shipped recipe leaves the thread count to PyTorch, which honours OMP_NUM_THREADS (a pinned 2 ran 20x slower
    # beside another job on a 2-core machine); train.threads=N stays an explicit override
    assert cfg.train.threads is None


def test_quickstart_long_is_the_quickstart_three_times_longer():
    """Same corpus, tokenizer, model shape and fill-mask sentences; 3x the tokens in half-size batches."""
    short, long = load_config("quickstart"), load_config("quickstart-long")
    assert long.data == short.data and long.tokenizer == short.tokenizer
    assert long.eval.fill_examples == short.eval.fill_examples
    assert {k: v for k, v in long.model.overrides.items() if k != "hidden_dropout"} == short.model.overrides
    assert (long.train.max_steps * long.train.global_batch_tokens
            == 3 * short.train.max_steps * short.train.global_batch_tokens)
    assert long.run_dir != short.run_dir  # one never moves the other's run aside


def test_overrides_are_parsed_as_yaml_values():
    cfg = load_config(None, ["train.max_steps=7", "optim.lr=1e-3", "optim.betas=[0.9, 0.99]",
                             "model.overrides.hidden_size=64", "data.eval=null", "logging.tensorboard=true"])
    assert cfg.train.max_steps == 7 and cfg.optim.lr == 1e-3 and cfg.optim.betas == [0.9, 0.99]
    assert cfg.model.overrides == {"hidden_size": 64} and cfg.logging.tensorboard is True


def test_paper_optimizer_defaults():
    cfg = load_config(None, ["train.max_steps=1"])
    assert cfg.optim.betas == [0.95, 0.95] and cfg.optim.eps == 1e-18 and cfg.optim.weight_decay == 0.01
    assert cfg.data.mask_rate == 0.2 and cfg.data.mask_scheme == "mask" and cfg.optim.clip == 1.0


def test_unknown_key_names_the_key():
    with pytest.raises(KeyError, match=r"optim\.learning_rate"):
        load_config(None, ["optim.learning_rate=1e-3", "train.max_steps=1"])
    with pytest.raises(KeyError, match="bogus"):
        load_config(None, ["bogus=1"])


@pytest.mark.parametrize("typo, named, meant", [("train.lr", "train.lr", "optim.lr"),
                                                ("train.warmpu", "train.warmpu", "optim.warmup"),
                                                ("optim.lrr", "optim.lrr", "optim.lr"),
                                                ("trian.max_steps", "trian", "train")])
def test_did_you_mean_searches_every_section(typo, named, meant):
    with pytest.raises(KeyError, match=rf"unknown config key '{named}' \(did you mean '{meant}'\?\)"):
        load_config(None, [f"{typo}=1", "train.max_steps=1"])


def test_bad_values_are_clear_errors(tmp_path):
    with pytest.raises(ValueError, match="multiple of data.seq_len"):
        load_config(None, ["train.max_steps=1", "data.seq_len=100", "train.global_batch_tokens=1050"])
    with pytest.raises(ValueError, match="max_steps or train.max_tokens"):
        load_config(None, [])
    with pytest.raises(FileNotFoundError, match="missing.yaml"):
        load_config(str(tmp_path / "missing.yaml"))
    with pytest.raises(ValueError, match="key=value"):
        load_config(None, ["train.max_steps"])


def test_base_inheritance(tmp_path):
    (tmp_path / "a.yaml").write_text("optim: {lr: 0.002, schedule: linear}\ntrain: {max_steps: 3}\n")
    (tmp_path / "b.yaml").write_text("base: a.yaml\noptim: {lr: 0.001}\n")
    cfg = load_config(str(tmp_path / "b.yaml"))
    assert cfg.optim.lr == 0.001 and cfg.optim.schedule == "linear" and cfg.train.max_steps == 3


def test_help_lists_documented_keys():
    text = describe()
    assert "optim.eps" in text and "AdamW epsilon" in text and "data.train" in text


def test_schedule_values_at_known_steps():
    kw = dict(total=100, warmup=10)
    assert lr_multiplier(0, schedule="cosine", **kw) == pytest.approx(0.1)
    assert lr_multiplier(9, schedule="cosine", **kw) == pytest.approx(1.0)
    assert lr_multiplier(55, schedule="cosine", **kw) == pytest.approx(0.5)  # halfway through the decay
    assert lr_multiplier(100, schedule="cosine", **kw) == pytest.approx(0.0)
    assert lr_multiplier(100, schedule="cosine", min_ratio=0.1, **kw) == pytest.approx(0.1)
    assert lr_multiplier(55, schedule="linear", **kw) == pytest.approx(0.5)
    assert lr_multiplier(77, schedule="constant", **kw) == 1.0
    assert lr_multiplier(3, schedule="constant", **kw) == pytest.approx(0.4)
    assert warmup_steps(0.1, 1000) == 100 and warmup_steps(250, 1000) == 250
    with pytest.raises(ValueError, match="schedule"):
        lr_multiplier(50, schedule="exp", **kw)
