"""The benchmark command runs end to end on tiny shapes (its numbers are not asserted)."""
import json

from tvm_ext import bench


def test_cpu_suite_quick(tmp_path, capsys):
    out = tmp_path / "rows.json"
    assert bench.main(["--suite", "cpu", "--quick", "--tune", "2", "--log",
                       str(tmp_path / "q.json"), "--repeat", "2", "--json", str(out)]) == 0
    rows = json.loads(out.read_text())
    assert len(rows) == 3 and all(r["ours_ms"] > 0 and r["ref_ms"] > 0 for r in rows)
    assert all(r["tuned"] == "tuned" for r in rows)
    assert "ratio" in capsys.readouterr().out


def test_unknown_suite(capsys):
    assert bench.main(["--suite", "tpu"]) == 2
    assert "unknown suite 'tpu'" in capsys.readouterr().err


def test_ratio_plot_from_rows(tmp_path):
    """--replot draws the ratio bars of an earlier --json (one bar per kernel kind)."""
    import pytest
    pytest.importorskip("matplotlib")
    rows = [{"name": f"w{i} dense 8x8x8 float32 NT [{kind}]", "ratio": r}
            for i in range(2) for kind, r in (("dlight", 0.5), ("fallback", float("inf")),
                                               ("tuned", 1.5))]
    src = tmp_path / "rows.json"
    src.write_text(json.dumps(rows))
    png = tmp_path / "rows.png"
    assert bench.main(["--replot", str(src), "--plot", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
