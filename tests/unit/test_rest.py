"""A CPU model's kernels other than its matmuls (``relax.rest``): scheduled by dlight's CPU rules
and ``Injective`` in ``build``'s default pipeline, not left as serial loop nests."""
import numpy as np
import pytest
import tvm
from tvm import relax
from tvm.script import relax as R

import tvm_ext
import tvm_ext.relax as tr
from tvm_ext.relax.rest import PARALLEL_MIN, injective_rule
from tvm_ext.target import host_cpu_target

CPU = host_cpu_target()


def _legalized(shape, body):
    bb = relax.BlockBuilder()
    x = relax.Var("x", R.Tensor(shape, "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(body(x))
        bb.emit_func_output(out)
    mod = relax.transform.LegalizeOps()(bb.get())
    (func,) = [f for _, f in mod.functions.items() if isinstance(f, tvm.tirx.PrimFunc)]
    return func


@pytest.mark.parametrize("shape, body, vectorized", [
    ((4, 12, 128, 64), lambda x: R.permute_dims(x, [0, 2, 1, 3]), True),   # attention's heads
    ((512, 3072), lambda x: R.nn.gelu_tanh(x), True),
    ((7, 9, 401), lambda x: R.exp(x), False),                               # no whole vectors
])
def test_an_injective_kernel_is_parallel_and_vectorised(shape, body, vectorized):
    func = _legalized(shape, body)
    sch = injective_rule().apply(func, CPU, False)
    assert sch is not None
    text = sch.mod.script()
    assert "T.parallel" in text
    assert ("T.vectorized" in text) == vectorized


def test_a_small_injective_kernel_stays_on_one_core():
    func = _legalized((8, 64), lambda x: R.nn.relu(x))
    assert 8 * 64 < PARALLEL_MIN
    text = injective_rule().apply(func, CPU, False).mod.script()
    assert "T.parallel" not in text and "T.vectorized" in text


def test_a_reduction_is_not_taken_as_injective():
    assert injective_rule().apply(_legalized((64, 128), lambda x: R.sum(x, axis=[1])), CPU,
                                  False) is None


def test_a_model_built_with_the_rest_scheduled_computes_the_same():
    """softmax(x) transposed, a GELU and an add around a matmul, built by ``build`` (our
    pipeline) and by TVM's own ``tvm.compile`` (serial loops): the same answer."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((64, 96)).astype("float32")
    bb = relax.BlockBuilder()
    x = relax.Var("x", R.Tensor((4, 32, 64), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            s = bb.emit(R.permute_dims(R.nn.softmax(x, axis=-1), [1, 0, 2]))
            h = bb.emit(R.nn.gelu_tanh(R.matmul(s, relax.const(w))))
            out = bb.emit_output(R.add(h, R.const(1.0, "float32")))
        bb.emit_func_output(out)
    mod = bb.get()
    a = tvm.runtime.tensor(rng.standard_normal((4, 32, 64)).astype("float32"))
    with tvm_ext.apply_history_best([]):
        ours = relax.VirtualMachine(tr.build(mod, CPU), tvm.cpu())["main"](a).numpy()
    theirs = relax.VirtualMachine(tvm.compile(mod, target=CPU), tvm.cpu())["main"](a).numpy()
    np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-5)
