"""The ablation command: variants -> pretraining entry point -> best-of-seeds sweep -> one row per variant."""

import json

import yaml

from avey_b import ablation
from avey_b import testing as toy


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
        "variants": {"base": {}, "no-ranker": {"model.overrides.ranker": "off"}, "broken": {"x": 1}},
    }))
    (tmp_path / "pre.yaml").write_text("run_dir: unused\n")
    calls = []

    def fake_pretrain(argv):
        # stands in for avey_b.training.pretrain.main: parse the overrides the way it does, build the model
        from avey_b.training.config import apply_overrides

        cfg = apply_overrides({}, [a for a in argv if "=" in a])
        calls.append(cfg)
        if "x" in cfg:
            return 3
        toy.avey_b(cfg["run_dir"] + "/model", tok, **cfg.get("model", {}).get("overrides", {}))
        return 0

    rc = ablation.main(["--variants", str(tmp_path / "variants.yaml")], pretrain_main=fake_pretrain)
    assert rc == 1  # the broken variant failed ...
    no_ranker = next(c for c in calls if c["run_dir"].endswith("no-ranker"))
    assert no_ranker["model"]["overrides"]["ranker"] == "off"  # a string, not YAML's False
    built = json.loads((tmp_path / "abl" / "pretrain" / "no-ranker" / "model" / "config.json").read_text())
    assert built["ranker"] == "off"
    rep = json.loads((tmp_path / "abl" / "eval" / "report.json").read_text())
    assert rep["aggregate"] == "best" and set(rep["models"]) == {"base", "no-ranker"}  # ... the others ran
    for name in ("base", "no-ranker"):
        assert rep["models"][name]["tasks"]["sst2"]["n_seeds"] == 2

    calls.clear()  # rerun: finished pretraining and finished cells are skipped
    assert ablation.main(["--variants", str(tmp_path / "variants.yaml"), "--only", "base", "no-ranker"],
                         pretrain_main=fake_pretrain) == 0
    assert calls == []
