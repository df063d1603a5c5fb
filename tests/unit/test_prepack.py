"""Constant weights packed once at build time (issue 25): the prepacked kernel of a
dense_pack.x86 config answers as numpy in the layouts it takes, and a Relax model's constant
weight (only a constant, only where the tiles divide) is packed by ``build``."""
import sys

import numpy as np
import pytest
import tvm
from tvm import relax
from tvm.script import relax as R

import tvm_ext
import tvm_ext.relax as tr
from tvm_ext.codegen import compile_module
from tvm_ext.ops.x86_gemm import pack_weight, prepacked_kernel
from tvm_ext.relax.apply import ApplyTunedKernels, _mark
from tvm_ext.relax.legalize import legalize_as_strategy
from tvm_ext.relax.prepack import constant_weight_calls, prepack_constant_weights
from tvm_ext.target import host_cpu_target
from tvm_ext.task import Task
from tvm_ext.workload import Workload
from relax_helpers import kernels_called

CPU = host_cpu_target()


@pytest.mark.parametrize("layout", ["NT", "NN", "TN"])
@pytest.mark.parametrize("n", [96, 100])  # 100: a ragged last panel, zero columns cropped
def test_prepacked_kernel_numerics(layout, n):
    """Three row tasks; one panel a task and, prefetching the next task's panels, two (a
    ragged last task where n = 100: 7 panels of 16)."""
    wl = Workload.create("dense", (48, n, 40), layout=layout)
    task = Task(wl, CPU, template="dense_pack.x86")
    cfg = task.config_with({"tile_y": [-1, 2, 8], "tile_x": [-1, 1, 32], "tile_k": [-1, 4],
                            "tile_inner": [-1, 8]})
    two = task.config_with({"tile_y": [-1, 2, 8], "tile_x": [-1, 2, 16], "tile_k": [-1, 4],
                            "tile_inner": [-1, 4]})
    f = compile_module(tvm.IRModule({"main": prepacked_kernel(wl, cfg)}), CPU)["main"]
    rng = np.random.default_rng(0)
    a = rng.standard_normal(wl.a_shape).astype("float32")
    b = rng.standard_normal(wl.b_shape).astype("float32")
    out = tvm.runtime.empty(wl.out_shape, "float32", tvm.cpu())
    packed = pack_weight(wl, b, 32)
    assert packed.shape == (4 if n == 100 else 3, 40, 32) and not packed[-1, :, n % 32 or 32:].any()
    f(tvm.runtime.tensor(a), tvm.runtime.tensor(packed), out)
    expect = (a.T if wl.transpose_a else a) @ (b.T if wl.transpose_b else b)
    np.testing.assert_allclose(out.numpy(), expect, rtol=1e-4, atol=1e-4)
    for prefetch in (True, False):
        g = compile_module(tvm.IRModule({"main": prepacked_kernel(wl, two, 0, prefetch)}), CPU)
        out = tvm.runtime.empty(wl.out_shape, "float32", tvm.cpu())
        g["main"](tvm.runtime.tensor(a), tvm.runtime.tensor(pack_weight(wl, b, 16)), out)
        np.testing.assert_allclose(out.numpy(), expect, rtol=1e-4, atol=1e-4)
        assert ("prefetch" in g.mod.inspect_source("ll")) == prefetch  # llvm.prefetch
    # register rows that do not divide M (padded in the kernel): no prepacked kernel
    odd = Workload.create("dense", (50, n, 40), layout=layout)
    odd_task = Task(odd, CPU, template="dense_pack.x86")
    with pytest.raises(ValueError, match="no prepacked kernel"):
        prepacked_kernel(odd, odd_task.config_with({"tile_y": [-1, 1, 8]}))


