"""The GPU suite (``pytest -m gpu``; skipped without CUDA): CUDA equals CPU, bf16 autocast is finite, compiled
equals eager at many lengths, the base model takes 96K tokens x batch 8 in bf16, gradient checkpointing, and the
ranker's vocabulary path chooses on CUDA what it chooses on CPU and what the dense path chooses."""

import random

import pytest
import torch

from avey_b import AveyBForMaskedLM, AveyBModel
from avey_b.model import presets

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]


def _inputs(B, N, d, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(B, N, d, generator=g)
    mask = torch.ones(B, N, dtype=torch.long)
    if B > 1:
        mask[-1, N // 2:] = 0
    return x, mask


def test_cuda_equals_cpu():
    torch.manual_seed(0)
    model = AveyBModel(presets.small(vocab_size=4096)).eval()
    x, mask = _inputs(2, 3000, 256)
    with torch.no_grad():
        cpu = model(inputs_embeds=x, attention_mask=mask).last_hidden_state
        gpu = model.cuda()(inputs_embeds=x.cuda(), attention_mask=mask.cuda()).last_hidden_state.cpu()
    keep = mask.bool()
    torch.testing.assert_close(gpu[keep], cpu[keep], rtol=1e-3, atol=1e-3)


def test_bf16_autocast_is_finite_and_close():
    torch.manual_seed(0)
    model = AveyBModel(presets.small(vocab_size=4096)).cuda().eval()
    x, mask = _inputs(4, 5000, 256)
    x, mask = x.cuda(), mask.cuda()
    with torch.no_grad():
        ref = model(inputs_embeds=x, attention_mask=mask).last_hidden_state
        with torch.autocast("cuda", dtype=torch.bfloat16):
            low = model(inputs_embeds=x, attention_mask=mask).last_hidden_state
    assert torch.isfinite(low).all()
    assert (low.float() - ref).abs().mean() < 0.05 * ref.abs().mean()


def test_compiled_equals_eager_at_random_lengths():
    torch.manual_seed(0)
    model = AveyBModel(presets.small(vocab_size=4096)).cuda().eval()
    compiled = torch.compile(model, dynamic=True)
    rng = random.Random(0)
    with torch.no_grad():
        for length in [1, 63, 64, 65] + [rng.randint(1, 20_000) for _ in range(8)]:
            x, mask = _inputs(2, length, 256, seed=length)
            x, mask = x.cuda(), mask.cuda()
            a = compiled(inputs_embeds=x, attention_mask=mask).last_hidden_state
            b = model(inputs_embeds=x, attention_mask=mask).last_hidden_state
            keep = mask.bool()
            torch.testing.assert_close(a[keep], b[keep], rtol=1e-3, atol=1e-3)


def test_base_takes_96k_tokens_times_batch_8_in_bf16():
    torch.manual_seed(0)
    model = AveyBModel(presets.base()).cuda().eval()
    ids = torch.randint(10, 50_000, (8, 98_304), device="cuda")
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        out = model(ids).last_hidden_state
    assert out.shape == (8, 98_304, 768) and torch.isfinite(out).all()


def test_gradient_checkpointing_gives_the_same_gradients():
    grads = []
    for checkpointing in (False, True):
        torch.manual_seed(0)
        model = AveyBForMaskedLM(presets.small(vocab_size=4096)).cuda().train()
        if checkpointing:
            # activation_checkpointing_enable: the 5.23+ name
            (getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable)()
        ids = torch.randint(10, 4096, (2, 2048), generator=torch.Generator().manual_seed(1)).cuda()
        model(ids, labels=ids).loss.backward()
        grads.append(model.model.embed_tokens.weight.grad.clone())
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-4, atol=1e-5)


def test_vocabulary_path_on_cuda_chooses_what_cpu_and_the_dense_path_choose():
    """The vocabulary path's operations (unique, GEMM, amax, embedding_bag, topk on float64 keys) on CUDA: the same
    choice as on CPU and as the dense path on CUDA, on repeated ids, and the same model outputs."""
    import torch.nn.functional as F

    from avey_b.model import ranker_fast

    config = presets.small(vocab_size=4096)
    g = torch.Generator().manual_seed(0)
    table = F.normalize(torch.randn(300, 256, generator=g), dim=-1)
    ids = torch.randint(0, 300, (2, 200, 64), generator=g)
    keep = torch.ones(2, 200, 64, dtype=torch.bool)
    keep[1, 150:] = False
    xn = table[ids] * keep.unsqueeze(-1)
    rule = {"k": config.num_retrieved_splits, "bidirectional": False}
    vocab = presets.small(vocab_size=4096, ranker_algorithm="vocabulary").execution
    cpu = ranker_fast.select(xn, keep, ids, **rule, execution=vocab)
    gpu = ranker_fast.select(xn.cuda(), keep.cuda(), ids.cuda(), **rule, execution=vocab)
    dense = ranker_fast.select(xn.cuda(), keep.cuda(), None, **rule, execution=config.execution)
    for a, b, c in zip(cpu, gpu, dense, strict=True):
        assert torch.equal(a, b.cpu()) and torch.equal(b, c)
    torch.manual_seed(0)
    model = AveyBModel(config).cuda().eval()
    text = torch.randint(10, 400, (2, 20_000), device="cuda")
    with torch.no_grad():
        outs = {}
        for algorithm in ("dense", "vocabulary"):
            model.config.ranker_algorithm = algorithm
            outs[algorithm] = model(text).last_hidden_state
    torch.testing.assert_close(outs["vocabulary"], outs["dense"], rtol=1e-4, atol=1e-4)
