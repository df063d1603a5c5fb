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
