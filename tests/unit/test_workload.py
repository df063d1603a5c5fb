import pytest

from tvm_ext.errors import WorkloadError
from tvm_ext.workload import OUT_DTYPES, Workload, parse_shape


def test_args_roundtrip_all_layouts():
    for op, shape in (("batch_matmul", (2, 8, 16, 4)), ("dense", (8, 16, 4))):
        for layout in ("NN", "NT", "TN", "TT"):
            wl = Workload.create(op, shape, "float32", layout=layout)
            assert Workload.from_args(op, wl.to_args()) == wl


def test_legacy_autotvm_args():
    # TVM 0.8-0.19: (x, y, out_shape, out_dtype, transpose_a, transpose_b)
    wl = Workload.from_args("batch_matmul", [["TENSOR", [4, 64, 32], "float32"],
                                             ["TENSOR", [4, 48, 32], "float32"],
                                             None, "float32", False, True])
    assert (wl.batch, wl.M, wl.N, wl.K, wl.layout) == (4, 64, 48, 32, "NT")
    # before 0.8: (x, y), NT
    old = Workload.from_args("batch_matmul", [["TENSOR", [4, 64, 32], "float32"],
                                              ["TENSOR", [4, 48, 32], "float32"]])
    assert old == wl
    dense = Workload.from_args("dense", [["TENSOR", [16, 32], "float32"],
                                         ["TENSOR", [64, 32], "float32"], None, "float32"])
    assert (dense.M, dense.N, dense.K, dense.layout) == (16, 64, 32, "NT")


def test_parse_shape_errors():
    assert parse_shape("4x256x256x256", "batch_matmul") == (4, 256, 256, 256)
    assert parse_shape("128x3072x768", "dense") == (128, 3072, 768)
    for bad in ("4x64", "ax2x3x4", "-1x2x3x4", "0x2x3x4", "", "4x4x4x4x4"):
        with pytest.raises(WorkloadError, match="malformed shape"):
            parse_shape(bad, "batch_matmul")


def test_validation():
    with pytest.raises(WorkloadError, match="unknown op"):
        Workload.create("conv2d", (1, 2, 3, 4))
    with pytest.raises(WorkloadError, match="unsupported dtype"):
        Workload.create("dense", (1, 2, 3), "float8")  # the fp8 types are named in full
    with pytest.raises(WorkloadError, match="reduction sizes differ"):
        Workload.from_args("dense", [["TENSOR", [16, 32], "float32"],
                                     ["TENSOR", [64, 31], "float32"], None, "float32"])
    assert Workload.create("dense", (1, 2, 3), "float16").out_dtype == "float32"
    assert Workload.create("batch_matmul", (1, 2, 3, 4), "int8").out_dtype == "int32"


def test_out_dtypes_and_int32_indices():
    for dtype, outs in OUT_DTYPES.items():
        for out in outs:
            Workload.create("dense", (4, 4, 4), dtype, out)
        assert Workload.create("dense", (4, 4, 4), dtype).out_dtype == outs[0]
    with pytest.raises(WorkloadError, match="out_dtype int8 is not allowed for float32 inputs "
                                            r"\(allowed: float32\)"):
        Workload.create("dense", (4, 4, 4), "float32", "int8")
    with pytest.raises(WorkloadError, match="out_dtype float16 is not allowed for int8"):
        Workload.create("dense", (4, 4, 4), "int8", "float16")
    with pytest.raises(WorkloadError, match=r"batch_matmul 1x99999999x99999999x99999999: buffer "
                                            r"A 1x99999999x99999999 has 9999999800000001 "
                                            r"elements, more than int32 indices address"):
        Workload.create("batch_matmul", (1, 99999999, 99999999, 99999999))
    with pytest.raises(WorkloadError, match="buffer B 65536x65536 has 4294967296 elements"):
        Workload.create("dense", (1, 65536, 65536))
    # A 1x46340, B 46340x46340, C 1x46340: int32 indices still address B
    assert Workload.create("dense", (1, 46340, 46340)).nbytes == 4 * (46340 ** 2 + 2 * 46340)
