"""Programmatic dependent launch (tvm_ext/codegen.py): on sm_90 every kernel of every CUDA
template opens with griddepcontrol.wait before it touches global memory and is launched with
TVM's PDL flag (the SGEMM's where its grid is at most one block an SM; the wgmma kernel's unless
its grid is at most one block an SM and an SM holds two of its blocks); not on sm_80, nor with
TVM_EXT_PDL=0."""
import re

import pytest

from tvm_ext.codegen import PDL_TAG
from tvm_ext.target import cuda_target
from tvm_ext.task import Task
from tvm_ext.workload import Workload

CASES = [  # template, workload, knob values (split_k 2: two kernels)
    ("dense_mma.cuda", Workload.create("dense", (64, 128, 4096), "float16", "float16"),
     {"split_k": 2, "slice_k": 1}),
    ("dense_wgmma.cuda", Workload.create("dense", (128, 256, 256), "float16", "float16"), {}),
    ("batch_matmul_tensorcore.cuda",
     Workload.create("batch_matmul", (2, 64, 64, 64), "int8", "int32"), {}),
    ("batch_matmul.cuda", Workload.create("batch_matmul", (2, 64, 64, 64)), {}),
    ("dense_small_batch.cuda", Workload.create("dense", (1, 256, 256), "float16"), {}),
]


def _kernels(src):
    """(parameter names, body) of each kernel definition of a CUDA source."""
    found = list(re.finditer(
        r'extern "C" __global__ void (?:__launch_bounds__\(\d+\) )?\w+\(([^)]*)\) \{', src))
    ends = [m.start() for m in found[1:]] + [len(src)]
    return [(re.findall(r"(\w+)(?:,|$)", m.group(1)), src[m.end():e])
            for m, e in zip(found, ends)]


def _build(template, wl, values, arch, tmp_path):
    task = Task(wl, cuda_target(arch), template=template)
    cfg = task.config_with(values)
    assert task.space.is_valid(cfg), task.space.violations(cfg)
    ex = task.build(cfg)
    lib = tmp_path / f"{template}_{arch}.so"
    ex.mod.export_library(str(lib))
    return ex.mod.imports[0].inspect_source(), lib.read_bytes()


@pytest.mark.parametrize("template,wl,values", CASES, ids=[c[0] for c in CASES])
def test_sm90_kernels_wait_for_the_grid_before_any_global_access(template, wl, values,
                                                                 tmp_path):
    src, lib = _build(template, wl, values, "sm_90", tmp_path)
    kernels = _kernels(src)
    assert len(kernels) == (2 if values.get("split_k") else 1)
    for params, body in kernels:
        wait = body.index("tvm_builtin_ptx_griddepcontrol_wait();")
        assert body.index("tvm_builtin_ptx_griddepcontrol_launch_dependents();") > wait
        first_global = min(m.start() for p in params for m in re.finditer(rf"\b{p}\b", body))
        assert wait < first_global, (params, body[:600])
    assert lib.count(PDL_TAG.encode()) == len(kernels)  # the launch flag of each kernel


@pytest.mark.parametrize("shape,early", [((512, 768, 768), True), ((512, 3072, 768), False)])
def test_sgemm_launches_early_only_a_grid_of_one_block_an_sm(shape, early, tmp_path):
    """dense_sgemm.cuda: 96 blocks of 64 x 64 on 132 SMs are launched with PDL; 192 of
    64 x 128 are not (launched early after a kernel of 96 blocks, they ran 1.4x slower on the
    H200)."""
    wl = Workload.create("dense", shape, layout="NT", epilogue="bias+gelu_tanh")
    values = dict(block_m=64, block_n=64 if early else 128, slice_k=4 if early else 1)
    src, lib = _build("dense_sgemm.cuda", wl, values, "sm_90", tmp_path)
    assert ("griddepcontrol" in src) == early
    assert lib.count(PDL_TAG.encode()) == (1 if early else 0)


