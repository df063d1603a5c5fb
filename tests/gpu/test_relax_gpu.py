"""Relax on a GPU: a matmul with its epilogue fused into our kernel runs right."""
import os

import pytest
import tvm

from relax_helpers import check_fused

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.gpu
def test_epilogue_fused_on_gpu():
    from tvm_ext.target import default_target
    check_fused(default_target(), tvm.cuda(0))
