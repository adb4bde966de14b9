"""torch.compile serves every length with a bounded number of graphs, runs the processor in chunks as the eager
forward does (memory linear in the length), and equals eager.

How the bound comes about: the ranker's selection (a loop over blocks of splits, whose trip count depends on
the length) runs eagerly outside the graph (``torch.compiler.disable``), and the model takes no branch on
length-dependent values while compiling. What remains are dynamo's own specializations of sizes 0 and 1: a
length of 1 token, and a length of one split (``N <= S``), each compile once more. So for one batch-size class
(1, or more than 1) the model compiles its graph pieces for at most three length classes — ``N = 1``,
``1 < N <= S`` and ``N > S`` (with and without a partial last split) — and never again, whatever the length.
"""

import random

import pytest
import torch
from torch._dynamo.utils import counters

from avey_b import AveyBModel
from avey_b.model import presets
from avey_b.model.ranker import Compressor

pytestmark = pytest.mark.slow


def test_random_lengths_compile_nothing_new_and_equal_eager():
    torch._dynamo.reset()
    counters.clear()
    torch.manual_seed(0)
    model = AveyBModel(presets.tiny()).eval()
    compiled = torch.compile(model, dynamic=True)
    g = torch.Generator().manual_seed(0)

    def run(length):
        # continuous inputs: token ids from a 99-word vocabulary repeat so often that exact MaxSim ties are common,
        # and a tie may be broken differently by a 1e-7 difference (compiled vs eager rounding)
        x = torch.randn(2, length, 32, generator=g)
        with torch.no_grad():
            torch.testing.assert_close(compiled(inputs_embeds=x).last_hidden_state,
                                       model(inputs_embeds=x).last_hidden_state, rtol=1e-4, atol=1e-4)

    for length in (1, 3, 4, 5, 8):  # the length classes: N = 1, N <= S (= 4), N > S with/without a partial split
        run(length)
    warm = counters["stats"]["unique_graphs"]
    assert warm <= 16
    rng = random.Random(0)  # the length classes are what matter; many chunks are the next test's
    for length in [rng.randint(1, 5_000) for _ in range(12)]:
        run(length)
    assert counters["stats"]["unique_graphs"] == warm  # no new graph for any length


def test_a_compiled_forward_over_many_chunks_equals_eager_with_one_graph_for_every_chunk(monkeypatch):
    """The processor runs in chunks of rows under torch.compile too (the chunk loop outside the graph, each chunk
    one compiled graph): with chunks of two rows, 25 to 50 chunks a batch, the outputs equal eager, with and without
    padding, and a length with another number of chunks compiles nothing new."""
    torch._dynamo.reset()
    counters.clear()
    torch.manual_seed(0)
    model = AveyBModel(presets.tiny(processor_chunk_tokens=8)).eval()  # two rows of S = 4 tokens a chunk
    compiled = torch.compile(model, dynamic=True)
    chunk_sizes = []
    real_compressor = Compressor.forward

    @torch.compiler.disable(recursive=False)  # the spy runs as Python; the compressor it calls is compiled
    def spy(self, x_cat, x):  # once per chunk of rows: (rows, (k+1)S, d)
        chunk_sizes.append(x_cat.shape[0])
        return real_compressor(self, x_cat, x)

    monkeypatch.setattr(Compressor, "forward", spy)

    g = torch.Generator().manual_seed(0)
    for length in (97, 100, 183, 200):  # with and without a partial last split (two length classes), then others
        x = torch.randn(2, length, 32, generator=g)  # continuous inputs: no exact MaxSim ties to round apart
        mask = torch.ones(2, length, dtype=torch.long)
        mask[1, length // 2:] = 0
        for kwargs in ({}, {"attention_mask": mask}):
            with torch.no_grad():
                want = model(inputs_embeds=x, **kwargs).last_hidden_state
                chunk_sizes.clear()
                got = compiled(inputs_embeds=x, **kwargs).last_hidden_state
            assert len(chunk_sizes) >= 25 and max(chunk_sizes) <= 2  # chunked while compiled
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
        if length == 100:
            warm = counters["stats"]["unique_graphs"]
    assert counters["stats"]["unique_graphs"] == warm  # other numbers of chunks: no new graph


def test_torchscript_tracing_fails_loudly_and_export_at_a_fixed_length_equals_eager():
    model = AveyBModel(presets.tiny()).eval()
    ids = torch.randint(1, 99, (2, 50), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[1, 30:] = 0
    with pytest.raises(NotImplementedError, match="does not support TorchScript tracing"):
        torch.jit.trace(lambda i, m: model(i, attention_mask=m).last_hidden_state, (ids, mask))

    class Encoder(torch.nn.Module):
        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask):
            return self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    wrapped = Encoder(model).eval()
    exported = torch.export.export(wrapped, (ids, mask))
    with torch.no_grad():
        torch.testing.assert_close(exported.module()(ids, mask)[mask.bool()], wrapped(ids, mask)[mask.bool()])
