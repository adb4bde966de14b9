"""Analysis helpers: parameter counts per component, static-matrix statistics (appendix "Coupled vs. Decoupled
Layers") and heatmaps."""

import numpy as np
import pytest

from avey_b import AveyBForSequenceClassification, AveyBModel
from avey_b.model import presets
from avey_b.studies.analysis import plot_static_matrices, static_matrix_stats
from avey_b.testing import seeded
from avey_b.utils.counting import parameter_counts


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


def test_analyze_weights_command_writes_the_appendix_table_and_heat_maps(tmp_path, capsys):
    """`avey-b analyze weights MODEL`: one row per static layer with the appendix's columns, values from V itself."""
    import csv
    import json

    from avey_b import AveyBForMaskedLM, cli
    from avey_b.studies.analysis import STAT_COLUMNS

    model = seeded(AveyBForMaskedLM, presets.tiny(num_hidden_layers=5))  # static layers 0, 2, 4
    model.save_pretrained(tmp_path / "model")
    out = tmp_path / "out"
    assert cli.main(["analyze", "weights", str(tmp_path / "model"), "--output", str(out)]) == 0
    assert {p.name for p in out.iterdir()} == {"static_layers.md", "static_layers.json", "static_layers.csv",
                                               "static_matrices.png"}
    assert (out / "static_matrices.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    record = json.loads((out / "static_layers.json").read_text())
    rows = record["rows"]
    assert [(r["static_layer"], r["layer"]) for r in rows] == [(1, 0), (2, 2), (3, 4)]
    assert set(rows[0]) == {"static_layer", "layer", *STAT_COLUMNS}
    table = list(csv.DictReader((out / "static_layers.csv").open()))
    assert [int(r["layer"]) for r in table] == [0, 2, 4]
    markdown = (out / "static_layers.md").read_text()
    assert "| Mean | Std | Min | Median | Max | Abs. Mean | L1 Norm | L2 Norm | Frac. Pos. | Frac. Neg. |" in markdown
    assert markdown.count("\n| ") == 1 + 3 + 1  # the header, a row per static layer, the Avg. row
    # by hand, for layer 2: its V as saved, and the paper's ten statistics
    w = model.model.layers[2].mixer.weight.detach().double().numpy().ravel()
    by_hand = {"mean": w.mean(), "std": w.std(ddof=1), "min": w.min(), "median": np.median(w), "max": w.max(),
               "mean_abs": np.abs(w).mean(), "l1": np.abs(w).sum(), "l2": np.sqrt((w ** 2).sum()),
               "frac_positive": (w > 0).mean(), "frac_negative": (w < 0).mean()}
    for key, value in by_hand.items():
        assert rows[1][key] == pytest.approx(value, rel=1e-6), key
        assert float(table[1][key]) == pytest.approx(value, rel=1e-6), key
    assert record["average"]["l2"] == pytest.approx(sum(r["l2"] for r in rows) / 3)
    assert f"| **Avg.** | | {record['average']['mean']:.4f} |" in markdown
    assert f"| 2 | 2 | {by_hand['mean']:.4f} | {by_hand['std']:.4f} |" in markdown


def test_analyze_weights_says_what_is_missing(tmp_path, monkeypatch, capsys):
    import sys

    from avey_b import cli

    seeded(AveyBModel, presets.tiny(layer_pattern="all_dynamic")).save_pretrained(tmp_path / "dynamic")
    assert cli.main(["analyze", "weights", str(tmp_path / "dynamic"), "--output", str(tmp_path / "o")]) == 1
    assert "no static layers" in capsys.readouterr().err
    assert cli.main(["analyze", "weights", str(tmp_path / "nowhere" / "model")]) == 1
    err = capsys.readouterr().err  # the loaders' one message (avey_b.utils.files.model_source)
    assert "is not an existing local path" in err and "cannot be a Hugging Face Hub id" in err
    seeded(AveyBModel, presets.tiny()).save_pretrained(tmp_path / "m")
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # the `analysis` extra is not installed
    assert cli.main(["analyze", "weights", str(tmp_path / "m"), "--output", str(tmp_path / "o")]) == 1
    assert "pip install 'avey-b[analysis]'" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()  # the error comes before any work
    assert cli.main(["analyze", "weights", str(tmp_path / "m"), "--output", str(tmp_path / "o"), "--no-heatmaps"]) == 0
    assert sorted(p.name for p in (tmp_path / "o").iterdir()) == ["static_layers.csv", "static_layers.json",
                                                                  "static_layers.md"]


def test_heat_maps_subsample_uniformly_like_the_paper():
    from avey_b.studies.analysis import subsample

    assert subsample(list(range(30)), 15) == list(range(1, 30, 2))  # static layers 2, 4, ..., 30 (1-based)
    assert {13, 21, 23, 25} <= set(subsample(list(range(30)), 15))  # the figure's coupled layers 14, 22, 24, 26
    assert subsample(list(range(10)), 4) == [1, 4, 7, 9]
    assert subsample(list(range(5)), 15) == list(range(5)) and subsample(list(range(5)), None) == list(range(5))


def test_paper_table_shows_15_uniformly_subsampled_coupled_layers_and_their_average(tmp_path):
    """`--paper-table`: the appendix's table "Layer statistics for coupled vs. decoupled settings" shows 15 of the
    coupled model's 30 static layers, numbered 1-15, and "Avg." over those 15 (not over all 30); a decoupled model's
    15 static layers are all shown."""
    import json

    from avey_b import AveyBForMaskedLM, cli

    coupled = seeded(AveyBForMaskedLM, presets.tiny(num_hidden_layers=30, parameterization="coupled"))
    coupled.save_pretrained(tmp_path / "coupled")
    out = tmp_path / "out"
    assert cli.main(["analyze", "weights", str(tmp_path / "coupled"), "--output", str(out), "--paper-table",
                     "--no-heatmaps"]) == 0
    record = json.loads((out / "static_layers.json").read_text())
    rows = record["rows"]
    assert record["static_layers"] == 30 and record["paper_table"] is True
    assert [r["table_row"] for r in rows] == list(range(1, 16))
    assert [r["layer"] for r in rows] == list(range(1, 30, 2))  # every second: the figure's 14, 22, 24, 26 in
    every = static_matrix_stats(coupled)
    shown = [every[r["layer"]] for r in rows]
    for key in ("mean", "l1", "frac_positive"):
        assert record["average"][key] == pytest.approx(sum(r[key] for r in shown) / 15)
        assert record["average"][key] != pytest.approx(sum(r[key] for r in every) / 30)  # not the 30-layer mean
    markdown = (out / "static_layers.md").read_text()
    assert "| Layer | Static layer | Model layer | Mean |" in markdown
    assert markdown.count("\n| ") == 1 + 15 + 1
    assert f"| 9 | 18 | 17 | {shown[8]['mean']:.4f} |" in markdown
    assert f"| **Avg.** | | | {record['average']['mean']:.4f} |" in markdown
    # without the flag: all 30 rows, as before
    assert cli.main(["analyze", "weights", str(tmp_path / "coupled"), "--output", str(tmp_path / "all"),
                     "--no-heatmaps"]) == 0
    assert len(json.loads((tmp_path / "all" / "static_layers.json").read_text())["rows"]) == 30
    decoupled = seeded(AveyBForMaskedLM, presets.tiny(num_hidden_layers=30))  # interleaved: 15 static layers
    decoupled.save_pretrained(tmp_path / "decoupled")
    assert cli.main(["analyze", "weights", str(tmp_path / "decoupled"), "--output", str(tmp_path / "d"),
                     "--paper-table", "--no-heatmaps"]) == 0
    rows = json.loads((tmp_path / "d" / "static_layers.json").read_text())["rows"]
    assert [r["layer"] for r in rows] == list(range(0, 30, 2)) and rows[-1]["table_row"] == 15
