"""Matmuls that a template takes on views of their operands (``relax.legalize.
matmuls_as_templates``, CPU builds): a transformer's [B, S, K] activations times a 2-D weight
as a dense of their rows, attention's [B, H, S, D] products as batch_matmuls of B * H, a
``permute_dims`` of the last two axes read as an NT layout, and the elementwise ops after such
a matmul computed before its result is viewed back (a fused epilogue)."""
import numpy as np
import pytest
import tvm
from tvm import relax
from tvm.script import relax as R

import tvm_ext
import tvm_ext.relax as tr
from tvm_ext.relax.legalize import matmuls_as_templates
from tvm_ext.relax.match import matmul_view
from tvm_ext.target import host_cpu_target
from tvm_ext.workload import Workload
from relax_helpers import kernels_called

CPU = host_cpu_target()


def _run(ex, *arrays):
    vm = relax.VirtualMachine(ex, tvm.cpu())
    return vm["main"](*(tvm.runtime.tensor(a) for a in arrays)).numpy()


def _function(params, body):
    """A Relax module of one function: ``params`` {name: shape}, ``body(vars) -> expr``."""
    bb = relax.BlockBuilder()
    xs = [relax.Var(n, R.Tensor(s, "float32")) for n, s in params.items()]
    with bb.function("main", xs):
        with bb.dataflow():
            out = bb.emit_output(body(*xs))
        bb.emit_func_output(out)
    return bb.get()


@pytest.mark.parametrize("sa, sb, layout_b, expected", [
    ((2, 3, 8, 5), (7, 5), "T", ("dense", 1, 48, 7, 5, "NT")),
    ((4, 6, 5), (5, 9), "N", ("dense", 1, 24, 9, 5, "NN")),
    ((2, 3, 8, 5), (2, 3, 5, 4), "N", ("batch_matmul", 6, 8, 4, 5, "NN")),
    ((2, 3, 8, 5), (2, 3, 4, 5), "T", ("batch_matmul", 6, 8, 4, 5, "NT")),
    ((2, 3, 8, 5), (3, 5, 4), "N", None),        # a broadcast batch
    ((2, 8, 5), (1, 5, 4), "N", None),           # likewise
    ((4, 6, 5), (6, 9), "N", None),              # K disagrees
    ((5,), (5, 9), "N", None),                   # a vector
])
def test_the_workload_of_a_matmul_on_views_of_its_operands(sa, sb, layout_b, expected):
    wl = matmul_view(list(sa), list(sb), layout_b, "float32", "float32")
    if expected is None:
        assert wl is None
    else:
        op, batch, m, n, k, layout = expected
        assert (wl.op, wl.batch, wl.M, wl.N, wl.K, wl.layout) == expected, wl
        assert wl == Workload(op, batch, m, n, k, "float32", "float32", layout)


def test_activations_of_a_batch_of_sequences_times_a_constant_weight():
    """x [B, S, K] times a constant W [K, N] (ONNX's MatMul; a Relax matmul as written): one
    dense NN of B * S rows on W, prepacked, x and the result reshaped as views (legalized as
    written it was TVM's own unscheduled loops); numpy's answer."""
    B, S, K, N = 2, 16, 64, 97
    rng = np.random.default_rng(0)
    w = rng.standard_normal((K, N)).astype("float32")
    mod = _function({"x": (B, S, K)}, lambda x: R.matmul(x, relax.const(w)))
    wl = Workload.create("dense", (B * S, N, K), layout="NN")
    assert tr.extract_tasks(mod, CPU) == [(wl, 1)]
    with tvm_ext.apply_history_best([]) as ctx:
        ex = tr.build(mod, CPU)
    assert [c.workload for c in ctx.report.choices] == [wl]
    assert kernels_called(ex) == ["tvm_ext_matmul_prepacked"]  # no copy of x or of the result
    x = rng.standard_normal((B, S, K)).astype("float32")
    np.testing.assert_allclose(_run(ex, x), x @ w, rtol=1e-4, atol=1e-4)


