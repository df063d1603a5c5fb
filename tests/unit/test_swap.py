"""dense_swap.x86: the dense computed as its transposed product C^T = W A^T (A packed, the
weight's rows broadcast, the tile written back transposed). Numerics over its layouts (NT,
TT), padded and prime sizes, epilogues and a Relax model; its space is dense_pack.x86's on
the view; where the strategy offers it. (Speed: ``python -m tvm_ext.bench --suite cpu``,
``bench.peak``.)"""
import numpy as np
import pytest
import tvm

from tvm_ext.dispatch import apply_history_best, choose
from tvm_ext.measure.check import OutputCheck, kernel_inputs
from tvm_ext.ops.x86_gemm import swapped
from tvm_ext.space import load_space_spec
from tvm_ext.strategy import templates_for
from tvm_ext.target import hardware_facts, host_cpu_target
from tvm_ext.task import Task
from tvm_ext.workload import Workload
from relax_helpers import kernels_called

CPU = host_cpu_target()
LANES = hardware_facts(CPU, "float32")["vector_lanes"]


def _check(task, cfg):
    wl = task.workload
    inputs = kernel_inputs(wl, np.random.default_rng(0))
    out = tvm.runtime.empty(wl.out_shape, wl.final_dtype, tvm.cpu())
    task.build(cfg).mod["main"](*(tvm.runtime.tensor(x) for x in inputs), out)
    assert OutputCheck(wl, inputs[0], inputs[1], extras=inputs[2:])(out.numpy()) is None


def test_the_view_is_the_transposed_product():
    wl = Workload.create("dense", (64, 3072, 768), layout="NT", epilogue="bias+relu")
    assert swapped(wl) == Workload.create("dense", (3072, 64, 768), layout="NT")
    for layout, seen in (("NN", "TT"), ("TN", "TN"), ("TT", "NN")):
        assert swapped(wl.with_(layout=layout, epilogue="")).layout == seen
    # its space: dense_pack.x86's knobs over N x M, with its own rule against non-temporal
    # stores (the tile is written back transposed)
    task = Task(wl.with_(epilogue=""), CPU, template="dense_swap.x86")
    assert (task.space.facts["M"], task.space.facts["N"]) == (3072, 64)
    pack = load_space_spec("dense_pack.x86")
    spec = load_space_spec("dense_swap.x86")
    assert spec["template"] == "dense_swap.x86" and spec["knobs"] == pack["knobs"]
    assert spec["constraints"][:-1] == pack["constraints"]
    cfg = task.fallback_config()
    assert cfg["tile_y"].size[-1] * cfg["tile_y"].size[-2] <= 3072  # rows: N's
    assert cfg["tile_x"].size[-1] % LANES == 0  # vector columns: M's
    big = task.space.config_from_values({**cfg.values_dict(), "nt_store": 1})
    assert any("written back transposed" in v for v in task.space.violations(big))


def test_strategy_offers_it_where_the_weight_is_the_larger_operand():
    def names(shape, layout="NT"):
        return [t.name for t in templates_for(Workload.create("dense", shape, layout=layout),
                                              CPU)]
    assert names((128, 3072, 768)) == ["dense_swap.x86", "dense_pack.x86"]
    assert names((64, 50257, 768), "TT") == ["dense_swap.x86", "dense_pack.x86"]
    assert names((64, 50257, 768), "NN") == ["dense_pack.x86"]  # a weight stored [K, N]
    assert names((128, 255, 768)) == ["dense_pack.x86"]  # N < 2 M
    assert names((LANES, 4096, 64)) == ["dense_pack.x86"]  # M under two vectors
    assert names((2 * LANES + 1, 4096, 64)) == ["dense_pack.x86"]  # M not whole vectors
    assert names((1, 4096, 4096))[0] == "dense_gemv.x86"


@pytest.mark.parametrize("shape,layout", [
    ((64, 512, 96), "NT"), ((32, 509, 131), "NT"), ((48, 200, 33), "TT"),
    ((32, 97, 17), "TT"), ((64, 130, 64), "TT"), ((32, 4099, 8), "NT")], ids=str)
def test_numerics_over_layouts_and_odd_sizes(shape, layout):
    """N and K primes or of few factors (the product's rows padded, K padded with zeros)."""
    wl = Workload.create("dense", shape, layout=layout)
    task = Task(wl, CPU, template="dense_swap.x86")
    picks = task.space.random_valid(np.random.default_rng(1), 2)
    for cfg in [task.fallback_config()] + [task.config(i) for i in picks]:
        _check(task, cfg)


