"""The ablation command: variants -> pretraining entry point -> best-of-seeds sweep -> one row per variant."""

import json

import pytest
import yaml

from avey_b import cli
from avey_b import testing as toy
from avey_b.studies import ablation
from avey_b.studies.options import AblationOptions


def options(tmp_path, **given):
    return AblationOptions(variants=str(tmp_path / "variants.yaml"), **given)


def test_ablation_pretrains_variants_evaluates_and_isolates_failures(tmp_path):
    tok = toy.tokenizer(str(tmp_path / "tok"))
    train, dev = toy.sst2_tsv(str(tmp_path / "t.tsv"), 32, 0), toy.sst2_tsv(str(tmp_path / "d.tsv"), 16, 1)
    (tmp_path / "suite.yaml").write_text(yaml.safe_dump({
        "tasks": ["sst2"], "lrs": [5e-4], "seeds": 2, "aggregate": "best",
        "defaults": {"batch_size": 16, "max_length": 16, "device": "cpu"},
        "data": {"sst2": {"train": train, "eval": dev}},
    }))
    (tmp_path / "variants.yaml").write_text(yaml.safe_dump({
        "pretrain_config": "pre.yaml", "suite": "suite.yaml", "output_dir": str(tmp_path / "abl"),
        "variants": {"base": {}, "no-ranker": {"model.overrides.ranker": "off"}, "broken": {"train.seed": 13}},
    }))
    (tmp_path / "pre.yaml").write_text("run_dir: unused\nmodel: {preset: tiny}\ntrain: {max_steps: 1}\n")
    calls = []

    def fake_pretrain(cfg, resume, overwrite):
        # stands in for avey_b.training.pretrain.train: takes the variant's resolved config, builds the model
        calls.append(cfg)
        if cfg.train.seed == 13:  # a variant that resolves but whose pretraining fails
            return 3
        toy.avey_b(cfg.run_dir + "/model", tok, **cfg.model.overrides)
        return 0

    rc = ablation.ablation(options(tmp_path), pretrain_fn=fake_pretrain)
    assert rc == 1  # the broken variant failed ...
    no_ranker = next(c for c in calls if c.run_dir.endswith("no-ranker"))
    assert no_ranker.model.overrides["ranker"] == "off"  # a string, not YAML's False
    built = json.loads((tmp_path / "abl" / "pretrain" / "no-ranker" / "model" / "config.json").read_text())
    assert built["ranker"] == "off"
    rep = json.loads((tmp_path / "abl" / "eval" / "report.json").read_text())
    assert rep["aggregate"] == "best" and set(rep["models"]) == {"base", "no-ranker"}  # ... the others ran
    for name in ("base", "no-ranker"):
        assert rep["models"][name]["tasks"]["sst2"]["n_seeds"] == 2

    calls.clear()  # rerun: finished pretraining and finished cells are skipped
    assert ablation.ablation(options(tmp_path, only=["base", "no-ranker"]), pretrain_fn=fake_pretrain) == 0
    assert calls == []


def test_every_variant_resolves_before_anything_runs(tmp_path, capsys):
    """A typo or a bad value in any variant is an error naming it, before the first variant's pretraining."""
    (tmp_path / "pre.yaml").write_text("run_dir: unused\nmodel: {preset: tiny}\ntrain: {max_steps: 1}\n")
    (tmp_path / "suite.yaml").write_text("tasks: [sst2]\n")
    variants = {"fine": {}, "typo": {"model.overrides.split_sise": 8}, "bad-value": {"model.overrides.split_size": 0},
                "bad-key": {"data.mask_ratio": 0.3}, "bad-rate": {"data.mask_rate": 1.5},
                "short": {"data.seq_len": 3000}}  # 2^19-token batches are not a multiple of 3000
    (tmp_path / "variants.yaml").write_text(yaml.safe_dump({
        "pretrain_config": "pre.yaml", "suite": "suite.yaml", "output_dir": str(tmp_path / "abl"),
        "variants": variants}))
    calls = []
    with pytest.raises(ValueError) as e:
        ablation.ablation(options(tmp_path), pretrain_fn=lambda *a: calls.append(a))
    assert calls == [] and not (tmp_path / "abl").exists()
    message = str(e.value)
    assert "5 of 6 variants do not resolve" in message
    assert "variant 'typo'" in message and "'split_sise' (did you mean 'split_size'?)" in message
    assert "variant 'bad-value'" in message and "split_size" in message
    assert "variant 'bad-key'" in message and "'data.mask_ratio' (did you mean 'data.mask_rate'?)" in message
    assert "variant 'bad-rate'" in message and "data.mask_rate must be in (0, 1)" in message
    assert "variant 'short'" in message and "multiple of data.seq_len (3000)" in message
    assert "variant 'fine'" not in message

    # --dry-run: what each variant runs with and where its model goes, nothing written
    assert cli.main(["ablation", "--variants", str(tmp_path / "variants.yaml"), "--only", "fine", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "fine: (the recipe as it is)" in out and str(tmp_path / "abl" / "pretrain" / "fine" / "model") in out
    assert not (tmp_path / "abl").exists()