def test_the_ops_after_a_viewed_matmul_are_its_fused_epilogue():
    """r + relu(x . W + bias) on [B, S, K] activations: the bias, ReLU and residual computed
    on the matmul's rows (r viewed as rows too; the chain its add's second operand), then viewed
    back, so ``fuse_epilogue`` makes them one kernel with the subgraph task dense NN +
    bias+relu+residual; both builds numpy's."""
    B, S, K, N = 2, 16, 48, 80
    rng = np.random.default_rng(1)
    w, bias = rng.standard_normal((K, N)).astype("float32"), \
        rng.standard_normal((N,)).astype("float32")
    mod = _function({"x": (B, S, K), "r": (B, S, N)}, lambda x, r: R.add(
        r, R.nn.relu(R.add(R.matmul(x, relax.const(w)), relax.const(bias)))))
    wl = Workload.create("dense", (B * S, N, K), layout="NN")
    assert tr.extract_tasks(mod, CPU, subgraphs=True) == \
        [(wl.with_(epilogue="bias+relu+residual"), 1)]
    x, r = rng.standard_normal((B, S, K)).astype("float32"), \
        rng.standard_normal((B, S, N)).astype("float32")
    expected = np.maximum(x @ w + bias, 0) + r
    for fuse in (False, True):
        with tvm_ext.apply_history_best([]) as ctx:
            ex = tr.build(mod, CPU, fuse_epilogue=fuse)
        assert [c.workload for c in ctx.report.choices] == \
            [wl.with_(epilogue="bias+relu+residual") if fuse else wl]
        if fuse:  # one kernel, its constant weight prepacked (then the function's result
            # copied out of the view: a reshape)
            assert [k for k in kernels_called(ex) if not k.startswith("reshape")] == \
                ["fused_tvm_ext_matmul_add_relu_add1_prepacked"]
        np.testing.assert_allclose(_run(ex, x, r), expected, rtol=1e-4, atol=1e-4)


def test_attention_products_are_batch_matmuls_of_their_heads():
    """softmax(q . k^T * c + mask) . v on [B, H, S, D]: two batch_matmuls of B * H heads, the
    first NT on k itself (no transpose of k), its scale and mask its epilogue; numpy's answer
    with and without fusion."""
    B, H, S, D = 2, 3, 16, 8
    shapes = {"q": (B, H, S, D), "k": (B, H, S, D), "v": (B, H, S, D), "mask": (B, H, S, S)}

    def attention(q, k, v, mask):
        s = R.multiply(R.matmul(q, R.permute_dims(k, [0, 1, 3, 2])), R.const(0.25, "float32"))
        return R.matmul(R.nn.softmax(R.add(s, mask), axis=-1), v)

    mod = _function(shapes, attention)
    scores = Workload.create("batch_matmul", (B * H, S, S, D), layout="NT")
    mix = Workload.create("batch_matmul", (B * H, S, D, S), layout="NN")
    assert set(tr.extract_tasks(mod, CPU)) == {(scores, 1), (mix, 1)}
    assert set(tr.extract_tasks(mod, CPU, subgraphs=True)) == \
        {(scores.with_(epilogue="scale:0.25+residual"), 1), (mix, 1)}
    rng = np.random.default_rng(2)
    q, k, v, mask = (rng.standard_normal(s).astype("float32") for s in shapes.values())
    s = q @ np.swapaxes(k, -1, -2) * 0.25 + mask
    p = np.exp(s - s.max(-1, keepdims=True))
    expected = p / p.sum(-1, keepdims=True) @ v
    for fuse in (False, True):
        with tvm_ext.apply_history_best([]):
            ex = tr.build(mod, CPU, fuse_epilogue=fuse)
        assert not [kern for kern in kernels_called(ex) if "transpose" in kern]
        np.testing.assert_allclose(_run(ex, q, k, v, mask), expected, rtol=1e-4, atol=1e-4)


