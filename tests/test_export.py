"""Export for every length: a torch.export program and an ONNX model (onnxruntime) with dynamic batch and length
equal the eager model — below k+1 splits, inside, past one ranker block, up to 16K tokens — with padding on any
side. The torch.export program is compared on repeated text, where exactly tied MaxSim scores are common: it applies
the eager paths' tie rule and keeps ties exact (eager takes its vocabulary path there). onnxruntime computes the same
scores to ~5e-7 but its kernels round some exactly tied scores apart (on a 40-id text, 108 of 10,713 tie groups,
1.8% of the choices), so the ONNX model is compared on distinct ids, where no two splits tie."""

import pytest
import torch

from avey_b import AveyBForMaskedLM, AveyBModel, cli
from avey_b.apps.export import Exportable, export_onnx, export_program, verify_onnx
from avey_b.model import presets

pytestmark = pytest.mark.slow
CONFIG = dict(vocab_size=20_000)  # tiny: S = 4, k = 2, so k + 1 splits = 12 tokens; ranker block 1,024 tokens


def inputs(batch, length, left=False, repeated=False):
    """Distinct ids within a row, or (``repeated``) ids from 40 of them: repeated text, with exact ties."""
    gen = torch.Generator().manual_seed(length)
    if repeated:
        ids = torch.randint(1, 41, (batch, length), generator=gen)
    else:
        ids = torch.stack([torch.randperm(19_999, generator=gen)[:length] + 1 for _ in range(batch)])
    mask = torch.ones_like(ids)
    if batch > 1:
        cut = max(1, length // 2)
        if left:
            mask[-1, :length - cut] = 0
        else:
            mask[-1, cut:] = 0
    return ids, mask


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return AveyBModel(presets.tiny(**CONFIG)).eval()


def test_torch_export_program_runs_at_every_length_and_batch(model):
    program = export_program(model).module()
    eager = Exportable(model, "last_hidden_state")
    for batch, length, left in [
            (1, 1, False), (2, 7, True), (3, 13, False), (1, 50, False), (2, 1100, True), (3, 3000, False)]:
        ids, mask = inputs(batch, length, left, repeated=True)
        with torch.no_grad():
            got, want = program(ids, mask), eager(ids, mask)
        torch.testing.assert_close(got[mask.bool()], want[mask.bool()], rtol=1e-5, atol=1e-5)


def test_onnx_model_runs_at_every_length_and_batch(model, tmp_path):
    import onnxruntime as ort

    path = export_onnx(model, tmp_path / "avey.onnx")
    assert verify_onnx(path, model, "last_hidden_state", lengths=(1, 7, 13, 50, 1100, 16_384)) <= 1e-4
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for batch, length, left in [(1, 5, False), (3, 333, True), (4, 2049, False)]:
        ids, mask = inputs(batch, length, left)
        got = torch.from_numpy(session.run(None, {"input_ids": ids.numpy(), "attention_mask": mask.numpy()})[0])
        with torch.no_grad():
            want = model(ids, attention_mask=mask).last_hidden_state
        torch.testing.assert_close(got[mask.bool()], want[mask.bool()], rtol=1e-4, atol=1e-4)


def test_export_verb_writes_and_verifies_a_masked_lm(tmp_path, capsys):
    torch.manual_seed(0)
    AveyBForMaskedLM(presets.tiny(**CONFIG)).save_pretrained(tmp_path / "ckpt")
    assert cli.main(["export", str(tmp_path / "ckpt"), str(tmp_path / "mlm.onnx"), "--head", "masked-lm"]) == 0
    out = capsys.readouterr().out
    assert (tmp_path / "mlm.onnx").is_file() and "onnxruntime matches the eager model" in out


def test_export_embedding_writes_a_directory_onnx_servers_load(tmp_path, capsys):
    """``--head embedding``: onnx/model.onnx with the embedding head's outputs beside config, tokenizer and the
    sentence-transformers configuration; onnxruntime gives the eager head's embeddings at any length and padding."""
    import onnxruntime as ort

    from avey_b import AveyBForSentenceEmbedding
    from avey_b import testing as toy

    toy.tokenizer(str(tmp_path / "ckpt"))
    torch.manual_seed(0)
    model = AveyBForSentenceEmbedding(presets.tiny(**CONFIG)).eval()
    model.save_pretrained(tmp_path / "ckpt")
    assert cli.main(["export", str(tmp_path / "ckpt"), str(tmp_path / "served"), "--head", "embedding"]) == 0
    assert "onnxruntime matches the eager model" in capsys.readouterr().out
    served = tmp_path / "served"
    for name in ("onnx/model.onnx", "config.json", "tokenizer.json", "modules.json", "1_Pooling/config.json"):
        assert (served / name).is_file(), name
    session = ort.InferenceSession(str(served / "onnx" / "model.onnx"), providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == ["input_ids", "attention_mask"]
    assert [o.name for o in session.get_outputs()] == ["last_hidden_state", "sentence_embedding"]
    for batch, length, left in [(1, 5, False), (3, 333, True), (2, 2049, False)]:
        ids, mask = inputs(batch, length, left)
        hidden, pooled = session.run(None, {"input_ids": ids.numpy(), "attention_mask": mask.numpy()})
        with torch.no_grad():
            want = model(ids, attention_mask=mask)
        torch.testing.assert_close(torch.from_numpy(pooled), want.pooler_output, rtol=1e-4, atol=1e-5)
        real = mask.bool()
        torch.testing.assert_close(torch.from_numpy(hidden)[real], want.last_hidden_state[real], rtol=1e-4, atol=1e-4)


def test_export_shows_none_of_the_exporters_known_harmless_warnings(model, tmp_path, recwarn, caplog, capfd):
    """torchvision's absence, torch's own LeafSpec deprecation, onnxscript's unfolded Splits and the axis-name
    notice appear on every export of this model and mean nothing to its user (see avey_b.apps.export); the export
    silences them, and only them."""
    import logging
    import warnings

    from avey_b.apps.export import HARMLESS_LOG_RECORDS, quiet_known_exporter_noise

    caplog.set_level(logging.WARNING)
    export_onnx(model, tmp_path / "avey.onnx")
    shown = [str(w.message) for w in recwarn] + [r.getMessage() for r in caplog.records]
    out, err = capfd.readouterr()
    shown += (out + err).splitlines()
    for known in ("torchvision is not installed", "isinstance(treespec, LeafSpec)", "Skipping constant folding",
                  "The axis name"):
        assert not [line for line in shown if known in line], (known, shown)

    # narrow: another warning, or another record of the same loggers, still shows
    with quiet_known_exporter_noise(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.warn("# The axis name: other will not be used", UserWarning, stacklevel=1)
        warnings.warn("some other FutureWarning", FutureWarning, stacklevel=1)
        for name, _ in HARMLESS_LOG_RECORDS:
            logging.getLogger(name).warning("another problem")
    assert [str(w.message) for w in caught] == ["# The axis name: other will not be used", "some other FutureWarning"]
    assert [r.getMessage() for r in caplog.records if r.name in dict(HARMLESS_LOG_RECORDS)] == ["another problem"] * 2
