"""Bad configs fail at construction naming the field; bad inputs fail early with a message naming the problem."""

import pytest
import torch

from avey_b import AveyBConfig, AveyBForMaskedLM, AveyBModel
from avey_b.model import presets
from avey_b.testing import seeded


@pytest.mark.parametrize("overrides, field", [
    ({"num_retrieved_splits": -1}, "num_retrieved_splits"),
    ({"split_size": 0}, "split_size"),
    ({"hidden_size": 0}, "hidden_size"),
    ({"layer_pattern": "zigzag"}, "layer_pattern"),
    ({"layer_pattern": "SDS"}, "layer_pattern"),  # 3 letters for 2 layers
    ({"dynamic_normalization": "l2"}, "dynamic_normalization"),
    ({"ranker": "sideways"}, "ranker"),
    ({"enricher_activation": "tanh2"}, "enricher_activation"),
    ({"static_weights": "positive"}, "static_weights"),
    ({"parameterization": "loose"}, "parameterization"),
    ({"bypass_proportion": 0.3}, "bypass_proportion"),  # m_h = 38.4 is not an integer
    ({"hidden_size": 33, "bypass_proportion": 0.75}, "bypass_proportion"),  # tail 33 is odd
    ({"dynamic_temperature": 0.0}, "dynamic_temperature"),
    ({"hidden_dropout": 1.0}, "hidden_dropout"),
    ({"mixer_types": ["static"]}, "mixer_types"),
    ({"mixer_types": ["static", "coupled"]}, "coupled"),
])
def test_invalid_config_names_the_field(overrides, field):
    with pytest.raises(ValueError, match=field):
        presets.tiny(**overrides)


def test_misspelled_config_field_is_an_error_naming_the_closest_field(tmp_path):
    with pytest.raises(ValueError, match="unknown config key 'hidden_sise' \\(did you mean 'hidden_size'\\?\\)"):
        AveyBConfig(hidden_sise=32)
    with pytest.raises(ValueError, match="did you mean 'num_retrieved_splits'"):
        presets.tiny(num_retrieved_split=1)
    # keys transformers itself passes still load, and a saved config round-trips
    config = presets.tiny(num_labels=3, output_attentions=False, torch_dtype="float32", bos_token_id=1)
    config.save_pretrained(tmp_path)
    again = AveyBConfig.from_pretrained(tmp_path, num_labels=3)
    assert again.to_dict() == config.to_dict() | {"_name_or_path": again._name_or_path}
    import json

    saved = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps(saved | {"split_sise": 8}))
    with pytest.raises(ValueError, match="split_sise"):  # a typo in a config.json is caught on load too
        AveyBConfig.from_pretrained(tmp_path)


def test_generation_settings_of_an_older_config_json_load_and_are_dropped(tmp_path):
    """config.json files written by earlier transformers versions hold generation settings (``use_cache``,
    ``max_length``, ...), which transformers drops from every config: they load, and are not saved back."""
    import json

    presets.tiny().save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    older = {"use_cache": True, "max_length": 20, "num_beams": 1, "temperature": 1.0, "repetition_penalty": 1.0}
    (tmp_path / "config.json").write_text(json.dumps(saved | older))
    config = AveyBConfig.from_pretrained(tmp_path)
    assert not set(older) & set(config.to_dict())
    with pytest.raises(ValueError, match="unknown config key 'use_cahce'"):  # a typo of one is still an error
        AveyBConfig(use_cahce=True)


def test_release_config_keys_are_read_through_the_attribute_map(tmp_path):
    """The authors' config.json spells d, L, S, k as d_embed, n_layers, chunk_size, k (the release)."""
    import json

    (tmp_path / "config.json").write_text(json.dumps({
        "model_type": "avey-b", "vocab_size": 99, "d_embed": 32, "n_layers": 3, "chunk_size": 8, "k": 1,
        "hidden_size": 32, "max_position_embeddings": 2048, "eps": 1e-12,
    }))
    cfg = AveyBConfig.from_pretrained(tmp_path)
    assert (cfg.hidden_size, cfg.num_hidden_layers, cfg.split_size, cfg.num_retrieved_splits) == (32, 3, 8, 1)
    assert cfg.mixer_types == ["static", "dynamic", "static"]