def test_prefetch_batched_before_a_tiles_k_loop():
    """Prefetches before a register tile's K loop; at every K step (in it) where a tile would
    take over PREFETCH_BATCH lines. Both kernels answer as numpy."""
    rng = np.random.default_rng(2)
    for shape, (yo, yi, xo), in_k in (((48, 96, 40), (2, 8, 2), False),
                                      ((16, 32, 512), (1, 16, 1), True)):
        wl = Workload.create("dense", shape, layout="NT")
        cfg = Task(wl, CPU, template="dense_pack.x86").config_with({
            "tile_y": [-1, yo, yi], "tile_x": [-1, xo, 16], "tile_k": [-1, 4],
            "tile_inner": [-1, 4]})
        f = prepacked_kernel(wl, cfg)
        lines = [(len(s) - len(s.lstrip()), s.split()[:2]) for s in f.script().splitlines()]
        k0, q = (next(i for i, (_, w) in enumerate(lines) if w == ["for", v]) for v in ("k_0", "q"))
        dk, dq = lines[k0][0], lines[q][0]
        assert (q == k0 + 1 and dq > dk) if in_k else (q < k0 and dq == dk), shape
        a, b = (rng.standard_normal(s).astype("float32") for s in (wl.a_shape, wl.b_shape))
        out = tvm.runtime.empty(wl.out_shape, "float32", tvm.cpu())
        compile_module(tvm.IRModule({"main": f}), CPU)["main"](
            tvm.runtime.tensor(a), tvm.runtime.tensor(pack_weight(wl, b, 16)), out)
        np.testing.assert_allclose(out.numpy(), a @ b.T, rtol=1e-4, atol=1e-4)


def _model(weight_const: bool, n: int = 96):
    rng = np.random.default_rng(1)
    w = rng.standard_normal((64, n)).astype("float32")
    bb = relax.BlockBuilder()
    x = relax.Var("x", R.Tensor((32, 64), "float32"))
    params = [x]
    if weight_const:
        wexpr = relax.const(w)
    else:
        wexpr = relax.Var("w", R.Tensor((64, n), "float32"))
        params.append(wexpr)
    with bb.function("main", params):
        with bb.dataflow():
            out = bb.emit_output(R.nn.relu(R.matmul(x, wexpr)))
        bb.emit_func_output(out)
    return bb.get(), w


@pytest.mark.parametrize("n", [96, 97])  # 97: the panels overhang N (zero columns, cropped)
def test_build_packs_a_constant_weight_once(n):
    mod, w = _model(weight_const=True, n=n)
    legal = legalize_as_strategy(mod)
    weights = constant_weight_calls(legal)
    assert weights == {"tvm_ext_matmul"}
    with tvm_ext.apply_history_best([]):
        apply = ApplyTunedKernels(CPU, constant_weights=weights)
        applied = apply(legal)
    # (where the weight is the larger operand dense_swap.x86 is the default template; a
    # constant weight takes dense_pack.x86's records or fallback, whose kernel prepacks it)
    assert [name for _, _, name, _ in apply.replaced] == ["dense_pack.x86"]
    packed, done = prepack_constant_weights(applied, apply.kernels, _mark)
    assert done == ["tvm_ext_matmul"]
    assert any(gv.name_hint == "tvm_ext_matmul_prepacked" for gv in packed.functions)
    x = np.random.default_rng(2).standard_normal((32, 64)).astype("float32")
    for prepack in (True, False):
        with tvm_ext.apply_history_best([]):
            ex = tr.build(mod, CPU, strategy=True, prepack=prepack)
        got = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
        np.testing.assert_allclose(got, np.maximum(x @ w, 0), rtol=1e-4, atol=1e-4)
    # a weight that is a parameter of the function is packed by the kernel, as before
    param_mod, _ = _model(weight_const=False)
    legal = legalize_as_strategy(param_mod)
    assert constant_weight_calls(legal) == set()
    with tvm_ext.apply_history_best([]):
        apply = ApplyTunedKernels(CPU, constant_weights=constant_weight_calls(legal))
        applied = apply(legal)
    assert prepack_constant_weights(applied, apply.kernels, _mark)[1] == []


