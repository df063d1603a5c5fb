"""The warp-specialised, persistent Hopper templates (*_wgmma_ws.cuda): offered on sm_90 only,
fallbacks valid, and their CUDA (TMA loads from host-encoded tensor maps, mbarrier ring,
setmaxnreg, the persistent tile loop) compiles for sm_90a with nvcc and no spills."""
import re
import shutil

import pytest

from cuda_helpers import cuda_source, ptxas_verbose
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
    """The fallback of the H200 sweep: staged stores where the output takes them, 128 x 256
    tiles for deep K, 128 x 128 for shallow K, pingpong's 64-row tiles where 128-row ones
    would not fill the SMs (1024^3: 64 x 128, 128 tiles, one consumer each) or M is an odd
    multiple of 64 with tiles enough (pingpong)."""
    sm90 = cuda_target("sm_90", "h100")
    expect = {  # shape: (consumers, pingpong, block_n, stages, wgmma_wait, staged_store)
        ("dense", (8192, 8192, 8192), "float16"): (2, 0, 256, 3, 0, 1),
        ("dense", (8192, 8192, 8192), "float32"): (2, 0, 256, 2, 0, 1),
        ("batch_matmul", (256, 1024, 1024, 128), "float16"): (2, 0, 128, 4, 0, 1),
        ("dense", (1024, 1024, 1024), "float16"): (1, 0, 128, 6, 1, 1),
        ("dense", (192, 320, 128), "float16"): (1, 0, 64, 6, 1, 1),
        ("batch_matmul", (3, 64, 64, 64), "float16"): (1, 0, 64, 6, 1, 1),
        ("batch_matmul", (64, 192, 128, 128), "float16"): (2, 1, 128, 4, 0, 1),
    }
    for (op, shape, out), want in expect.items():
        wl = Workload.create(op, shape, "float16", out, layout="TN")
        task = Task(wl, sm90, template=f"{op}_wgmma_ws.cuda")
        fb = task.fallback_config()
        assert task.space.is_valid(fb), (shape, task.space.violations(fb))
        v = {k: fb[k].val for k in ("consumers", "block_n", "block_k", "stages", "pingpong",
                                    "staged_store")}
        assert ws_smem_bytes(**v, out_bytes=4 if out == "float32" else 2) \
            <= task.facts["max_shared_memory_optin"]
        assert (v["consumers"], v["pingpong"], v["block_n"], v["stages"],
                fb["wgmma_wait"].val, v["staged_store"]) == want, (shape, out, v)
        assert fb["stream_k"].val == 0  # stream-K only where a record chooses it
    # a 1-byte output is not staged (TMA boxes of 2- and 4-byte elements)
    wl = Workload.create("dense", (1024, 1024, 1024), "float16", "float32",
                         epilogue="cast:int8")
    fb = Task(wl, sm90, template="dense_wgmma_ws.cuda").fallback_config()
    assert fb["staged_store"].val == 0


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
@pytest.mark.parametrize("op, layout, dtype, knobs", [
    ("dense", "NT", "float16", dict(consumers=2, pingpong=0, block_n=256, block_k=64,
                                    stages=4, wgmma_wait=0, raster=4, staged_store=0)),
    ("batch_matmul", "NN", "bfloat16", dict(consumers=2, pingpong=1, block_n=128, block_k=128,
                                            stages=3, wgmma_wait=1, raster=2,
                                            staged_store=0)),
    ("batch_matmul", "TN", "float16", dict(consumers=2, pingpong=0, block_n=128, block_k=64,
                                           stages=3, wgmma_wait=0, raster=2, staged_store=1)),
    ("dense", "NN", "float16", dict(consumers=2, pingpong=1, block_n=128, block_k=64,
                                    stages=4, wgmma_wait=1, raster=2, staged_store=1,
                                    cluster=2)),
], ids=["dense_nt_coop", "bmm_nn_bf16_pingpong", "bmm_tn_staged_store", "dense_nn_cluster"])
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
    assert src.count("const __grid_constant__ CUtensorMap") == 4 + 2 * knobs.get(
        "staged_store", 0)
    assert f"cp.async.bulk.tensor.{rank}d.shared::cluster.global.mbarrier" in src
    assert "mbarrier.arrive.expect_tx" in src and "mbarrier.try_wait.parity" in src
    assert "setmaxnreg.dec.sync.aligned.u32 40;" in src
    assert "setmaxnreg.inc.sync.aligned.u32 232;" in src
    ty = "bf16.bf16" if dtype == "bfloat16" else "f16.f16"
    assert f"m64n{knobs['block_n']}k16.f32.{ty}" in src
    # persistent: one block per SM at most
    assert re.search(r"__launch_bounds__\(384\)", src)
    if knobs.get("cluster"):  # B's half boxes multicast; slots freed in both CTAs
        assert src.count(".multicast::cluster [") >= 1 and "(ushort)3" in src
        assert "mapa.shared::cluster.u32" in src
        assert "mbarrier.arrive.shared::cluster.b64 _," in src
        assert "fence.mbarrier_init.release.cluster;" in src
        assert src.count("tvm_builtin_cuda_cluster_sync();") == 2  # start and end
        assert "%cluster_ctarank" in src
    else:
        assert "multicast" not in src and "barrier.cluster" not in src
    if knobs.get("staged_store"):  # C's map too; stores through shared memory and TMA
        assert f"cp.async.bulk.tensor.{rank}d.global.shared::cta.bulk_group" in src
        assert "st.shared.v2.f32" in src and "cp.async.bulk.wait_group.read 0;" in src
        assert "fence.proxy.async.shared::cta" in src
    report = ptxas_verbose(src, "sm_90a")  # one nvcc: the cubin, and ptxas -v's spills
    assert "0 bytes spill stores" in report, report[-500:]


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_fp8_is_k_major_and_compiles_for_sm90a():
    """fp8 (e4m3 / e5m2) inputs: only the warp-specialised template takes them, only in layout
    NT (wgmma reads fp8 K-major), K a multiple of 128; the kernel issues m64nNk32 e4m3/e5m2
    wgmma on the 16-bit kernel's tiles (a stage of 128 fp8 = 128 bytes of K) and compiles for
    sm_90a with nvcc, no spills."""

    from tvm_ext.errors import TemplateError
    target = cuda_target("sm_90", "h100")
    wl = Workload.create("dense", (1024, 1024, 1024), "float8_e4m3fn", "float16", layout="NT")
    assert [t.name for t in templates_for(wl, target)] == ["dense_wgmma_ws.cuda"]
    with pytest.raises(TemplateError, match="wgmma reads fp8 operands K-major only"):
        templates_for(wl.with_(layout="NN"), target)
    with pytest.raises(TemplateError, match="fp8 K must be a multiple of 128"):
        templates_for(wl.with_(K=192), target)
    task = Task(Workload.create("batch_matmul", (2, 512, 512, 512), "float8_e5m2", "float32",
                                layout="NT", epilogue="scale:0.5+cast:bfloat16"), target,
                template="batch_matmul_wgmma_ws.cuda")
    fb = task.fallback_config()
    assert fb["block_k"].val == 128 and task.space.is_valid(fb)
    assert not task.space.is_valid(task.config_with({"block_k": 64}))  # 64 bytes of K
    src = cuda_source(task, fb)
    assert re.search(r"m64n\d+k32_f32_e5m2_e5m2", src) and not re.search(r"m64n\d+k16", src)
    assert "cp.async.bulk.tensor.3d.global.shared::cta.bulk_group" in src
    report = ptxas_verbose(src, "sm_90a")
    assert "0 bytes spill stores" in report, report[-500:]