def test_config_round_trip_keeps_every_knob(tmp_path):
    cfg = presets.tiny(ranker="bidirectional", dynamic_normalization="softmax", compressor=False,
                       layer_pattern="all_dynamic", mixing_bias=True)
    cfg.save_pretrained(tmp_path)
    loaded = AveyBConfig.from_pretrained(tmp_path)
    for key in ("ranker", "dynamic_normalization", "compressor", "layer_pattern", "mixer_types", "mixing_bias"):
        assert getattr(loaded, key) == getattr(cfg, key), key


def test_unknown_preset_is_named():
    with pytest.raises(ValueError, match="huge"):
        presets.get("huge")


@pytest.fixture
def model():
    return seeded(AveyBModel, presets.tiny())


def test_float_ids_are_rejected(model):
    with pytest.raises(TypeError, match="input_ids must be an integer tensor"):
        model(torch.rand(2, 5))


@pytest.mark.parametrize("bad", [99, 1000, -1])
def test_ids_out_of_range_are_rejected(model, bad):
    ids = torch.ones(2, 5, dtype=torch.long)
    ids[1, 3] = bad
    with pytest.raises(ValueError, match="out of range.*vocabulary has 99"):
        model(ids)


def test_mask_shape_mismatch_is_rejected(model):
    with pytest.raises(ValueError, match=r"attention_mask has shape \(2, 4\).*\(2, 5\)"):
        model(torch.ones(2, 5, dtype=torch.long), attention_mask=torch.ones(2, 4))


def test_mask_values_must_be_binary(model):
    with pytest.raises(ValueError, match="only 0"):
        model(torch.ones(2, 5, dtype=torch.long), attention_mask=torch.full((2, 5), 2))


def test_empty_batch_and_empty_sequences_are_rejected(model):
    with pytest.raises(ValueError, match="empty batch"):
        model(torch.ones(0, 5, dtype=torch.long))
    with pytest.raises(ValueError, match="length 0"):
        model(torch.ones(2, 0, dtype=torch.long))


def test_ids_and_embeds_together_or_neither_are_rejected(model):
    with pytest.raises(ValueError, match="exactly one"):
        model()
    with pytest.raises(ValueError, match="exactly one"):
        model(torch.ones(1, 3, dtype=torch.long), inputs_embeds=torch.zeros(1, 3, 32))


def test_inputs_embeds_with_wrong_width_are_rejected(model):
    with pytest.raises(ValueError, match="inputs_embeds must have shape"):
        model(inputs_embeds=torch.zeros(1, 3, 16))


def test_one_dimensional_ids_are_rejected(model):
    with pytest.raises(ValueError, match=r"shape \(batch, length\)"):
        model(torch.ones(5, dtype=torch.long))


def test_mlm_head_reports_bad_ids_too():
    mlm = seeded(AveyBForMaskedLM, presets.tiny())
    with pytest.raises(ValueError, match="out of range"):
        mlm(torch.full((1, 4), 500))


# ------------------------------------------------------------------ a model that is neither here nor on the Hub

