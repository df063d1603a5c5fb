import os
import sys

import pytest

# tests/{unit,codegen,gpu} share the helpers here (faulty_ops, cuda_helpers) and tests/data.
TESTS = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(TESTS)
for path in (ROOT, TESTS):
    if path not in sys.path:
        sys.path.insert(0, path)


def _gpu_visible():
    if os.environ.get("TVM_EXT_NO_GPU"):
        return False
    try:
        import tvm
        return bool(tvm.cuda(0).exist)
    except Exception:
        return False


def pytest_collection_modifyitems(config, items):
    if any(item.get_closest_marker("gpu") for item in items) and not _gpu_visible():
        skip = pytest.mark.skip(reason="no CUDA GPU visible")
        for item in items:
            if item.get_closest_marker("gpu"):
                item.add_marker(skip)


@pytest.fixture
def tune_here(monkeypatch, capsys, tmp_path):
    """``tune_here(*args)``: ``python -m tvm_ext.tune ARGS`` run in this process, in
    ``tmp_path`` with no GPU visible, as the tests' ``cli`` runs it in a child; a
    ``CompletedProcess`` (its exit code, stdout, stderr). For the bad-input cases, which stop
    before anything is built: a child's Python start costs some 2.5 s a case (each test file
    keeps cases run in a child, for what a fresh process prints). Only the shipped templates
    are registered, as in a child: another test of this process may have added its own."""
    import subprocess

    from tvm_ext import strategy, target, tune
    monkeypatch.setattr(strategy, "_TEMPLATES", {t.name: t for t in strategy.BUILTIN})
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TVM_EXT_NO_GPU", "1")
    monkeypatch.delenv("TVM_CUDA_COMPILE_MODE", raising=False)  # restored after the test
    target._visible_gpu.cache_clear()

    def run(*args):
        capsys.readouterr()
        try:
            code = tune.main([str(a) for a in args])
        except SystemExit as exit_:
            code = exit_.code
        out = capsys.readouterr()
        return subprocess.CompletedProcess(args, code, out.out, out.err)
    yield run
    target._visible_gpu.cache_clear()  # seen again with this process's own environment