@pytest.mark.parametrize("layout,epilogue", [("NT", "bias+gelu"), ("TT", "relu"),
                                             ("NT", "bias+relu+cast:float16")])
def test_epilogues_in_the_transposed_write_back(layout, epilogue):
    wl = Workload.create("dense", (2 * LANES, 200, 48), layout=layout, epilogue=epilogue)
    task = Task(wl, CPU)
    assert task.name == "dense_swap.x86"
    _check(task, task.fallback_config())


def test_the_write_back_is_vectorised_along_the_rows_of_c():
    """The tile's columns are unrolled and each column of the product (a row of C) stored
    as a vector: no scalar store per element."""
    wl = Workload.create("dense", (64, 512, 96), layout="NT")
    task = Task(wl, CPU, template="dense_swap.x86")
    cfg = task.space.config_from_values({**task.fallback_config().values_dict(),
                                         "tile_y": [-1, 8, 8], "tile_x": [-1, 1, 2 * LANES],
                                         "tile_inner": [-1, 8]})
    text = task.instantiate(cfg)["main"].script()
    write_back = text[text.rindex("T.unroll(") - 40:]
    assert f"T.unroll({2 * LANES})" in write_back and "T.vectorized(8)" in write_back
    assert write_back.index("T.unroll(") < write_back.index("T.vectorized(8)")
    assert "C_t[v1, v0] = C_local[v0, v1]" in write_back


def test_a_relax_linear_is_a_dense_nt_and_takes_the_swapped_kernel():
    """``matmul(x, permute_dims(W))`` (``nn.Linear``) of a weight given at each call: one
    kernel, a dense NT on W itself (no transpose of W), which is dense_swap.x86's."""
    from tvm import relax
    from tvm.script import relax as R

    from tvm_ext.relax import build
    from tvm_ext.relax import extract_tasks
    M, N, K = 2 * LANES, 256, 48
    bb = relax.BlockBuilder()
    x = relax.Var("x", R.Tensor((M, K), "float32"))
    w = relax.Var("w", R.Tensor((N, K), "float32"))
    with bb.function("main", [x, w]):
        with bb.dataflow():
            out = bb.emit_output(R.matmul(x, R.permute_dims(w)))
        bb.emit_func_output(out)
    wl = Workload.create("dense", (M, N, K), layout="NT")
    assert extract_tasks(bb.get(), CPU) == [(wl, 1)]  # what a model's tuning tunes
    rng = np.random.default_rng(0)
    a = rng.uniform(-1, 1, (M, K)).astype("float32")
    b = rng.uniform(-1, 1, (N, K)).astype("float32")
    for strategy in (False, True):
        with apply_history_best([]) as ctx:
            ex = build(bb.get(), CPU, strategy=strategy)
        assert [(c.workload, c.template) for c in ctx.report.choices] == \
            [(wl, "dense_swap.x86")]
        assert kernels_called(ex) == ["tvm_ext_matmul"]  # no transpose of W
        vm = relax.VirtualMachine(ex, tvm.cpu())
        got = vm["main"](tvm.runtime.tensor(a), tvm.runtime.tensor(b)).numpy()
        np.testing.assert_allclose(got, a @ b.T, rtol=1e-4, atol=1e-4)


def test_a_relax_linear_with_bias_and_relu_fused_into_the_swapped_kernel():
    """``relu(matmul(x, permute_dims(W)) + bias)`` built with ``fuse_epilogue``: one fused
    kernel, the subgraph task dense NT + bias+relu, dense_swap.x86's, numpy's answer."""
    from tvm import relax
    from tvm.script import relax as R

    from tvm_ext.relax import build, extract_tasks
    M, N, K = 2 * LANES, 192, 40
    bb = relax.BlockBuilder()
    x = relax.Var("x", R.Tensor((M, K), "float32"))
    w = relax.Var("w", R.Tensor((N, K), "float32"))
    bias = relax.Var("bias", R.Tensor((N,), "float32"))
    with bb.function("main", [x, w, bias]):
        with bb.dataflow():
            out = bb.emit_output(R.nn.relu(R.add(R.matmul(x, R.permute_dims(w)), bias)))
        bb.emit_func_output(out)
    wl = Workload.create("dense", (M, N, K), layout="NT", epilogue="bias+relu")
    assert extract_tasks(bb.get(), CPU, subgraphs=True) == [(wl, 1)]
    with apply_history_best([]) as ctx:
        ex = build(bb.get(), CPU, fuse_epilogue=True)
    assert [(c.workload, c.template) for c in ctx.report.choices] == [(wl, "dense_swap.x86")]
    rng = np.random.default_rng(1)
    a, b, c = (rng.uniform(-1, 1, s).astype("float32") for s in ((M, K), (N, K), (N,)))
    got = relax.VirtualMachine(ex, tvm.cpu())["main"](
        *(tvm.runtime.tensor(v) for v in (a, b, c))).numpy()
    np.testing.assert_allclose(got, np.maximum(a @ b.T + c, 0), rtol=1e-4, atol=1e-4)


