import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


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