def test_a_transposed_batch_is_read_in_place():
    """matmul(a, permute_dims(b, [0, 2, 1])) on 3-D operands: a batch_matmul NT on b itself
    (before: TVM's transpose of b at every call, then an NN product)."""
    Bt, M, N, K = 3, 16, 24, 8
    mod = _function({"a": (Bt, M, K), "b": (Bt, N, K)},
                    lambda a, b: R.matmul(a, R.permute_dims(b, [0, 2, 1])))
    assert tr.extract_tasks(mod, CPU) == \
        [(Workload.create("batch_matmul", (Bt, M, N, K), layout="NT"), 1)]
    with tvm_ext.apply_history_best([]):
        ex = tr.build(mod, CPU)
    assert kernels_called(ex) == ["tvm_ext_matmul"]
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((Bt, M, K)).astype("float32"), \
        rng.standard_normal((Bt, N, K)).astype("float32")
    np.testing.assert_allclose(_run(ex, a, b), a @ np.swapaxes(b, 1, 2), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("case", ["broadcast batch", "other axes", "as written"])
def test_matmuls_no_view_serves_are_left_as_written(case):
    """A broadcast batch, a permute_dims of other axes, and matmuls LegalizeOps already takes
    as written: the module unchanged; the build still numpy's answer."""
    rng = np.random.default_rng(4)
    if case == "broadcast batch":
        shapes = {"a": (2, 3, 8, 5), "b": (3, 5, 4)}
        mod = _function(shapes, R.matmul)
        ref = np.matmul
    elif case == "other axes":
        shapes = {"a": (3, 8, 5), "b": (5, 3, 4)}
        mod = _function(shapes, lambda a, b: R.matmul(a, R.permute_dims(b, [1, 0, 2])))
        ref = lambda a, b: a @ np.transpose(b, (1, 0, 2))  # noqa: E731
    else:
        shapes = {"a": (3, 8, 5), "b": (3, 5, 4)}
        mod = _function(shapes, R.matmul)
        ref = np.matmul
    assert matmuls_as_templates(mod) is mod
    arrays = [rng.standard_normal(s).astype("float32") for s in shapes.values()]
    with tvm_ext.apply_history_best([]):
        ex = tr.build(mod, CPU)
    np.testing.assert_allclose(_run(ex, *arrays), ref(*arrays), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("onnx", [False, True])
def test_a_transformer_block_of_tvms_frontend(onnx):
    """``bench.model``'s block (``tvm.relax.frontend.nn``: projections, attention on heads, a
    GELU MLP, residuals first in their adds; ``onnx``: weights stored [K, N]): every matmul one
    of our kernels (six denses on the rows, their weights packed at build time, two
    batch_matmuls of the heads), built plain and fused (the elementwise ops after each matmul
    its epilogue), numpy's answer."""
    from tvm_ext.bench.model import block_module, numpy_block
    B, S, D, H = 2, 24, 64, 4
    mod, w = block_module(B, S, D, H, onnx)
    layout = "NN" if onnx else "NT"
    assert set(tr.extract_tasks(mod, CPU)) == {
        (Workload.create("dense", (B * S, D, D), layout=layout), 4),
        (Workload.create("dense", (B * S, 4 * D, D), layout=layout), 1),
        (Workload.create("dense", (B * S, D, 4 * D), layout=layout), 1),
        (Workload.create("batch_matmul", (B * H, S, S, D // H), layout="NT"), 1),
        (Workload.create("batch_matmul", (B * H, S, D // H, S), layout="NN"), 1)}
    x = np.random.default_rng(5).standard_normal((B, S, D)).astype("float32")
    want = numpy_block(x, w, H, onnx)
    for fuse in (False, True):
        with tvm_ext.apply_history_best([]) as ctx:
            ex = tr.build(mod, CPU, fuse_epilogue=fuse)
        ours = [k for k in kernels_called(ex) if "tvm_ext_matmul" in k]
        assert len(ours) == 8 and not [k for k in kernels_called(ex) if "matmul" in k and
                                       k not in ours]
        # the six projections' constant weights packed at build time, fused or not
        assert len([k for k in ours if k.endswith("_prepacked")]) == 6
        if fuse:  # every projection's bias, the MLP's GELU and the residuals in its kernel
            assert sorted(c.workload.epilogue for c in ctx.report.choices) == \
                ["", "bias", "bias+gelu_tanh", "bias+residual", "bias+residual", "scale:0.25"]
        vm = relax.VirtualMachine(ex, tvm.cpu())
        got = vm["forward"](tvm.runtime.tensor(x)).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3)


def test_inputs_copied_first_give_the_same_answer_on_any_input():
    """``apply.inputs_copied`` (what a CUDA-graph build does first): the block's input copied
    by one kernel of its own (a tensor parameter of static shape; the weights are constants),
    every matmul still ours; built for the CPU, numpy's answer on two inputs in turn."""
    from tvm_ext.bench.model import block_module, numpy_block
    from tvm_ext.relax.apply import inputs_copied
    B, S, D, H = 2, 16, 64, 4
    mod, w = block_module(B, S, D, H)
    copied = inputs_copied(mod)
    assert "tvm_ext_copy_x" in [gv.name_hint for gv in copied.functions]
    with tvm_ext.apply_history_best([]):
        ex = tr.build(copied, CPU, fuse_epilogue=True)
    assert kernels_called(ex)[0] == "tvm_ext_copy_x"
    assert len([k for k in kernels_called(ex) if "tvm_ext_matmul" in k]) == 8
    vm = relax.VirtualMachine(ex, tvm.cpu())
    for seed in (5, 6):
        x = np.random.default_rng(seed).standard_normal((B, S, D)).astype("float32")
        np.testing.assert_allclose(vm["forward"](tvm.runtime.tensor(x)).numpy(),
                                   numpy_block(x, w, H), rtol=1e-3, atol=1e-3)
    # weights passed as parameters after "num_input" are not copied at every call
    from tvm.script import ir as I

    @I.ir_module
    class Params:
        @R.function
        def main(x: R.Tensor((4, 8), "float32"), w: R.Tensor((8, 8), "float32")):
            R.func_attr({"num_input": 1})
            with R.dataflow():
                y = R.matmul(x, w)
                R.output(y)
            return y

    names = [gv.name_hint for gv in inputs_copied(Params).functions]
    assert "tvm_ext_copy_x" in names and "tvm_ext_copy_w" not in names


def test_a_gated_mlp_fuses_its_gate_with_the_up_projection_as_a_mul_epilogue():
    """LLaMA's MLP, down(silu(gate(x)) * up(x)) on [B, S, D] activations (nn.Linear weights,
    constants): the product is computed in the write-back of one of the two matmuls (the
    gate's as ``silu+mul``, or, written up * gate, the up projection's as ``mul`` after the
    gate's ``silu``), no kernel of its own; every weight prepacked; numpy's answer."""
    rng = np.random.default_rng(9)
    B, S, D, F = 2, 12, 32, 80
    wg, wu = (rng.standard_normal((F, D)).astype("float32") * 0.2 for _ in range(2))
    wd = rng.standard_normal((D, F)).astype("float32") * 0.2
    x = rng.standard_normal((B, S, D)).astype("float32")
    g = x @ wg.T
    want = (g / (1 + np.exp(-g)) * (x @ wu.T)) @ wd.T

    def linear(v, w):
        return R.matmul(v, R.permute_dims(relax.const(w)))

    for gate_first in (True, False):
        def mlp(v, gate_first=gate_first):
            gate, up = R.nn.silu(linear(v, wg)), linear(v, wu)
            return linear(R.multiply(gate, up) if gate_first else R.multiply(up, gate), wd)
        mod = _function({"x": (B, S, D)}, mlp)
        fused = {"silu+mul", ""} if gate_first else {"silu", "mul"}
        assert {wl.epilogue for wl, _ in tr.extract_tasks(mod, CPU, subgraphs=True)
                if wl.N == F} == fused
        with tvm_ext.apply_history_best([]) as ctx:
            ex = tr.build(mod, CPU, fuse_epilogue=True)
        assert {c.workload.epilogue for c in ctx.report.choices} == fused | {""}  # down
        assert len([k for k in kernels_called(ex) if k.endswith("_prepacked")]) == 3
        assert not [k for k in kernels_called(ex) if "multiply" in k and "matmul" not in k]
        np.testing.assert_allclose(_run(ex, x), want, rtol=1e-4, atol=1e-4)


def test_two_results_viewed_alike_but_flat_otherwise_are_added_as_viewed():
    """x [2, 3, 8, 5] . W [5, 4] (a dense of 48 rows) plus a . b of [2, 3, 8, 4] (a batch of 6):
    both viewed [2, 3, 8, 4] but flat [48, 4] and [6, 8, 4]; their sum stays on the views."""
    rng = np.random.default_rng(6)
    w = rng.standard_normal((5, 4)).astype("float32")
    shapes = {"x": (2, 3, 8, 5), "a": (2, 3, 8, 5), "b": (2, 3, 5, 4)}
    mod = _function(shapes, lambda x, a, b: R.add(R.matmul(x, relax.const(w)), R.matmul(a, b)))
    x, a, b = (rng.standard_normal(s).astype("float32") for s in shapes.values())
    with tvm_ext.apply_history_best([]):
        ex = tr.build(mod, CPU)
    np.testing.assert_allclose(_run(ex, x, a, b), x @ w + a @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("argv, says", [
    (["--dim", "100", "--heads", "12"], "multiple of --heads"),
    (["--dtype", "float16"], "--target cuda"),
    (["--tune", "8"], "--log of your own"),
    (["--target", "rocm"], "llvm or cuda"),
    (["--cuda-graph"], "for --target cuda"),
    (["--profile"], "for --target cuda"),
])
def test_the_block_bench_refuses_bad_input_before_building(argv, says):
    from tvm_ext.bench.model import main
    from tvm_ext.errors import TvmExtError
    with pytest.raises(TvmExtError, match=says):
        main(argv)


def test_the_block_bench_runs_llamas_gated_mlp(capsys):
    """``bench.model --mlp swiglu``: the block with down(silu(gate(h)) * up(h)); every build
    checked against numpy's math by the bench itself; the fused build takes the gate with its
    bias, silu and the product with up(h) as one kernel."""
    from tvm_ext.bench.model import main
    assert main(["--batch", "1", "--seq", "16", "--dim", "32", "--heads", "2", "--mlp",
                 "swiglu", "--fuse", "--repeat", "1", "--tvm-repeat", "0"]) == 0
    out = capsys.readouterr().out
    assert "swiglu MLP" in out and "NT +bias+silu+mul: dense_pack.x86" in out
    assert "tvm_ext, fused epilogues" in out


def test_the_profile_counts_an_early_launched_kernel_from_the_end_of_the_one_before():
    """``bench.model --profile``: our kernels are launched with PDL and wait for the kernel
    before them, so a span holds that kernel's tail; each kernel's time starts where the
    previous activity on the stream ended, and the times add up to the busy time."""
    from tvm_ext.bench.model import serialized
    spans = [("b", 2.0, 15.0), ("a", 0.0, 10.0), ("c", 15.0, 20.0), ("b", 21.0, 30.0),
             ("d", 22.0, 25.0)]  # d: inside b's span (another stream's, or measured so)
    got = {name: (n, t, span) for name, n, t, span in serialized(spans)}
    assert got == {"a": (1, 10.0, 10.0), "b": (2, 14.0, 22.0), "c": (1, 5.0, 5.0),
                   "d": (1, 0.0, 3.0)}
    assert sum(t for _, t, _ in got.values()) == 29.0  # 0-20 and 21-30


def test_the_profile_says_what_of_a_call_its_kernels_leave(capsys):
    """``--profile``'s lines of a row: its kernels (the time after the one before, the span
    where longer), then its median call less all its kernels (launches, idle time)."""
    from tvm_ext.bench.model import print_profiles
    kernels = [("matmul", 4, 40.0, 55.0), ("softmax", 1, 10.0, 10.0),
               ("(all kernels)", 5, 50.0, 65.0)]
    print_profiles({"ours": None}, {"ours": (0.088, 0.085)}, kernels_of=lambda fn: kernels)
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].startswith("ours: its kernels")
    assert lines[2].split() == ["40.0", "us", "x4", "matmul", "(span", "55.0)"]
    assert lines[3].split() == ["10.0", "us", "x1", "softmax"]
    assert lines[5].split()[:2] == ["38.0", "us"] and "(88.0 us)" in lines[5]


def test_a_residual_written_first_still_fuses_as_the_matmuls_epilogue():
    """x + relu(x . W) on 2-D operands (a residual as transformers write it, the matmul's
    result second): the fused function's add is named from either operand, so the kernel's
    task is dense NN + relu+residual; numpy's answer."""
    rng = np.random.default_rng(7)
    w = rng.standard_normal((48, 48)).astype("float32")
    mod = _function({"x": (32, 48)}, lambda x: R.add(x, R.nn.relu(R.matmul(x, relax.const(w)))))
    wl = Workload.create("dense", (32, 48, 48), layout="NN", epilogue="relu+residual")
    assert tr.extract_tasks(mod, CPU, subgraphs=True) == [(wl, 1)]
    x = rng.standard_normal((32, 48)).astype("float32")
    with tvm_ext.apply_history_best([]) as ctx:
        ex = tr.build(mod, CPU, fuse_epilogue=True)
    assert [c.workload for c in ctx.report.choices] == [wl]
    np.testing.assert_allclose(_run(ex, x), x + np.maximum(x @ w, 0), rtol=1e-4, atol=1e-4)


def test_a_second_residual_written_first_is_its_matmuls_epilogue():
    """h = x + relu(x . W1); out = h + h . W2 (a transformer's second residual): FuseOps puts
    the add with the second matmul (h has another use), whose result is the add's second
    operand: named as that matmul's residual epilogue, not left to its anchor."""
    rng = np.random.default_rng(8)
    w1, w2 = (rng.standard_normal((48, 48)).astype("float32") for _ in range(2))

    def block(x):
        h = R.add(x, R.nn.relu(R.matmul(x, relax.const(w1))))
        return R.add(h, R.matmul(h, relax.const(w2)))
    mod = _function({"x": (32, 48)}, block)
    assert {wl.epilogue for wl, _ in tr.extract_tasks(mod, CPU, subgraphs=True)} == \
        {"relu+residual", "residual"}
    x = rng.standard_normal((32, 48)).astype("float32")
    with tvm_ext.apply_history_best([]):
        ex = tr.build(mod, CPU, fuse_epilogue=True)
    h = x + np.maximum(x @ w1, 0)
    np.testing.assert_allclose(_run(ex, x), h + h @ w2, rtol=1e-4, atol=1e-4)
