"""A Relax model with a symbolic sequence length: its matmuls are shape families, tuned over a
range and built into dispatching libraries, correct at lengths inside and outside the range,
and listed in the apply report."""
import math
import re
import subprocess
import sys

import numpy as np
import pytest
import tvm

import tvm_ext
from tvm_ext.measure import MeasureOptions, RunOptions
from tvm_ext.relax import build, extract_families, extract_tasks, tune_model_families
from tvm_ext.target import host_cpu_target

CPU = host_cpu_target()
D, H = 64, 128

MODEL = '''
from tvm import relax, tirx
from tvm.script import relax as R

def get_model(D={D}, H={H}):
    """An MLP block of a transformer with a symbolic sequence length n:
    y = gelu(x @ W1) @ W2 + x."""
    bb = relax.BlockBuilder()
    n = tirx.Var("n", "int64")
    x = relax.Var("x", R.Tensor((n, D), "float32"))
    w1 = relax.Var("w1", R.Tensor((D, H), "float32"))
    w2 = relax.Var("w2", R.Tensor((H, D), "float32"))
    with bb.function("main", [x, w1, w2]):
        with bb.dataflow():
            h = bb.emit(relax.op.matmul(x, w1))
            g = bb.emit(relax.op.nn.gelu(h))
            y = bb.emit(relax.op.matmul(g, w2))
            o = bb.emit_output(relax.op.add(y, x))
        bb.emit_func_output(o)
    return bb.get()
'''.format(D=D, H=H)


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = tmp_path_factory.mktemp("model") / "mlp.py"
    path.write_text(MODEL)
    ns = {}
    exec(compile(MODEL, str(path), "exec"), ns)
    return ns["get_model"](), path


def _reference(x, w1, w2):
    h = x @ w1
    g = 0.5 * h * (1 + np.vectorize(math.erf)(h / math.sqrt(2)))
    return g @ w2 + x


def _check(ex, lengths):
    vm = tvm.relax.VirtualMachine(ex, tvm.cpu())
    rng = np.random.default_rng(0)
    w1 = (rng.standard_normal((D, H)) * 0.1).astype("float32")
    w2 = (rng.standard_normal((H, D)) * 0.1).astype("float32")
    for n in lengths:
        x = rng.standard_normal((n, D)).astype("float32")
        out = vm["main"](tvm.runtime.tensor(x), tvm.runtime.tensor(w1),
                         tvm.runtime.tensor(w2)).numpy()
        assert np.allclose(out, _reference(x, w1, w2), rtol=1e-4, atol=1e-4), n


def test_symbolic_matmuls_are_families(model):
    mod, _ = model
    assert extract_tasks(mod, CPU) == []  # no fixed-shape matmul
    fams = extract_families(mod, CPU)
    # dense M x N x K: x @ W1 is n x H x D, gelu(.) @ W2 is n x D x H
    assert sorted(f.text for f, _, _ in fams) == sorted([f"?x{H}x{D}", f"?x{D}x{H}"])
    assert all(names == {"M": "n"} and count == 1 for _, names, count in fams)


def test_untuned_model_gets_generic_kernels(model):
    mod, _ = model
    with tvm_ext.apply_history_best([]) as ctx:
        ex = build(mod, CPU)
    assert len(ctx.report.families) == 2
    assert "2 shape families" in ctx.report.summary()
    assert all("0 bucket kernels + generic" in f for f in ctx.report.families)
    _check(ex, [1, 5, 64, 200])


def test_tuned_families_serve_the_model(model, tmp_path):
    mod, _ = model
    log = tmp_path / "mlp.json"
    options = MeasureOptions(run=RunOptions(number=2, repeat=2), n_parallel=1)
    # three buckets (16, 17..32, 33..64) per family: the re-ranking compiles each candidate
    tuned = tune_model_families(mod, CPU, sizes={"n": "16..64:16"}, trials=3, log=log,
                                max_kernels=1, tuner="random", measure_options=options)
    assert sorted(f.text for f, _, _, _ in tuned) == sorted([f"16..64:16x{H}x{D}",
                                                             f"16..64:16x{D}x{H}"])
    with tvm_ext.apply_history_best(str(log)) as ctx:
        ex = build(mod, CPU)
    text = str(ctx.report)
    assert len(ctx.report.families) == 2
    # each bucket names its kernel's origin: tuned, proposed (the re-ranking's pick, timed
    # here: which wins depends on the machine's load) or the fallback
    assert "any other shape" in text and re.search(r"(tuned|proposed|fallback) at", text)
    assert all("0 bucket kernels" not in f for f in ctx.report.families)
    _check(ex, [16, 48, 64, 3, 128])  # inside the range, and outside it (generic kernel)


