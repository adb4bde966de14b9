"""Every shipped suite and variants file resolves without running anything: files, keys, tasks, models, values,
and the model directory each evaluation reads is the one a shipped pretraining writes.

Pretraining writes its model to ``<run_dir>/model`` (``avey_b/training/pretrain.py``; the training-loop tests load
it from there), so that is the path compared below.
"""

import dataclasses
import re
from pathlib import Path

import pytest
import yaml

from avey_b import AveyBConfig, configs
from avey_b import testing as toy
from avey_b.evaluation import sweep
from avey_b.evaluation.suites import SuiteConfig
from avey_b.evaluation.tasks import TASKS
from avey_b.studies import ablation
from avey_b.training.config import PretrainConfig, load_config
from avey_b.utils.model_spec import is_registered, parse_spec
from avey_b.utils.records import slug

EVAL = sorted((configs.CONFIG_DIR / "eval").glob("*.yaml"))
PRETRAIN = sorted((configs.CONFIG_DIR / "pretrain").glob("*.yaml"))
VARIANT_FILES = [p for p in EVAL if "variants" in yaml.safe_load(p.read_text())]
SUITES = [p for p in EVAL if p not in VARIANT_FILES]

#: ``AveyBConfig`` fields a shipped variant uses that another branch adds (a variant using one is skipped, with
#: the reason, until the field exists; then it is checked like the others, with no change here).
PENDING_FIELDS = {"ranker_placement": "the every-layer ranker of the appendix 'Ablation Study' (issue 30, item 4)"}


def _model_dirs_written_by_pretraining() -> set[Path]:
    return {Path(load_config(str(p)).run_dir) / "model" for p in PRETRAIN}


def test_the_shipped_files_are_found():
    assert {p.stem for p in SUITES} >= {"paper", "ablation", "tiny"}
    assert {p.stem for p in VARIANT_FILES} >= {"ablation_variants", "nsk_variants", "masking_base_variants",
                                               "masking_large_variants"}
    assert {p.stem for p in PRETRAIN} >= {"base", "large", "ablation-10b", "ablation-10b-large"}


@pytest.mark.parametrize("path", PRETRAIN, ids=lambda p: p.name)
def test_every_pretraining_recipe_resolves_to_a_model(path):
    cfg = load_config(str(path))  # every key known, values validated
    config = ablation.model_config_of(cfg)  # the model it pretrains, without weights
    assert config is not None
    if isinstance(config, AveyBConfig):
        assert cfg.train.global_batch_tokens % cfg.data.seq_len == 0


@pytest.mark.parametrize("path", SUITES, ids=lambda p: p.name)
def test_every_suite_resolves(path, tmp_path):
    suite = sweep.load_suite(str(path))  # every key known (a typo is an error)
    text = path.read_text()
    toy_dir = re.search(r"python -m avey_b\.testing --out (\S+)", text)
    if toy_dir:  # the suite documents the command that makes its models and data: run it into tmp_path
        toy.build_all(str(tmp_path))
        moved = yaml.safe_dump(dataclasses.asdict(suite)).replace(toy_dir.group(1), str(tmp_path))
        suite = SuiteConfig(**yaml.safe_load(moved))
    cells, output_dir, aggregate = sweep.build_cells(suite)  # tasks, settings, data keys
    assert cells and output_dir and aggregate in ("median", "best")
    assert set(suite.tasks) <= set(TASKS)
    written = _model_dirs_written_by_pretraining()
    for name, model in suite.models.items():
        model = model["model"] if isinstance(model, dict) else model  # per-model settings: {model: ..., key: ...}
        assert slug(name) == name, f"{path.name}: model name {name!r} would be reported as {slug(name)!r}"
        if toy_dir and model.startswith(str(tmp_path)):
            assert (Path(model) / "config.json").is_file(), f"{path.name}: {model} is not made by avey_b.testing"
        elif Path(model) in written:
            pass  # the model directory of a shipped pretraining recipe
        elif is_registered(parse_spec(model).name):
            pass  # a model spec built from its config (avey-b-base, bert-base, ...)
        else:  # otherwise it must be a Hub id: owner/name, nothing a local run directory looks like
            from huggingface_hub.utils import validate_repo_id

            assert model.count("/") == 1 and not model.startswith((".", "/", "runs/")), (
                f"{path.name}: model {name}: {model!r} is neither a Hub id, a model spec, nor the model directory a "
                f"shipped pretraining writes ({sorted(map(str, written))})")
            validate_repo_id(model)


def test_the_ablation_suite_reads_what_the_ablation_recipe_writes():
    suite = sweep.load_suite("ablation")
    assert set(suite.models.values()) == {str(Path(load_config("ablation-10b").run_dir) / "model")}


def _variants():
    for path in VARIANT_FILES:
        for name in ablation.load_variants(str(path)).variants:
            yield pytest.param(path, name, id=f"{path.stem}:{name}")


