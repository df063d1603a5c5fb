"""The warp-specialised, persistent Hopper templates (*_wgmma_ws.cuda): offered on sm_90 only,
fallbacks valid, and their CUDA (TMA loads from host-encoded tensor maps, mbarrier ring,
setmaxnreg, the persistent tile loop) compiles for sm_90a with nvcc and no spills."""
import re
import shutil

import pytest

from cuda_helpers import cuda_source
from tvm_ext.ops.cuda_wgmma_ws import ws_smem_bytes
from tvm_ext.strategy import templates_for
from tvm_ext.target import cuda_target
from tvm_ext.task import Task
from tvm_ext.workload import Workload


def test_offered_on_sm90_only():
    wl = Workload.create("dense", (256, 512, 256), "float16", "float16", layout="NT")
    assert "dense_wgmma_ws.cuda" in [t.name for t in templates_for(wl, cuda_target("sm_90"))]
    assert "dense_wgmma_ws.cuda" not in [t.name for t in
                                         templates_for(wl, cuda_target("sm_80"))]
    odd = Workload.create("dense", (100, 512, 256), "float16", "float16", layout="NT")
    assert "dense_wgmma_ws.cuda" not in [t.name for t in
                                         templates_for(odd, cuda_target("sm_90"))]


def test_fallbacks_are_valid_and_fit():
    sm90 = cuda_target("sm_90", "h100")
    for op, shape in (("dense", (8192, 8192, 8192)), ("dense", (192, 320, 128)),
                      ("dense", (1024, 1024, 1024)), ("batch_matmul", (256, 1024, 1024, 128)),
                      ("batch_matmul", (3, 64, 64, 64))):
        task = Task(Workload.create(op, shape, "float16", "float16", layout="TN"), sm90,
                    template=f"{op}_wgmma_ws.cuda")
        fb = task.fallback_config()
        assert task.space.is_valid(fb), (shape, task.space.violations(fb))
        v = {k: fb[k].val for k in ("consumers", "block_n", "block_k", "stages", "pingpong")}
        assert ws_smem_bytes(**v) <= task.facts["max_shared_memory_optin"]
        # pingpong's 64-row tiles exactly where M is not a multiple of 128
        assert v["pingpong"] == int(shape[-3] % 128 != 0), (shape, fb)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
@pytest.mark.parametrize("op, layout, dtype, knobs", [
    ("dense", "NT", "float16", dict(consumers=2, pingpong=0, block_n=256, block_k=64,
                                    stages=4, wgmma_wait=0, raster=4)),
    ("batch_matmul", "NN", "bfloat16", dict(consumers=2, pingpong=1, block_n=128, block_k=128,
                                            stages=3, wgmma_wait=1, raster=2)),
], ids=["dense_nt_coop", "bmm_nn_bf16_pingpong"])
def test_codegen_compiles_for_sm90a(op, layout, dtype, knobs):
    target = cuda_target("sm_90", "h100")
    shape = (1024, 1024, 512) if op == "dense" else (4, 512, 512, 256)
    task = Task(Workload.create(op, shape, dtype, "float32", layout=layout), target,
                template=f"{op}_wgmma_ws.cuda")
    cfg = task.config_with(knobs)
    assert task.space.is_valid(cfg), task.space.violations(cfg)
    src = cuda_source(task, cfg)
    rank = 3 if op == "batch_matmul" else 2
    # A and B maps, by value (declaration and definition)
    assert src.count("const __grid_constant__ CUtensorMap") == 4
    assert f"cp.async.bulk.tensor.{rank}d.shared::cluster.global.mbarrier" in src
    assert "mbarrier.arrive.expect_tx" in src and "mbarrier.try_wait.parity" in src
    assert "setmaxnreg.dec.sync.aligned.u32 40;" in src
    assert "setmaxnreg.inc.sync.aligned.u32 232;" in src
    ty = "bf16.bf16" if dtype == "bfloat16" else "f16.f16"
    assert f"m64n{knobs['block_n']}k16.f32.{ty}" in src
    # persistent: one block per SM at most
    assert re.search(r"__launch_bounds__\(384\)", src)
    import os
    import subprocess
    import tempfile
    with tempfile.TemporaryDirectory() as d:  # one nvcc: the cubin, and ptxas -v's spills
        cu = os.path.join(d, "k.cu")
        with open(cu, "w") as f:
            f.write(src)
        out = subprocess.run(["nvcc", "-arch=sm_90a", "-cubin", "-Xptxas", "-v", cu,
                              "-o", cu + ".cubin"], capture_output=True, text=True)
        cubin = open(cu + ".cubin", "rb").read() if out.returncode == 0 else b""
    assert len(cubin) > 1000, out.stderr[-500:]
    assert "0 bytes spill stores" in out.stderr, out.stderr[-500:]
