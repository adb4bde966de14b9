"""transformers' own common model tests (``ModelTesterMixin`` of the installed transformers release) on every
public Avey-B class, except the ones about attention, which Avey-B does not have.

The mixin ships in transformers' source distribution, not in its wheel, so this module runs only when
``TRANSFORMERS_TESTS_DIR`` names a directory holding ``test_modeling_common.py`` and
``test_configuration_common.py`` of the installed release; otherwise it is skipped (tests never download).
``bash tests/transformers_common.sh`` fetches them from PyPI and runs this module.
"""

import importlib
import os
import shutil
import sys
import tempfile
import unittest
from pathlib import Path

import pytest
import torch

import avey_b
from avey_b.model import presets

SOURCE = os.environ.get("TRANSFORMERS_TESTS_DIR")
if not SOURCE or not (Path(SOURCE) / "test_modeling_common.py").is_file():
    pytest.skip("set TRANSFORMERS_TESTS_DIR to transformers' tests/ (bash tests/transformers_common.sh does)",
                allow_module_level=True)


def _load_mixin(tmp: Path):
    """transformers' test helpers as a package; the exporter and generation mixins they import (which the
    source distribution does not ship, and which concern no encoder) are empty stand-ins."""
    pkg = tmp / "tf_common_tests"
    for sub in ("", "exporters", "generation"):
        (pkg / sub).mkdir(parents=True, exist_ok=True)
        (pkg / sub / "__init__.py").write_text("")
    for name in ("test_modeling_common.py", "test_configuration_common.py"):
        shutil.copy(Path(SOURCE) / name, pkg / name)
    (pkg / "exporters" / "test_export.py").write_text("class ExportTesterMixin:\n    pass\n")
    (pkg / "generation" / "test_utils.py").write_text("class GenerationTesterMixin:\n    pass\n")
    sys.path.insert(0, str(tmp))
    return importlib.import_module("tf_common_tests.test_modeling_common")


common = _load_mixin(Path(tempfile.mkdtemp(prefix="avey_b_tf_common_")))
ids_tensor, random_attention_mask = common.ids_tensor, common.random_attention_mask

# The mixin picks labels and input shapes by the class names of transformers' built-in mappings; list Avey-B's
# classes there as a built-in encoder's would be (the Auto registration of `import avey_b` does not touch them).
from transformers.models.auto import modeling_auto as _auto  # noqa: E402

for _names, _cls in ((_auto.MODEL_MAPPING_NAMES, "AveyBModel"),
                     (_auto.MODEL_FOR_MASKED_LM_MAPPING_NAMES, "AveyBForMaskedLM"),
                     (_auto.MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES, "AveyBForSequenceClassification"),
                     (_auto.MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES, "AveyBForTokenClassification"),
                     (_auto.MODEL_FOR_QUESTION_ANSWERING_MAPPING_NAMES, "AveyBForQuestionAnswering"),
                     (_auto.MODEL_FOR_MULTIPLE_CHOICE_MAPPING_NAMES, "AveyBForMultipleChoice")):
    _names["avey-b"] = _cls


class AveyBModelTester:
    batch_size, seq_length, vocab_size, hidden_size, num_hidden_layers = 3, 13, 99, 32, 2
    num_attention_heads = 1  # asked for by a few generic checks; Avey-B has no heads
    num_labels, num_choices, is_training = 3, 2, True

    def __init__(self, parent):
        self.parent = parent

    def get_config(self):
        return presets.tiny(num_labels=self.num_labels, hidden_size=self.hidden_size,
                            num_hidden_layers=self.num_hidden_layers)

    def prepare_config_and_inputs_for_common(self):
        ids = ids_tensor([self.batch_size, self.seq_length], self.vocab_size)
        mask = random_attention_mask([self.batch_size, self.seq_length])
        return self.get_config(), {"input_ids": ids, "attention_mask": mask}


class AveyBCommonTest(common.ModelTesterMixin, unittest.TestCase):
    all_model_classes = (
        avey_b.AveyBModel, avey_b.AveyBForMaskedLM, avey_b.AveyBForSequenceClassification,
        avey_b.AveyBForTokenClassification, avey_b.AveyBForQuestionAnswering, avey_b.AveyBForMultipleChoice,
        avey_b.AveyBForSentenceEmbedding, avey_b.AveyBForMultiVector,
    )
    test_resize_embeddings = True
    test_torch_exportable = False  # the mixin exports at one fixed shape; tests/test_export.py covers every length
    has_attentions = False

    def setUp(self):
        self.model_tester = AveyBModelTester(self)

    def _prepare_for_class(self, inputs_dict, model_class, return_labels=False):
        inputs = super()._prepare_for_class(inputs_dict, model_class, return_labels=return_labels)
        if return_labels and model_class in (avey_b.AveyBForSentenceEmbedding, avey_b.AveyBForMultiVector):
            inputs["labels"] = torch.tensor([0, 0, 1])  # a positive pair and a lone input: the contrastive loss
        return inputs
