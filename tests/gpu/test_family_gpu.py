"""Shape families on the GPU: a library of bucket kernels and the generic kernel for the seed-000
family's signature (f32 NT, d2 = 512, d3 = 64), every shape of a family checked against torch,
through one loaded module; decoding attention over a cache of symbolic length (family kernels)."""
import numpy as np
import pytest

import tvm_ext.family as F
from family_helpers import fallback_library
from tvm_ext.measure.check import OutputCheck, random_inputs
from tvm_ext.workload import Family

pytestmark = pytest.mark.gpu


def _target():
    from tvm_ext.target import default_target
    t = default_target()
    if t.kind.name != "cuda":
        pytest.skip("no GPU visible")
    return t


def _check_shapes(run, fam, shapes):
    """``run(a, b, c)`` (TVM tensors) at every shape, each output checked against numpy."""
    import tvm
    dev = tvm.cuda(0)
    rng = np.random.default_rng(0)
    for shape in shapes:
        wl = fam.workload(shape)
        a, b = random_inputs(wl, rng)
        c = tvm.runtime.empty(wl.out_shape, wl.out_dtype, dev)
        run(tvm.runtime.tensor(a, dev), tvm.runtime.tensor(b, dev), c)
        wrong = OutputCheck(wl, a, b)(c.numpy())
        assert wrong is None, (shape, wrong)


@pytest.mark.parametrize("text,dtype,out,layout", [
    ("1,2,3,5,8,13,21,24x512..4096:512x512x64", "float32", None, "NT"),   # seed signature
    ("1..4x100..700:150x96x72", "float16", None, "NN"),                   # odd sizes, f16
    # attention's scores, f16 out: kernels of granule 64 (mma.sync; wgmma on sm_90), f32
    # accumulation, cast
    ("1,3,32x64..4096:960x=mx128", "float16", "float16", "NT"),
    # decoding's q . K^T, 1 to 3 rows: batch_matmul_small_batch.cuda's kernels
    ("2,5x1..3x100..700:150x72", "float16", "float16", "NT"),
])
def test_family_library_every_shape(text, dtype, out, layout, tmp_path):
    import tvm
    target = _target()
    fam = Family.parse(text, "batch_matmul", dtype, out, layout=layout)
    lib = F.compile_library(fallback_library(fam, target, 3, "cuda"), target)
    so = tmp_path / "fam.so"
    lib.export_library(so)
    run = tvm.runtime.load_module(str(so))["main"]
    n, k = fam.fixed("N") or 200, fam.fixed("K")
    _check_shapes(run, fam, fam.shapes() + [(30, 600, n, k), (2, 7, n, k)])


def test_wgmma_library_with_overhanging_tiles_every_shape(tmp_path):
    """A library whose bucket kernel is a wgmma kernel of 128 x 256 tiles grouped by 4 M
    tiles: sizes that are odd multiples of 64 overhang its tiles; every shape of the family
    (and two outside it, on the mma.sync generic kernel) checked against numpy."""
    import tvm
    from tvm_ext.task import Task
    target = _target()
    if tvm.cuda(0).compute_version != "9.0":
        pytest.skip("wgmma needs an sm_90 GPU")
    fam = Family.parse("1,3,5x64..1024:64x=mx128", "batch_matmul", "float16", "float16",
                       layout="NT")
    assert F.family_template(fam, target).name == "batch_matmul_wgmma.cuda"
    rep = (3, 576, 576, 128)
    task = Task(fam.workload(rep), target, template="batch_matmul_wgmma.cuda", symbolic=True,
                granules=F.family_granules(fam, "batch_matmul_wgmma.cuda"))
    cfg = task.config_with({"warpgroups": 2, "block_n": 256, "block_k": 64, "stages": 3,
                            "wgmma_wait": 1, "raster": 4, "stage_c": 1})
    kernel = F.LibKernel(task.name, rep, cfg.to_json_dict(), True, 1e-3)
    lib = F.compile_library(F.Library(fam, "cuda", [kernel],
                                      [(b.bounds, 0) for b in F.make_buckets(fam)],
                                      F.generic_kernel(fam, target)), target)
    _check_shapes(lib, fam, fam.shapes() + [(2, 100, 100, 128), (4, 96, 96, 128)])
    assert lib.kernel_for((5, 960, 960, 128)) == 0 and lib.kernel_for((2, 100, 100, 128)) == 1


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_decoding_attention_over_a_cache_of_any_length(dtype):
    """softmax(q @ k^T) @ v over a cache of symbolic length n, built for the GPU: q @ k^T is
    a family of layout NT on k itself (``matmuls_as_templates``), p @ v one of K varying;
    numpy's answer at lengths 1 to 300."""
    import tvm
    import tvm_ext
    from tvm import relax
    from relax_helpers import check_decode, decode_attention
    from tvm_ext.relax import build, extract_families
    target = _target()
    mod = decode_attention(dtype)
    assert sorted(f.layout for f, _, _ in extract_families(mod, target)) == ["NN", "NT"]
    with tvm_ext.apply_history_best([]):
        vm = relax.VirtualMachine(build(mod, target), tvm.cuda(0))
    check_decode(vm, tvm.cuda(0), np.random.default_rng(0), dtype)