def test_records_of_both_templates_rank_by_cost_and_a_template_can_be_asked_for():
    """A workload both templates take is served by its fastest record, whichever template's;
    ``choose(template=...)`` (a Relax matmul whose constant weight is prepacked) takes only
    that template's records, else its fallback."""
    from tvm_ext import record
    from tvm_ext.result import MeasureResult
    from tvm_ext.target import target_str

    wl = Workload.create("dense", (2 * LANES, 256, 48), layout="NT")
    swap, pack = (Task(wl, CPU, template=t) for t in ("dense_swap.x86", "dense_pack.x86"))

    def rec(task, cost):
        return record.decode(record.encode(target_str(CPU), task.name, wl,
                                           task.fallback_config(),
                                           MeasureResult([cost], 0, 1.0, 0.0)))
    for fast, slow in ((swap, pack), (pack, swap)):
        with apply_history_best([rec(fast, 1e-5), rec(slow, 2e-5)]):
            assert choose(wl, CPU)[1].template == fast.name
    with apply_history_best([rec(swap, 1e-5), rec(pack, 2e-5)]):
        task, choice = choose(wl, CPU, template="dense_pack.x86")
    assert task.name == "dense_pack.x86" and choice.tuned
    with apply_history_best([rec(swap, 1e-5)]):
        task, choice = choose(wl, CPU, template="dense_pack.x86")
    assert task.name == "dense_pack.x86" and not choice.tuned


@pytest.mark.parametrize("cores", [2, 16])
def test_the_fallback_gives_every_core_tasks_where_the_rows_are_padded(cores):
    """GPT-2's LM head swapped: 50257 rows (padded up to the register tile) and 2 column
    panels. The fallback's row tasks with the panels make two tasks a core or more (it made
    4 tasks on 16 cores: 19.1 ms against 4.6 tuned, Emerald Rapids), within the space."""
    target = {"kind": "llvm", "mcpu": "emeraldrapids", "num-cores": cores}
    task = Task(Workload.create("dense", (64, 50257, 768), layout="NT"), target,
                template="dense_swap.x86")
    cfg = task.fallback_config()
    (_, yo, yi), (_, xo, xi) = cfg["tile_y"].size, cfg["tile_x"].size
    tasks = -(-(-(-50257 // yi)) // yo) * -(-64 // (xo * xi))
    assert tasks >= 2 * cores and not task.space.violations(cfg), cfg


def test_a_relax_linear_of_a_batch_of_sequences_is_one_dense_nt_on_its_rows():
    """``matmul(x, permute_dims(W))`` with x [B, S, K] (a transformer's activations): one
    dense NT of B * S rows on W itself, x and the result reshaped as views (nothing copied),
    numpy's answer; the tasks a model's tuning extracts are that dense."""
    from tvm import relax
    from tvm.script import relax as R

    from tvm_ext.relax import build, extract_tasks
    B, S, N, K = 2, LANES, 160, 24
    bb = relax.BlockBuilder()
    x = relax.Var("x", R.Tensor((B, S, K), "float32"))
    w = relax.Var("w", R.Tensor((N, K), "float32"))
    with bb.function("main", [x, w]):
        with bb.dataflow():
            out = bb.emit_output(R.matmul(x, R.permute_dims(w)))
        bb.emit_func_output(out)
    wl = Workload.create("dense", (B * S, N, K), layout="NT")
    assert extract_tasks(bb.get(), CPU) == [(wl, 1)]
    with apply_history_best([]) as ctx:
        ex = build(bb.get(), CPU)
    assert [(c.workload, c.template) for c in ctx.report.choices] == [(wl, "dense_swap.x86")]
    assert kernels_called(ex) == ["tvm_ext_matmul"]  # no transpose of W, views (no copy)
    rng = np.random.default_rng(2)
    a, b = rng.uniform(-1, 1, (B, S, K)).astype("float32"), \
        rng.uniform(-1, 1, (N, K)).astype("float32")
    got = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(a),
                                                      tvm.runtime.tensor(b)).numpy()
    np.testing.assert_allclose(got, a @ b.T, rtol=1e-4, atol=1e-4)
