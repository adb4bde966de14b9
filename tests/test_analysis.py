"""Analysis helpers: parameter counts per component, static-matrix statistics (appendix "Coupled vs. Decoupled Layers") and heatmaps."""

import numpy as np
import pytest
from conftest import seeded

from avey_b import AveyBForSequenceClassification, AveyBModel, presets
from avey_b.analysis import parameter_counts, plot_static_matrices, static_matrix_stats


def test_parameter_counts_add_up_by_component():
    cfg = presets.tiny(num_hidden_layers=4, mixing_bias=True, residual_scale=True, num_labels=3)
    counts = parameter_counts(AveyBForSequenceClassification(cfg))
    d, S, k, V, m = 32, 4, 2, 99, 128
    assert counts["embedding"] == V * d
    assert counts["compressor"] == S * (k + 1) * S
    assert counts["norm"] == 4 * d + d  # four layers + the final norm
    assert counts["enricher"] == 4 * (d * m + m)
    assert counts["fuser"] == 4 * (3 * d * d)
    assert counts["static_matrices"] == 2 * S * S
    assert counts["mixing_bias"] == 4 * S * (m // 4)
    assert counts["residual_scale"] == 4
    assert counts["head"] == d * 3 + 3
    assert counts["total"] == sum(p.numel() for p in AveyBForSequenceClassification(cfg).parameters())


@pytest.mark.parametrize("signed", ["signed", "unsigned"])
def test_static_matrix_statistics_match_numpy(signed):
    model = seeded(AveyBModel, presets.tiny(num_hidden_layers=4, static_weights=signed))
    rows = static_matrix_stats(model)
    assert [r["layer"] for r in rows] == [0, 2]
    for row in rows:
        w = model.layers[row["layer"]].mixer.weight.detach().double().numpy()
        w = np.abs(w) if signed == "unsigned" else w
        assert row["mean"] == pytest.approx(w.mean())
        assert row["std"] == pytest.approx(w.std(ddof=1))
        assert row["min"] == pytest.approx(w.min()) and row["max"] == pytest.approx(w.max())
        assert row["median"] == pytest.approx(np.median(w))
        assert row["mean_abs"] == pytest.approx(np.abs(w).mean())
        assert row["l1"] == pytest.approx(np.abs(w).sum()) and row["l2"] == pytest.approx(np.sqrt((w**2).sum()))
        assert row["frac_positive"] + row["frac_negative"] == pytest.approx(1.0)
        if signed == "unsigned":
            assert row["frac_negative"] == 0.0


def test_heatmap_is_written(tmp_path):
    model = seeded(AveyBModel, presets.tiny(num_hidden_layers=4))
    path = plot_static_matrices(model, str(tmp_path / "v.png"))
    assert (tmp_path / "v.png").stat().st_size > 1000
    assert open(path, "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError, match="no static layers"):
        plot_static_matrices(seeded(AveyBModel, presets.tiny(layer_pattern="all_dynamic")), str(tmp_path / "x.png"))