def test_stream_k_partition_covers_every_step_once():
    """Stream-K's split of the shared tiles' K steps (``stream_k_plan``, and the runs and
    owners the kernel computes with ``stream_k_start`` / ``stream_k_owner``): every block's
    run is non-empty, every shared step is in exactly one run, and a tile's blocks are
    consecutive: the first begins it at K step 0 (it adds the others' sums and stores the
    tile) and the tile is the first of the others' runs (each block hands over one partial
    tile at most, so one workspace slot a block suffices)."""
    from operator import floordiv
    from tvm_ext.ops.cuda_wgmma_ws import stream_k_owner, stream_k_plan, stream_k_start
    assert stream_k_plan(264, 128, 132, 1) is None  # whole waves: nothing to balance
    assert stream_k_plan(4, 16, 132, 1) is None  # 64 steps for 132 blocks
    assert stream_k_plan(2048, 128, 132, 1) == (68, 15)  # 8192^3, 128 x 256 tiles
    assert stream_k_plan(2048, 128, 132, 2) == (200, 14)
    assert stream_k_plan(100, 8, 132, 2) == (100, 0)  # no whole wave to add
    checked = 0
    for tiles, kt_n, grid, waves in [(2048, 128, 132, 1), (2048, 128, 132, 2),
                                     (128, 8, 132, 1), (8, 64, 132, 1), (192, 16, 132, 2),
                                     (48, 4, 132, 1), (37, 5, 7, 1), (200, 3, 16, 2),
                                     (17, 3, 16, 2)]:
        plan = stream_k_plan(tiles, kt_n, grid, waves)
        assert plan is not None
        sk_tiles, dp = plan
        assert sk_tiles + dp * grid == tiles
        steps = sk_tiles * kt_n
        start = [stream_k_start(b, steps, grid, floordiv) for b in range(grid + 1)]
        assert start[0] == 0 and start[grid] == steps
        assert all(start[b + 1] > start[b] for b in range(grid))  # no empty run
        for gk in range(steps):
            b = stream_k_owner(gk, steps, grid, floordiv)
            assert start[b] <= gk < start[b + 1]
        for t in range(sk_tiles):
            first = stream_k_owner(t * kt_n, steps, grid, floordiv)
            last = stream_k_owner(t * kt_n + kt_n - 1, steps, grid, floordiv)
            assert start[first] <= t * kt_n  # begins the tile at its step 0
            for b in range(first + 1, last + 1):  # the tile is the first of their runs
                assert t * kt_n < start[b] < (t + 1) * kt_n
                assert start[b] // kt_n == t
        checked += 1
    assert checked == 9