def test_build_transposes_a_constant_weight_once_and_packs_it():
    """``nn.Linear`` as Relax writes it, matmul(x, permute_dims(W)) with W a constant of 97
    rows: the matmul is a dense NT on W itself (``matmuls_as_templates``; FoldConstant would
    also compute the transpose at build time) and W is prepacked; nothing but the prepacked
    kernel runs."""
    w = np.random.default_rng(3).standard_normal((97, 64)).astype("float32")
    bb = relax.BlockBuilder()
    x = relax.Var("x", R.Tensor((32, 64), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(R.matmul(x, R.permute_dims(relax.const(w), [1, 0])))
        bb.emit_func_output(out)
    with tvm_ext.apply_history_best([]):
        ex = tr.build(bb.get(), CPU, strategy=True)
    assert kernels_called(ex) == ["tvm_ext_matmul_prepacked"]
    xs = np.random.default_rng(4).standard_normal((32, 64)).astype("float32")
    got = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(xs)).numpy()
    np.testing.assert_allclose(got, xs @ w.T, rtol=1e-4, atol=1e-4)


def test_large_constants_of_a_cpu_model_go_on_huge_pages():
    """``constants_on_huge_pages``: a constant of 2 MB or more is copied onto huge pages once
    however often it is used (the advice read back from smaps on Linux), a small one stays;
    the built model computes the same (``build`` moves them, after prepacking)."""
    from tvm_ext import host_memory as hm
    from tvm_ext.relax.prepack import constants_on_huge_pages
    rng = np.random.default_rng(3)
    w = rng.standard_normal((1024, 1024)).astype("float32")  # 4 MB
    bias = rng.standard_normal((1024,)).astype("float32")
    bb = relax.BlockBuilder()
    x = relax.Var("x", R.Tensor((4, 1024), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            wc = relax.const(w)  # used twice: copied once
            out = bb.emit_output(R.add(R.matmul(R.matmul(x, wc), wc), relax.const(bias)))
        bb.emit_func_output(out)
    mod = bb.get()
    moved, count = constants_on_huge_pages(mod)
    assert count == 1
    consts = []
    relax.analysis.post_order_visit(
        moved["main"], lambda e: consts.append(e) if isinstance(e, tvm.ir.expr.Constant) else None)
    big = [c for c in consts if isinstance(c.value, tvm.runtime.Tensor)
           and c.value.shape == (1024, 1024)]
    assert len(big) == 2 and big[0].value.data_ptr() == big[1].value.data_ptr()
    np.testing.assert_array_equal(big[0].value.numpy(), w)
    if sys.platform.startswith("linux") and hm.enabled():
        assert hm.mapping(big[0].value)["advised"] is True
    xv = rng.standard_normal((4, 1024)).astype("float32")
    with tvm_ext.apply_history_best([]):
        ex = tr.build(mod, CPU, strategy=True)
    got = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(xv)).numpy()
    np.testing.assert_allclose(got, xv @ w @ w + bias, rtol=1e-4, atol=1e-2)


def test_a_constant_weight_takes_the_prepacking_template_only_over_one_that_reads_it_in_place():
    """Where dense_swap.x86 is the default (a weight twice A's rows or more), a constant weight
    takes dense_pack.x86, which prepacks it; a gemv shape keeps dense_gemv.x86 (its weight
    streamed once a call), a shape dense_pack.x86 is the default of needs nothing."""
    from tvm_ext.relax.prepack import PREPACK_TEMPLATE, prepack_template
    lanes = Task(Workload.create("dense", (64, 64, 64)), CPU).facts["vector_lanes"]
    assert prepack_template(Workload.create("dense", (2 * lanes, 4096, 64), layout="NT"),
                            CPU) == PREPACK_TEMPLATE
    for shape, layout in (((1, 4096, 4096), "NT"), ((2 * lanes, 4096, 64), "NN"),
                          ((128, 128, 64), "NT")):
        assert prepack_template(Workload.create("dense", shape, layout=layout), CPU) is None


@pytest.mark.parametrize("n", [96, 100])  # 100: a ragged last panel, cropped before the epilogue
def test_prepacked_kernel_computes_a_subgraph_tasks_epilogue(n):
    """A subgraph task's prepacked kernel (A, B_packed, bias, residual, C) computes its
    epilogue in the write-back, as numpy does after the matmul."""
    wl = Workload.create("dense", (48, n, 40), layout="NT", epilogue="bias+relu+residual")
    task = Task(wl, CPU, template="dense_pack.x86")
    cfg = task.config_with({"tile_y": [-1, 2, 8], "tile_x": [-1, 2, 16], "tile_k": [-1, 4],
                            "tile_inner": [-1, 8]})
    func = prepacked_kernel(wl, cfg)
    assert [p.name for p in func.params] == ["A", "B_packed", "bias0", "residual2", "E2"]
    f = compile_module(tvm.IRModule({"main": func}), CPU)["main"]
    rng = np.random.default_rng(5)
    a, b, bias, res = (rng.standard_normal(s).astype("float32")
                       for s in (wl.a_shape, wl.b_shape, (n,), wl.out_shape))
    out = tvm.runtime.empty(wl.out_shape, "float32", tvm.cpu())
    f(*(tvm.runtime.tensor(t) for t in (a, pack_weight(wl, b, 16), bias, res)), out)
    np.testing.assert_allclose(out.numpy(), np.maximum(a @ b.T + bias, 0) + res,
                               rtol=1e-4, atol=1e-4)


def _fused_model(w, bias, residual_first: bool, op=R.nn.relu):
    """op(x @ W^T + bias) + r (``residual_first``: r + op(...)), W and bias constants."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", R.Tensor((32, w.shape[1]), "float32"))
    r = relax.Var("r", R.Tensor((32, w.shape[0]), "float32"))
    with bb.function("main", [x, r]):
        with bb.dataflow():
            y = op(R.add(R.matmul(x, R.permute_dims(relax.const(w), [1, 0])),
                         relax.const(bias)))
            out = bb.emit_output(R.add(r, y) if residual_first else R.add(y, r))
        bb.emit_func_output(out)
    return bb.get()


@pytest.mark.parametrize("residual_first", [False, True])
def test_build_prepacks_the_weight_of_a_fused_matmul(residual_first):
    """``build(..., fuse_epilogue=True)``: a matmul fused with an epilogue its subgraph task
    names (bias+relu+residual, the residual either operand of its add) runs as one prepacked
    kernel of its task, with the answer of the build that packs at every call, as does
    bias+tanh+residual; an epilogue no task names (sin) is split after the named ops before it
    (``subgraph._unnamed_split``): the prepacked bias kernel, then sin and the residual's add
    as they are; with ``prepack=False`` the fused function stays whole."""
    rng = np.random.default_rng(6)
    w = rng.standard_normal((97, 64)).astype("float32")  # 97 rows: the last panel overhangs
    bias = rng.standard_normal((97,)).astype("float32")
    xs = [rng.standard_normal(s).astype("float32") for s in ((32, 64), (32, 97))]
    expect = np.maximum(xs[0] @ w.T + bias, 0) + xs[1]
    mod = _fused_model(w, bias, residual_first)
    for prepack in (True, False):
        with tvm_ext.apply_history_best([]) as ctx:
            ex = tr.build(mod, CPU, fuse_epilogue=True, prepack=prepack)
        assert [c.workload.epilogue for c in ctx.report.choices] == ["bias+relu+residual"]
        called = kernels_called(ex)
        assert len(called) == 1 and called[0].endswith("_prepacked") == prepack
        got = relax.VirtualMachine(ex, tvm.cpu())["main"](
            *(tvm.runtime.tensor(t) for t in xs)).numpy()
        np.testing.assert_allclose(got, expect, rtol=1e-4, atol=1e-4)
    # BERT's pooler, tanh(x W^T + b): named, prepacked
    with tvm_ext.apply_history_best([]) as ctx:
        ex = tr.build(_fused_model(w, bias, residual_first, R.tanh), CPU, fuse_epilogue=True)
    assert [c.workload.epilogue for c in ctx.report.choices] == ["bias+tanh+residual"]
    assert [k.endswith("_prepacked") for k in kernels_called(ex)] == [True]
    got = relax.VirtualMachine(ex, tvm.cpu())["main"](*(tvm.runtime.tensor(t) for t in xs))
    np.testing.assert_allclose(got.numpy(), np.tanh(xs[0] @ w.T + bias) + xs[1],
                               rtol=1e-4, atol=1e-4)
    for prepack, epilogue in ((True, "bias"), (False, "")):
        with tvm_ext.apply_history_best([]) as ctx:
            ex = tr.build(_fused_model(w, bias, residual_first, R.sin), CPU,
                          fuse_epilogue=True, prepack=prepack)
        assert [c.workload.epilogue for c in ctx.report.choices] == [epilogue]
        called = kernels_called(ex)
        assert called[0].endswith("_prepacked") == prepack and len(called) == 1 + 2 * prepack
        got = relax.VirtualMachine(ex, tvm.cpu())["main"](*(tvm.runtime.tensor(t) for t in xs))
        np.testing.assert_allclose(got.numpy(), np.sin(xs[0] @ w.T + bias) + xs[1],
                                   rtol=1e-4, atol=1e-4)


def test_an_epilogue_no_task_names_is_split_off_a_constant_weights_matmul():
    """``subgraph._unnamed_split`` (CPU): x W^T divided by a tensor (an op first, no named
    prefix), x W^T + b times a vector (LayerScale: named bias, then the product), both weights
    constants: the matmuls prepacked, the ops after them kernels of their own; a weight that
    is an input keeps the fused function. Tasks as the build runs them; numpy's answer."""
    rng = np.random.default_rng(7)
    w1, w2 = (rng.standard_normal((40, 24)).astype("float32") * 0.3 for _ in range(2))
    bias, gamma = rng.standard_normal(40).astype("float32"), rng.uniform(0.5, 2, 40)
    d = rng.uniform(1, 2, (16, 40)).astype("float32")
    x = rng.standard_normal((16, 24)).astype("float32")
    bb = relax.BlockBuilder()
    xv, wv = relax.Var("x", R.Tensor((16, 24), "float32")), relax.Var("w", R.Tensor((40, 24),
                                                                                     "float32"))
    with bb.function("main", [xv, wv]):
        with bb.dataflow():
            a = R.divide(R.matmul(xv, R.permute_dims(relax.const(w1))), relax.const(d))
            b = R.multiply(R.add(R.matmul(xv, R.permute_dims(relax.const(w2))),
                                 relax.const(bias)), relax.const(gamma.astype("float32")))
            c = R.divide(R.matmul(xv, R.permute_dims(wv)), relax.const(d))
            out = bb.emit_output(R.concat([a, b, c], axis=1))
        bb.emit_func_output(out)
    mod = bb.get()
    assert sorted(wl.epilogue for wl, _ in tr.extract_tasks(mod, CPU, subgraphs=True)) == \
        ["", "bias"]  # (the matmul by w: "", as the plain one by w1)
    with tvm_ext.apply_history_best([]) as ctx:
        ex = tr.build(mod, CPU, fuse_epilogue=True)
    assert sorted(c.workload.epilogue for c in ctx.report.choices) == ["", "", "bias"]
    called = kernels_called(ex)
    assert len([k for k in called if k.endswith("_prepacked")]) == 2
    assert any("divide" in k and "matmul" in k for k in called)  # x w / d: fused as it was
    w = rng.standard_normal((40, 24)).astype("float32")
    got = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x),
                                                      tvm.runtime.tensor(w)).numpy()
    want = np.concatenate([x @ w1.T / d, (x @ w2.T + bias) * gamma, x @ w.T / d], axis=1)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    # (x W^T + b) / (m m + 1), m = x W^T: an op after the bias reads the matmul's own result
    bb = relax.BlockBuilder()
    with bb.function("main", [xv]):
        with bb.dataflow():
            m = bb.emit(R.matmul(xv, R.permute_dims(relax.const(w1))))
            out = bb.emit_output(R.divide(R.add(m, relax.const(bias)),
                                          R.add(R.multiply(m, m), R.const(1.0, "float32"))))
        bb.emit_func_output(out)
    with tvm_ext.apply_history_best([]):
        ex = tr.build(bb.get(), CPU, fuse_epilogue=True)
    assert kernels_called(ex)[0].endswith("_prepacked")
    got = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    m = x @ w1.T
    np.testing.assert_allclose(got, (m + bias) / (m * m + 1), rtol=1e-4, atol=1e-4)
