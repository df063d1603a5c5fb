"""The tutorials run (with a tiny budget) and do what they say."""
import os
import runpy

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_tune_batch_matmul_cpu(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    mod = runpy.run_path(os.path.join(ROOT, "tutorials", "tune_batch_matmul_cpu.py"))
    kernel, t_tuned, logged = mod["main"](["--trials", "4", "--shape", "2x64x64x64",
                                           "--log", "t.json"])
    assert kernel.choice.tuned and t_tuned > 0 and logged > 0
    assert sum(1 for _ in open(tmp_path / "t.json")) == 4


def test_shape_family(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    mod = runpy.run_path(os.path.join(ROOT, "tutorials", "shape_family.py"))
    lib, report, checked = mod["main"](["--shape", "1..2x16..32:16x512x64", "--target", "llvm",
                                        "--trials", "3", "--max-kernels", "2",
                                        "--tuner", "random"])
    assert checked == 4 and 1 <= len(lib.library.kernels) <= 2
    assert (tmp_path / "family_tutorial.so").stat().st_size > 0
    assert len(report.tuned) == 2