def test_stream_k_space_rules():
    """stream_k needs cooperative consumers of one CTA, a last wave that the tiles leave
    partial, and (stream_k 2) a whole wave before it."""
    sm90 = cuda_target("sm_90", "h100")
    coop = dict(consumers=2, pingpong=0, block_n=256, block_k=64, stages=3, wgmma_wait=1,
                raster=1, staged_store=1)
    task = Task(Workload.create("dense", (8192, 8192, 8192), "float16", "float16",
                                layout="NT"), sm90, template="dense_wgmma_ws.cuda")
    assert all(task.space.is_valid(task.config_with({**coop, "stream_k": sk}))
               for sk in (0, 1, 2))
    assert not task.space.is_valid(task.config_with({**coop, "stream_k": 1, "cluster": 2}))
    assert not task.space.is_valid(task.config_with({**coop, "block_n": 128, "pingpong": 1,
                                                     "stream_k": 1}))
    whole = Task(Workload.create("dense", (1408, 3072, 1024), "float16", "float16",
                                 layout="NT"), sm90, template="dense_wgmma_ws.cuda")
    assert whole.space.is_valid(whole.config_with({**coop, "stream_k": 0}))  # 11 x 12 tiles
    assert not whole.space.is_valid(whole.config_with({**coop, "stream_k": 1}))
    small = Task(Workload.create("dense", (1024, 2048, 512), "float16", "float16",
                                 layout="NT"), sm90, template="dense_wgmma_ws.cuda")
    assert small.space.is_valid(small.config_with({**coop, "stream_k": 1}))  # 64 tiles
    assert not small.space.is_valid(small.config_with({**coop, "stream_k": 2}))


