"""The token-classification head the evaluation adds for an encoder whose code has none (NeoBERT's Hub code ships
masked-LM and sequence-classification heads only): built on the encoder's AutoModel, the authors' head shape,
trainable, saved and reloaded whole; encoders that have their own head keep it."""

import pytest
import torch
from transformers import (
    AutoConfig,
    AutoModel,
    BertConfig,
    BertForTokenClassification,
    BertModel,
    PretrainedConfig,
    PreTrainedModel,
)
from transformers.modeling_outputs import BaseModelOutput

from avey_b.evaluation.tasks import RunConfig
from avey_b.evaluation.tasks.base import EncoderTokenClassifier, load_model


class HeadlessConfig(PretrainedConfig):
    model_type = "headless-encoder-test"

    def __init__(self, vocab_size=50, hidden_size=16, **kwargs):
        super().__init__(**kwargs)
        self.vocab_size, self.hidden_size = vocab_size, hidden_size


class HeadlessEncoder(PreTrainedModel):
    """An encoder with a base model only, registered with AutoConfig/AutoModel and nothing else (as NeoBERT)."""

    config_class = HeadlessConfig

    def __init__(self, config):
        super().__init__(config)
        self.embed = torch.nn.Embedding(config.vocab_size, config.hidden_size)
        self.mix = torch.nn.Linear(config.hidden_size, config.hidden_size)
        self.post_init()

    def forward(self, input_ids=None, attention_mask=None, **kwargs):
        h = self.mix(self.embed(input_ids))
        return BaseModelOutput(last_hidden_state=torch.tanh(h) * attention_mask[..., None])


AutoConfig.register(HeadlessConfig.model_type, HeadlessConfig)
AutoModel.register(HeadlessConfig, HeadlessEncoder)


@pytest.fixture
def headless(tmp_path):
    torch.manual_seed(0)
    HeadlessEncoder(HeadlessConfig()).save_pretrained(tmp_path / "enc")
    return str(tmp_path / "enc")


def _batch():
    ids = torch.tensor([[1, 5, 7, 9, 2], [1, 4, 2, 0, 0]])
    return ids, (ids != 0).long()


def test_encoder_without_a_token_head_gets_the_authors_head(headless):
    labels = {0: "O", 1: "B-PER", 2: "I-PER"}
    model = load_model(headless, "token-classification", RunConfig(seed=0), num_labels=3, id2label=labels,
                       label2id={v: k for k, v in labels.items()})
    assert isinstance(model, EncoderTokenClassifier)
    assert model.config.num_labels == 3 and model.config.id2label == labels
    model.eval()
    ids, mask = _batch()
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask).logits
        hidden = model.encoder(input_ids=ids, attention_mask=mask).last_hidden_state
        by_hand = torch.tanh(hidden @ model.dense.weight.T + model.dense.bias) @ model.classifier.weight.T \
            + model.classifier.bias
    assert logits.shape == (2, 5, 3)
    torch.testing.assert_close(logits, by_hand)
    # the head starts as the authors': N(0, 0.02) weights, zero biases
    assert model.classifier.bias.abs().max() == 0 and 0.01 < model.dense.weight.std() < 0.03


def test_added_head_trains_and_round_trips(headless, tmp_path):
    model = load_model(headless, "token-classification", RunConfig(), num_labels=3)
    ids, mask = _batch()
    labels = torch.tensor([[-100, 1, 2, 0, -100], [-100, 1, -100, -100, -100]])
    out = model(input_ids=ids, attention_mask=mask, labels=labels)
    out.loss.backward()
    assert model.classifier.weight.grad.abs().sum() > 0 and model.encoder.mix.weight.grad.abs().sum() > 0
    with torch.no_grad():
        model.classifier.bias.add_(0.5)  # a trained head differs from a fresh one
    model.save_pretrained(tmp_path / "saved")
    again = load_model(str(tmp_path / "saved"), "token-classification", RunConfig(seed=1))
    model.eval()
    again.eval()
    with torch.no_grad():
        torch.testing.assert_close(again(input_ids=ids, attention_mask=mask).logits,
                                   model(input_ids=ids, attention_mask=mask).logits)


def test_bf16_weights_reach_the_added_head(headless):
    model = load_model(headless, "token-classification", RunConfig(weights_dtype="bfloat16"), num_labels=2)
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}


def test_encoders_with_their_own_token_head_keep_it(tmp_path):
    config = BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=32)
    BertModel(config).save_pretrained(tmp_path / "bert")
    model = load_model(str(tmp_path / "bert"), "token-classification", RunConfig(), num_labels=4)
    assert isinstance(model, BertForTokenClassification)