@pytest.mark.parametrize("shape,values,early", [
    ((512, 768, 3072), {}, True),  # the fallback: a 128 KB ring, one block an SM
    ((512, 768, 3072), {"block_k": 64, "stages": 4}, False),  # 64 KB: 3 an SM, 96 blocks
    ((512, 768, 3072), {"block_n": 128, "block_k": 64, "stages": 4}, False),  # 96 KB: 2, 48
    ((512, 3072, 768), {"block_n": 128, "block_k": 64, "stages": 4}, True),  # 192 blocks
], ids=["fallback", "ring_64k", "ring_96k", "two_waves"])
def test_wgmma_launches_early_no_grid_whose_blocks_could_pile_up(shape, values, early,
                                                                 tmp_path):
    """dense_wgmma.cuda, the f16 block's down projection (512x768x3072: 96 blocks of 64 x 64
    on 132 SMs): launched early with a 64 KB ring, its blocks piled up on the SMs the up
    projection left free (19.4 us in the block, 13.8 with TVM_EXT_PDL=0, H200). Its fallback
    takes a ring that an SM holds once (launched early: 10.2 us); a grid of at most one block
    an SM whose SMs hold two or more is launched without PDL; a larger grid with it (the up
    projection, 192 blocks: 8.0 us with, 8.3 without)."""
    from tvm_ext.ops.cuda_wgmma import one_block_an_sm
    wl = Workload.create("dense", shape, "float16", "float16", layout="NT",
                         epilogue="bias+residual")
    task = Task(wl, cuda_target("sm_90"), template="dense_wgmma.cuda")
    fallback = task.fallback_config()
    if shape[1] == 768:
        assert (fallback["block_k"].val, fallback["stages"].val) == (128, 4)
        assert one_block_an_sm(task.space.names_of(fallback), task.facts)
    src, lib = _build("dense_wgmma.cuda", wl, values, "sm_90", tmp_path)
    assert ("griddepcontrol" in src) == early
    assert lib.count(PDL_TAG.encode()) == (1 if early else 0)


def test_wgmma_rule_counts_the_batch_and_the_shared_memory_an_sm_holds(tmp_path):
    """The grid counts the batch: attention's second product (48 x 2 x 1 blocks) takes a
    128 KB ring and is launched early, not with 64 KB; its first (48 x 2 x 2) is, with 64 KB;
    a shape family's kernel (its grid follows the shapes it is called on) keeps the 64-deep
    ring and its early launch. An SM holds two blocks of 113 KB, one of a byte more."""
    from tvm_ext.ops.common import blocks_by_shared_memory
    facts = {"max_shared_memory_optin": 232448}
    assert [blocks_by_shared_memory(n, facts) for n in (64 << 10, 113 << 10, (113 << 10) + 1,
                                                        227 << 10)] == [3, 2, 1, 1]
    wl = Workload.create("batch_matmul", (48, 128, 64, 128), "float16", "float16", layout="NN")
    task = Task(wl, cuda_target("sm_90"), template="batch_matmul_wgmma.cuda")
    fallback = task.fallback_config()
    assert (fallback["block_k"].val, fallback["stages"].val) == (128, 4)
    for values, early in (({}, True), ({"block_k": 64, "stages": 4}, False)):
        src, lib = _build("batch_matmul_wgmma.cuda", wl, values, "sm_90", tmp_path)
        assert ("griddepcontrol" in src) == early
    # the first product, 48 x 2 x 2 blocks: more than the SMs, launched early with 64 KB
    scores = Workload.create("batch_matmul", (48, 128, 128, 64), "float16", "float16")
    src, _ = _build("batch_matmul_wgmma.cuda", scores, {}, "sm_90", tmp_path)
    assert "griddepcontrol" in src
    family = Task(wl, cuda_target("sm_90"), template="batch_matmul_wgmma.cuda",
                  symbolic=True, granules={"B": 1, "M": 64, "N": 64})
    cfg = family.fallback_config()
    assert (cfg["block_k"].val, cfg["stages"].val) == (64, 4)
    assert "griddepcontrol" in family.build(cfg).mod.imports[0].inspect_source()


@pytest.mark.parametrize("arch,env", [("sm_80", None), ("sm_90", "0")])
def test_no_dependent_launch_before_sm90_or_when_turned_off(arch, env, monkeypatch, tmp_path):
    if env is not None:
        monkeypatch.setenv("TVM_EXT_PDL", env)
    template, wl, values = CASES[0]
    src, lib = _build(template, wl, values, arch, tmp_path)
    assert "griddepcontrol" not in src and PDL_TAG.encode() not in lib


def test_a_kernel_it_cannot_open_is_an_error():
    """A launch nest under a statement that ``with_dependent_launch`` does not walk (here an
    IfThenElse) would get the launch flag without its wait: refused."""
    from tvm import tirx
    from tvm.script import tirx as T
    from tvm_ext.codegen import with_dependent_launch

    @T.prim_func
    def kernel(A: T.Buffer((64,), "float32"), n: T.int32):
        if n > 0:
            tx = T.launch_thread("threadIdx.x", 64)
            A[tx] = T.float32(0)

    assert isinstance(kernel.body, tirx.IfThenElse)
    with pytest.raises(ValueError, match="IfThenElse"):
        with_dependent_launch(kernel)
