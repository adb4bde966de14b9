"""`avey-b demo`: the tour runs offline and prints what it claims (a padding-invariant batch, a timing per length)."""

import pytest

from avey_b import cli


@pytest.mark.slow
def test_demo_encodes_a_padded_batch_and_times_each_length(capsys):
    assert cli.main(["demo", "--lengths", "64", "300", "--threads", "1"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("PyTorch on cpu, fp32, 1 CPU thread ")  # --threads took effect, and it says so
    assert "tokenizer: byte-level BPE, 4096 tokens" in out and "model: Avey-B small" in out
    assert "(padding-invariant)" in out
    rows = [line.split() for line in out.splitlines()[-2:]]
    assert [int(r[0]) for r in rows] == [64, 300] and all(float(r[1]) > 0 for r in rows)


def test_demo_refuses_a_length_that_is_not_positive(capsys):
    assert cli.main(["demo", "--lengths", "0"]) == 1
    assert "avey-b demo: error: --lengths must be positive, got [0]" in capsys.readouterr().err