def test_stream_k_space_rule_is_the_kernels_plan():
    """The space files state stream-K's shared tiles as a "let" term (``sk_tiles``) and refuse
    a config without a plan; the kernel splits by ``stream_k_plan``. Both templates' terms and
    rule agree with it over tile counts, K steps, SM counts and waves: a valid config always
    has a plan, with the term's shared tiles."""
    from tvm_ext.ops.cuda_wgmma_ws import stream_k_plan
    from tvm_ext.space.expr import eval_expr
    from tvm_ext.space.spec import load_space_spec
    for template in ("dense_wgmma_ws.cuda", "batch_matmul_wgmma_ws.cuda"):
        spec = load_space_spec(template)
        term = spec["let"]["sk_tiles"]
        rule = next(c["expr"] for c in spec["constraints"] if "sk_tiles" in c["expr"])
        checked = 0
        for sms in (78, 114, 132):
            for tiles in (*range(1, 3 * sms + 5, 7), 2 * sms, 3 * sms, 2048):
                for k_steps, stream_k in ((1, 1), (8, 1), (128, 1), (8, 2), (128, 3)):
                    names = {"tiles": tiles, "num_sms": sms, "stream_k": stream_k,
                             "K": 64 * k_steps, "block_k": 64}
                    names["sk_tiles"] = eval_expr(term, names)
                    plan = stream_k_plan(tiles, k_steps, sms, stream_k)
                    if eval_expr(rule, names):
                        assert plan is not None and plan[0] == names["sk_tiles"], names
                        checked += 1
                    elif stream_k <= 1 + tiles // sms:  # only the plan's own conditions left
                        assert plan is None, names
        assert checked > 50, template


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
@pytest.mark.parametrize("op, shape, layout, knobs", [
    ("dense", (8192, 8192, 8192), "NT", dict(consumers=2, block_n=256, stages=3,
                                             wgmma_wait=1, raster=8, staged_store=1,
                                             stream_k=1)),
    ("batch_matmul", (3, 1024, 1024, 1024), "TN", dict(consumers=1, block_n=256, stages=4,
                                                       wgmma_wait=0, raster=1,
                                                       staged_store=0, stream_k=2)),
], ids=["dense_nt_staged_sk1", "bmm_tn_sk2"])
def test_stream_k_codegen_compiles_for_sm90a(op, shape, layout, knobs):
    """Stream-K's kernel: a kernel that zeroes the flags, then the GEMM on a grid of one block
    an SM; partial sums stored 16 bytes a lane, a release store of the flag, the finisher's
    relaxed polls of it with a sleep between them, closed by an acquire load, and its L2
    (``.cg``) reads of the partial sums; no spills.
    stream_k 0 is the kernel without any of it."""
    target = cuda_target("sm_90", "h100")
    task = Task(Workload.create(op, shape, "float16", "float16", layout=layout), target,
                template=f"{op}_wgmma_ws.cuda")
    cfg = task.config_with({**knobs, "pingpong": 0, "block_k": 64})
    assert task.space.is_valid(cfg), task.space.violations(cfg)
    src = cuda_source(task, cfg)
    assert len(re.findall(r'extern "C" __global__ void [^;]*\{', src)) == 2
    assert re.search(r"flag_ptr\[\(\(int\)threadIdx\.x\)\] = 0;", src)
    for ptx in ("st.global.v4.f32", "st.release.gpu.global.b32", "ld.relaxed.gpu.global.s32",
                "__nanosleep(", "ld.acquire.gpu.global.s32", "ld.global.cg.v4.f32"):
        assert ptx in src, ptx
    report = ptxas_verbose(src, "sm_90a")
    assert "0 bytes spill stores" in report, report[-500:]
    plain = cuda_source(task, task.config_with({**knobs, "pingpong": 0, "block_k": 64,
                                                "stream_k": 0}))
    assert "flag_ptr" not in plain and "ld.acquire" not in plain
    assert len(re.findall(r'extern "C" __global__ void [^;]*\{', plain)) == 1
