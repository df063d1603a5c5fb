"""Relax models shared by the unit, codegen and GPU tests."""
import numpy as np
import tvm
from tvm import relax

import tvm_ext
import tvm_ext.relax as tr


def kernels_called(ex):
    """The kernels (not the VM's builtins: reshapes as views among them) a built model's VM
    calls, in order."""
    return [line.split()[1] for line in ex.as_text().splitlines()
            if line.strip().startswith("call") and "vm.builtin" not in line]


def bias_relu_model(x_shape=(4, 64, 32), w_shape=(4, 32, 48), dtype="float32"):
    """relu(x @ w + bias) as a Relax module."""
    from tvm.script import relax as R
    bb = relax.BlockBuilder()
    x = relax.Var("x", R.Tensor(x_shape, dtype))
    w = relax.Var("w", R.Tensor(w_shape, dtype))
    bias = relax.Var("bias", R.Tensor((w_shape[-1],), dtype))
    with bb.function("main", [x, w, bias]):
        with bb.dataflow():
            y = bb.emit(R.matmul(x, w))
            out = bb.emit_output(R.nn.relu(R.add(y, bias)))
        bb.emit_func_output(out)
    return bb.get()


def check_fused(target, dev):
    mod = bias_relu_model()
    rng = np.random.default_rng(3)
    xs = [rng.standard_normal(s).astype("float32") for s in ((4, 64, 32), (4, 32, 48), (48,))]
    with tvm_ext.apply_history_best([]) as ctx:
        ex = tr.build(mod, target, fuse_epilogue=True)
    assert len(ctx.report.choices) == 1
    vm = relax.VirtualMachine(ex, dev)
    got = vm["main"](*[tvm.runtime.tensor(x, dev) for x in xs]).numpy()
    np.testing.assert_allclose(got, np.maximum(xs[0] @ xs[1] + xs[2], 0), rtol=1e-4, atol=1e-4)


def row_model(which, shape, dtype="float32"):
    """(a Relax module of one row reduction over the last axis of an input ``shape``: "softmax",
    "layer_norm" or "rms_norm" (weights and bias constants), a numpy reference of it)."""
    from tvm.relax.frontend import nn
    from tvm.relax.frontend.nn import op
    rng = np.random.default_rng(3)
    gamma = rng.uniform(0.5, 1.5, shape[-1]).astype(dtype)
    beta = rng.standard_normal(shape[-1]).astype(dtype)

    class Row(nn.Module):
        def forward(self, x):
            if which == "softmax":
                return op.softmax(x, axis=-1)
            g = nn.Tensor.from_const(gamma)
            if which == "layer_norm":
                return op.layer_norm(x, [shape[-1]], g, nn.Tensor.from_const(beta))
            return op.rms_norm(x, g, axes=[-1])

    def reference(x):
        x = x.astype("float64")
        if which == "softmax":
            e = np.exp(x - x.max(-1, keepdims=True))
            return e / e.sum(-1, keepdims=True)
        if which == "layer_norm":
            c = x - x.mean(-1, keepdims=True)
            return c / np.sqrt((c * c).mean(-1, keepdims=True) + 1e-5) * gamma + beta
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-5) * gamma

    mod, _ = Row().export_tvm(spec={"forward": {"x": nn.spec.Tensor(list(shape), dtype)}})
    return mod, reference


def decode_attention(dtype="float32", lead=(4,), dim=32):
    """Decoding's attention over a cache of symbolic length n, softmax(q @ k^T) @ v, on
    [*lead, 1, dim] queries, as a Relax module (numpy's answer: ``decode_reference``)."""
    from tvm import tirx
    from tvm.script import relax as R
    bb = relax.BlockBuilder()
    n = tirx.Var("n", "int64")
    q = relax.Var("q", R.Tensor((*lead, 1, dim), dtype))
    k, v = (relax.Var(name, R.Tensor((*lead, n, dim), dtype)) for name in "kv")
    swap = [*range(len(lead)), len(lead) + 1, len(lead)]
    with bb.function("main", [q, k, v]):
        with bb.dataflow():
            s = bb.emit(relax.op.matmul(q, relax.op.permute_dims(k, swap)))
            p = bb.emit(relax.op.nn.softmax(s, axis=-1))
            o = bb.emit_output(relax.op.matmul(p, v))
        bb.emit_func_output(o)
    return bb.get()


def decode_reference(q, k, v):
    s = q.astype("float64") @ np.swapaxes(k.astype("float64"), -1, -2)
    e = np.exp(s - s.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True) @ v.astype("float64")


def check_decode(vm, dev, rng, dtype="float32"):
    """``decode_attention()``'s VM against numpy at cache lengths 1 to 300."""
    import tvm
    tol = 1e-4 if dtype == "float32" else 2e-2
    for n in (1, 7, 48, 300):
        q, k, v = (rng.standard_normal(s).astype(dtype)
                   for s in [(4, 1, 32), (4, n, 32), (4, n, 32)])
        out = vm["main"](*(tvm.runtime.tensor(x, dev) for x in (q, k, v))).numpy()
        assert np.allclose(out, decode_reference(q, k, v), rtol=tol, atol=tol), n
