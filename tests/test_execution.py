"""Execution settings (avey_b/model/execution.py): per model, read at every forward pass, never saved with the
architecture, and still read from the config.json of checkpoints saved when they were config fields."""

import json

import pytest
import torch

from avey_b import AveyBConfig, AveyBModel, ExecutionSettings
from avey_b.model import presets
from avey_b.model.execution import FIELDS
from avey_b.model.ranker import Ranker
from avey_b.model.ranker_fast import plan

OLD_STYLE = {"chunk_tokens": 8, "ranker_algorithm": "dense", "ranker_block_size": 128, "ranker_memory_mb": 64,
             "ranker_selection_precision": "bfloat16"}
#: the same settings by their names now (chunk_tokens is the old name of processor_chunk_tokens)
SETTINGS = {"processor_chunk_tokens": 8, **{k: v for k, v in OLD_STYLE.items() if k != "chunk_tokens"}}


def test_settings_are_not_saved_and_a_checkpoint_that_holds_them_loads_with_them(tmp_path):
    torch.manual_seed(0)
    model = AveyBModel(presets.tiny(**SETTINGS)).eval()
    assert model.config.execution == ExecutionSettings(**SETTINGS)
    model.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert not set(saved) & {*FIELDS, "execution", "_execution"}  # config.json holds the architecture
    assert AveyBModel.from_pretrained(tmp_path).config.execution == ExecutionSettings()
    # a config.json written when these were architecture fields: it loads, and the model runs with its settings
    (tmp_path / "config.json").write_text(json.dumps(saved | OLD_STYLE))
    loaded = AveyBModel.from_pretrained(tmp_path).eval()
    assert loaded.config.execution == ExecutionSettings(**SETTINGS)
    ids = torch.randint(0, 99, (2, 30), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(loaded(ids).last_hidden_state, model(ids).last_hidden_state)
    # and from_pretrained takes them by name, as transformers takes attn_implementation
    assert AveyBModel.from_pretrained(tmp_path, chunk_tokens=16).config.execution.processor_chunk_tokens == 16
    assert AveyBModel.from_pretrained(tmp_path, processor_chunk_tokens=32).config.processor_chunk_tokens == 32


def test_each_model_runs_with_its_own_settings_read_at_every_call():
    """Two models in one process: changing one model's settings changes that model at its next call, and only it
    (nothing of the package is shared state)."""
    a, b = AveyBModel(presets.tiny()).eval(), AveyBModel(presets.tiny()).eval()
    embeds = torch.randn(1, 20, 32)
    with torch.no_grad():
        a(inputs_embeds=embeds)
        a.config.ranker_algorithm = "vocabulary"  # needs token ids: an error at a's next call, none at b's
        with pytest.raises(ValueError, match="needs token ids"):
            a(inputs_embeds=embeds)
        b(inputs_embeds=embeds)
    assert b.config.execution == ExecutionSettings()
    a.config.tile_bytes = {**a.config.tile_bytes, ("cpu", 4): 4096}
    a.config.order_by_last_split = False
    assert a.config.execution.order_by_last_split is False and a.config.execution.tile_bytes["cpu", 4] == 4096
    assert plan(a.config.execution, 1, 64, 4, 4)[1] < plan(b.config.execution, 1, 64, 4, 4)[1]
    assert b.config.execution == ExecutionSettings() and Ranker(presets.tiny()).execution == ExecutionSettings()


def test_bad_settings_are_errors_that_name_them():
    with pytest.raises(ValueError, match="ExecutionSettings.processor_chunk_tokens must be an integer >= 1"):
        presets.tiny(processor_chunk_tokens=0)
    with pytest.raises(ValueError, match="'chunk_tokens' is the old name of 'processor_chunk_tokens'"):
        presets.tiny(chunk_tokens=8, processor_chunk_tokens=8)
    with pytest.raises(ValueError, match="ranker_memory_mb must be a number > 0"):
        ExecutionSettings(ranker_memory_mb=-1)
    with pytest.raises(ValueError, match="did you mean 'order_by_last_split'"):
        ExecutionSettings().replace(order_by_last_splits=False)
    with pytest.raises(ValueError, match="did you mean 'processor_chunk_tokens'"):
        AveyBConfig(processor_chunk_token=8)
    with pytest.raises(AttributeError, match="set an execution setting by name"):
        presets.tiny().execution = ExecutionSettings(processor_chunk_tokens=8)
    with pytest.raises(ValueError, match="ExecutionSettings.auto_min_splits must be an integer >= 1"):
        presets.tiny().auto_min_splits = 0
    with pytest.raises(ValueError, match="tile_bytes"):
        ExecutionSettings(tile_bytes={"cpu": 0})


def test_processor_chunk_tokens_by_device_unless_set():
    # left unset: CPU chunks stay cache-sized, a GPU gets chunks large enough to fill it; a number applies everywhere
    default = ExecutionSettings()
    assert default.processor_chunk_tokens is None and presets.tiny().processor_chunk_tokens is None
    assert (default.processor_chunk_tokens_for("cpu"), default.processor_chunk_tokens_for("cuda")) == (4096, 65536)
    assert ExecutionSettings(processor_chunk_tokens=512).processor_chunk_tokens_for("cuda") == 512
    assert presets.tiny(processor_chunk_tokens=64).execution.processor_chunk_tokens_for("cpu") == 64


def test_chunk_tokens_is_read_as_the_old_name_of_processor_chunk_tokens():
    """A keyword, an attribute, a replace and a model spec of the old name set the processor's chunk size."""
    from avey_b.utils.model_spec import build_config

    assert presets.tiny(chunk_tokens=8).execution == ExecutionSettings(processor_chunk_tokens=8)
    config = presets.tiny()
    config.chunk_tokens = 16
    assert config.processor_chunk_tokens == 16 and config.chunk_tokens == 16
    assert ExecutionSettings().replace(chunk_tokens=32).processor_chunk_tokens == 32
    assert build_config("avey-b-tiny:chunk_tokens=64").execution.processor_chunk_tokens == 64
    assert build_config("avey-b-tiny:processor_chunk_tokens=64").execution.processor_chunk_tokens == 64