@pytest.mark.parametrize("path", VARIANT_FILES, ids=lambda p: p.name)
def test_every_variants_file_names_files_that_exist(path):
    spec = ablation.load_variants(str(path))
    assert ablation._beside(path, spec.pretrain_config, "pretrain").is_file()
    suite = ablation._beside(path, spec.suite, "eval")
    assert suite.is_file() and sweep.load_suite(str(suite)).tasks
    for name in spec.variants:
        assert slug(name) == name, f"{path.name}: variant {name!r} would be reported as {slug(name)!r}"


@pytest.mark.parametrize("path,name", list(_variants()))
def test_every_variant_resolves(path, name):
    """Its keys exist, its values validate (the model config is built, no weights), it changes what it says,
    and the evaluation reads the directory its pretraining writes."""
    spec = ablation.load_variants(str(path))
    overrides = spec.variants[name] or {}
    fields = AveyBConfig().to_dict()
    model_keys = {k.removeprefix("model.overrides."): v for k, v in overrides.items()
                  if k.startswith("model.overrides.")}
    for key in model_keys:
        if key not in fields and key in PENDING_FIELDS:
            pytest.skip(f"AveyBConfig has no field {key!r} yet: {PENDING_FIELDS[key]}")
        assert key in fields, f"{path.name}: variant {name}: {key!r} is not an AveyBConfig field"
    schema = set(configs.dotted_keys(PretrainConfig))
    for key in overrides:
        if not key.startswith("model.overrides."):
            assert key in schema, f"{path.name}: variant {name}: {key!r} is not a pretraining config key"

    pretrain_config = str(ablation._beside(path, spec.pretrain_config, "pretrain"))
    plan = ablation.plan_variant(name, overrides, pretrain_config, spec.output_dir)
    for key, value in model_keys.items():
        assert getattr(plan.model_config, key) == value, f"{name}: {key} did not reach the model config"
    for key, value in overrides.items():
        if not key.startswith("model.overrides."):
            node = plan.config
            for part in key.split("."):
                node = getattr(node, part)
            assert node == value, f"{name}: {key} did not reach the pretraining config"
    assert Path(plan.config.run_dir) / "model" == Path(plan.model_dir)
    assert plan.model_dir == ablation.variant_model_dir(spec.output_dir, name)


def test_the_nsk_grid_is_every_row_of_the_papers_table():
    """Appendix "What are the Best Sequence Length, Split Size, and Top-k Values?", table "conf-grid"."""
    paper = {512: {128: [1, 3], 256: [1]},
             1024: {128: [1, 3, 5, 7], 256: [1, 3], 512: [1]},
             2048: {128: [1, 3, 5, 7, 9, 11, 13, 15], 256: [1, 3, 5, 7], 512: [1, 3], 1024: [1]}}
    rows = {(n, s, k) for n, by_s in paper.items() for s, ks in by_s.items() for k in ks}
    spec = ablation.load_variants(str(configs.resolve("nsk_variants", "eval")))
    shipped = {(v["data.seq_len"], v["model.overrides.split_size"], v["model.overrides.num_retrieved_splits"])
               for v in spec.variants.values()}
    assert len(rows) == 25 and shipped == rows and len(spec.variants) == 25
    assert spec.pretrain_config == "ablation-10b" and spec.suite == "ablation"


@pytest.mark.parametrize("size,preset", [("base", "base"), ("large", "large")])
def test_the_masking_sweeps_are_the_papers(size, preset):
    """Appendix "What is the Best Masking Rate?": 10% to 50% for base and large, the ablation recipe otherwise."""
    spec = ablation.load_variants(str(configs.resolve(f"masking_{size}_variants", "eval")))
    assert sorted(v["data.mask_rate"] for v in spec.variants.values()) == [0.1, 0.2, 0.3, 0.4, 0.5]
    recipe = load_config(spec.pretrain_config)
    reference = load_config("ablation-10b")
    assert recipe.model.preset == preset and recipe.data == reference.data and recipe.optim == reference.optim
    assert recipe.train.max_tokens == reference.train.max_tokens == 10_000_000_000
    assert spec.output_dir not in {ablation.load_variants(str(p)).output_dir for p in VARIANT_FILES
                                   if p.stem != f"masking_{size}_variants"}  # never mixes another study's runs


def test_the_normalization_study_has_every_scheme_of_its_table():
    """Appendix "How to Normalize?": divide-by-sum (the default), RMS, softmax, scaled softmax; and "w/o
    normalization" of the "Ablation Study"."""
    variants = ablation.load_variants(str(configs.resolve("ablation_variants", "eval"))).variants
    schemes = {v.get("model.overrides.dynamic_normalization", AveyBConfig().dynamic_normalization)
               for v in variants.values() if set(v) <= {"model.overrides.dynamic_normalization"}}
    assert schemes == {"sum", "rms", "softmax", "scaled_softmax", "none"}
