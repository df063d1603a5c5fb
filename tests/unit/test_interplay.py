"""numpy's BLAS threads and TVM's (issue 25, item 3): the bench that measures them in fresh
processes, and ``pool_yields``, which makes TVM's workers sleep as soon as a kernel ends."""
import os

import pytest

from tvm_ext.bench import interplay
from tvm_ext.codegen import pool_yields


def test_interplay_bench_times_both_libraries_under_both_spin_settings(capsys):
    assert interplay.main(["--shape", "16x32x16", "--calls", "2"]) == 0
    out = capsys.readouterr().out
    lines = out.strip().splitlines()
    assert lines[0].startswith("dense 16x32x16 f32 NT")
    rows = lines[2:]
    assert [r[:14] for r in rows] == [label[:14].ljust(14) for label, _ in interplay.SETTINGS]
    for row in rows:
        numbers = [float(x.strip("()x")) for x in row.split()[-6:]]
        assert all(x > 0 for x in numbers)


def test_interplay_refuses_a_bad_shape():
    with pytest.raises(SystemExit):
        interplay.main(["--shape", "16x32"])


def test_pool_yields_sets_tvms_spin_count_unless_the_user_did(monkeypatch):
    monkeypatch.delenv("TVM_THREAD_POOL_SPIN_COUNT", raising=False)
    assert pool_yields() is True
    assert os.environ["TVM_THREAD_POOL_SPIN_COUNT"] == "0"
    monkeypatch.setenv("TVM_THREAD_POOL_SPIN_COUNT", "1000")
    assert pool_yields() is False
    assert os.environ["TVM_THREAD_POOL_SPIN_COUNT"] == "1000"