#: Every verb that loads a model or tokenizer, with MODEL where the name goes (one per family of loaders).
MODEL_VERBS = {
    "serve": ["serve", "MODEL"],
    "export": ["export", "MODEL", "OUT/model.onnx"],
    "convert": ["convert", "MODEL", "OUT/converted"],
    "finetune": ["finetune", "--model", "MODEL", "--task", "sst2", "--lr", "1e-4", "--output-dir", "OUT/ft"],
    "finetune (own data)": ["finetune", "--task", "text-classification", "--model", "MODEL", "--train-file",
                            "OUT/t.csv", "--output-dir", "OUT/own"],
    "bench": ["bench", "run", "--models", "MODEL", "--lengths", "16", "--out", "OUT/bench.jsonl"],
    "niah generate (tokenizer)": ["niah", "generate", "--tokenizer", "MODEL", "--out", "OUT/niah"],
    "pretrain (model.init_from)": ["pretrain", "--config", "debug", "run_dir=OUT/run", "model.init_from=MODEL"],
}


@pytest.fixture
def offline_hub(tmp_path, monkeypatch):
    """The Hub offline and its cache empty: a Hub id is looked up in the cache only (no network)."""
    import huggingface_hub

    monkeypatch.chdir(tmp_path)  # relative names resolve under the test's directory
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub-cache"))


def run_verb(verb, name, out, capsys):
    from avey_b.cli import main

    argv = [a.replace("MODEL", name).replace("OUT", str(out)) for a in MODEL_VERBS[verb]]
    assert main(argv) == 1
    return capsys.readouterr().err


@pytest.mark.parametrize("verb", list(MODEL_VERBS))
def test_every_verb_says_a_missing_local_model_is_no_such_directory(verb, tmp_path, offline_hub, capsys):
    missing = str(tmp_path / "no" / "such" / "dir")
    err = run_verb(verb, missing, tmp_path, capsys)
    assert f"{missing!r} is not an existing local path (no such directory)" in err, err
    assert "cannot be a Hugging Face Hub id" in err and "Repo id must be" not in err, err


@pytest.mark.parametrize("verb", list(MODEL_VERBS))
def test_every_verb_says_a_hub_id_was_looked_up_on_the_hub_and_why_it_was_not_found(verb, tmp_path, offline_hub,
                                                                                   capsys):
    err = run_verb(verb, "runs/nomodel", tmp_path, capsys)  # a relative path that is not here reads as a Hub id
    assert "'runs/nomodel' is not an existing local path (no such directory)" in err, err
    assert "as a Hugging Face Hub id it is not in the local Hub cache" in err and "the Hub is offline" in err, err


@pytest.fixture
def hub_answers(tmp_path, monkeypatch):
    """The Hub online, its answers stood in for (tests never touch the network): every download raises
    ``hub_answers["error"]``, as huggingface_hub does for a missing repository or an unreachable Hub."""
    import huggingface_hub
    import transformers.utils.hub

    monkeypatch.chdir(tmp_path)
    for variable in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub-cache"))
    answer = {}

    def download(*args, **kwargs):
        raise answer["error"]

    monkeypatch.setattr(transformers.utils.hub, "hf_hub_download", download)
    monkeypatch.setattr(transformers.utils.hub, "snapshot_download", download)
    return answer


def hub_errors():
    from types import SimpleNamespace

    from huggingface_hub.errors import LocalEntryNotFoundError, RepositoryNotFoundError

    return {"no such repository": (RepositoryNotFoundError("404", response=SimpleNamespace(headers={}, request=None)),
                                   "is not a valid model identifier listed on 'https://huggingface.co/models'"),
            "unreachable": (LocalEntryNotFoundError("cannot connect"), "We couldn't connect to")}


@pytest.mark.parametrize("answer", ["no such repository", "unreachable"])
@pytest.mark.parametrize("verb", list(MODEL_VERBS))
def test_every_verb_says_a_hub_id_was_looked_up_on_the_hub_and_what_the_hub_answered(verb, answer, tmp_path,
                                                                                      hub_answers, capsys):
    hub_answers["error"], said = hub_errors()[answer]
    err = run_verb(verb, "runs/nomodel", tmp_path, capsys)
    assert "'runs/nomodel' could not be loaded: it is not an existing local path (no such directory), and as a " \
           "Hugging Face Hub id it was looked up on the Hub: " in err, err
    assert said in err, err
