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
