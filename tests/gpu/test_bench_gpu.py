"""The GPU benchmark suite runs end to end on one workload (its numbers are not asserted)."""
import json

import pytest

from tvm_ext.bench.__main__ import main


@pytest.mark.gpu
def test_gpu_suite_row_samples_in_turn_and_replays_the_record(tmp_path, capsys):
    """One GPU workload end to end: cuBLAS, dlight, fallback and tuned rows (numerics checked),
    and the tuned row's record re-measured as the tuner measures it (replay check)."""
    out = tmp_path / "rows.json"
    assert main(["--suite", "gpu", "--only", "gemv_f16", "--repeat", "3",
                       "--json", str(out)]) == 0
    rows = json.loads(out.read_text())
    assert [r["name"].rsplit("[", 1)[1] for r in rows] == ["dlight]", "fallback]", "tuned]"]
    for r in rows:
        assert 0 < r["ref_ms"] < 1 and 0 < r["ours_ms"] < 1  # finite: built and correct
    tuned = rows[-1]
    assert tuned["recorded_ms"] > 0 and tuned["replay_ms"] > 0
    assert rows[0]["replay_ms"] is None and rows[1]["replay_ms"] is None
    assert "replay of the log's records" in capsys.readouterr().out