def test_cli_model_with_sizes(model, tmp_path):
    _, path = model
    run = [sys.executable, "-m", "tvm_ext.tune", "--target", "llvm", "--model", str(path)]
    out = subprocess.run(run + ["--size", "n=16..64:16", "--dry-run"], capture_output=True,
                         text=True)
    assert out.returncode == 0, out.stderr
    assert "2 shape families" in out.stdout and "tuned over n=16..64:16" in out.stdout
    for args, msg in [(["--size", "m=1..8"], "--size names m"),
                      (["--size", "n"], "--size expects VAR=VALUES"),
                      (["--size", "n=8..1"], "LO <= HI")]:
        out = subprocess.run(run + args, capture_output=True, text=True)
        assert out.returncode == 2 and msg in out.stderr, (args, out.stderr)


def test_decoding_attention_over_a_cache_of_any_length_runs_the_gemv_kernels(tmp_path):
    """q @ k^T over a cache of symbolic length is a family of layout NT on k itself (no
    transpose at every call) and p @ v one of K varying: both run the gemv templates' kernels
    of symbolic length, untuned and tuned over a range (the tuned libraries found by the
    build), right at lengths inside and outside it."""
    from relax_helpers import check_decode, decode_attention, decode_reference
    mod = decode_attention()
    fams = extract_families(mod, CPU)
    assert sorted((f.text, f.layout, names) for f, names, _ in fams) == [
        ("4x1x32x?", "NN", {"K": "n"}), ("4x1x?x32", "NT", {"N": "n"})]
    rng = np.random.default_rng(0)

    def check(ex):
        check_decode(tvm.relax.VirtualMachine(ex, tvm.cpu()), tvm.cpu(), rng)

    with tvm_ext.apply_history_best([]) as ctx:
        check(build(mod, CPU))
    assert sorted(f.splitlines()[1].split("(")[1].split(",")[0] for f in ctx.report.families) \
        == ["batch_matmul_gemv.x86", "batch_matmul_gemv_nn.x86"]
    # [B, H, 1, D] queries (TVM's frontend): their heads viewed as one batch, the same families
    wide = decode_attention(lead=(2, 2))
    assert sorted((f.text, f.layout) for f, _, _ in extract_families(wide, CPU)) == [
        ("4x1x32x?", "NN"), ("4x1x?x32", "NT")]
    vm = tvm.relax.VirtualMachine(build(wide, CPU), tvm.cpu())
    q, k, v = (rng.standard_normal(s).astype("float32")
               for s in [(2, 2, 1, 32), (2, 2, 9, 32), (2, 2, 9, 32)])
    out = vm["main"](*(tvm.runtime.tensor(x) for x in (q, k, v))).numpy()
    assert np.allclose(out, decode_reference(q, k, v), rtol=1e-4, atol=1e-4)
    log = tmp_path / "decode.json"
    options = MeasureOptions(run=RunOptions(number=2, repeat=2), n_parallel=1)
    tuned = tune_model_families(mod, CPU, sizes={"n": "16..64:16"}, trials=2, log=log,
                                max_kernels=1, tuner="random", measure_options=options)
    assert sorted(f.text for f, _, _, _ in tuned) == ["4x1x16..64:16x32", "4x1x32x16..64:16"]
    assert all(k.template.startswith("batch_matmul_gemv") for _, _, lib, _ in tuned
               for k in lib.kernels)
    with tvm_ext.apply_history_best(str(log)) as ctx:
        check(build(mod, CPU))
    assert all("0 bucket kernels" not in f for f in ctx.report.families)
