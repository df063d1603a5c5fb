"""Shape families: parsing, buckets, the greedy kernel choice, one library with a dispatcher
(every shape checked against numpy, shapes outside the family through the generic kernel),
the family line of a log, and the CLI."""
import json
import subprocess
import sys

import numpy as np
import pytest

import tvm_ext.family as F
from family_helpers import fallback_library
from tvm_ext.measure.check import random_inputs, reference_matmul
from tvm_ext import record
from tvm_ext.dispatch import apply_history_best
from tvm_ext.errors import LogError, WorkloadError
from tvm_ext.strategy import get_template
from tvm_ext.target import host_cpu_target
from tvm_ext.workload import Family, is_family_text

CPU = host_cpu_target()


# ---- parsing ----

def test_parse_sets_ranges_steps_and_any():
    fam = Family.parse("1..3x64..256:64x512x8,16", "batch_matmul")
    assert [d.values for d in fam.dims] == [(1, 2, 3), (64, 128, 192, 256), (512,), (8, 16)]
    assert fam.varying == ("B", "M", "K")
    assert len(fam.shapes()) == 3 * 4 * 2
    assert abs(sum(p for _, p in fam.probabilities()) - 1) < 1e-12
    dense = Family.parse("?x768x3072", "dense")
    assert dense.dims[0].values == (1,) and dense.dims[1].values is None
    assert not dense.enumerable and 12345 in dense.dims[1]
    with pytest.raises(WorkloadError, match="shape trace"):
        dense.shapes()


def test_tied_axis_follows_its_axis():
    """'=M': attention's scores (seq x seq) as one family of a symbolic length."""
    fam = Family.parse("1..3x64..256:64x=mx128", "batch_matmul", "float16")
    assert fam.shapes() == [(b, m, m, 128) for b in (1, 2, 3) for m in (64, 128, 192, 256)]
    assert fam.varying == ("B", "M", "N")  # the kernels take M and N as two sizes
    assert fam.contains((2, 128, 128, 128)) and not fam.contains((2, 128, 64, 128))
    assert Family.parse(fam.text, "batch_matmul", "float16") == fam
    assert is_family_text("4x64..256:64x=mx128")
    # Buckets follow the diagonal: one per (B, M) power-of-two group.
    buckets = F.make_buckets(fam)
    assert sorted(b.rep[1] == b.rep[2] for b in buckets) == [True] * len(buckets)
    assert sum(len(b.shapes) for b in buckets) == len(fam.shapes())
    odd = Family.parse("1..2x5..40:7x=mx16", "batch_matmul")
    lib = F.compile_library(fallback_library(odd, CPU, 2, "llvm"), CPU)
    assert lib.kernel_for((2, 12, 40, 16)) == 2  # untied: the generic kernel
    _check_all(lib, odd, odd.shapes() + [(2, 12, 40, 16)])


@pytest.mark.parametrize("text,msg", [
    ("1..4x=mx64x32", "ties it to another axis"),          # M tied to itself
    ("1..4x64x=qx32", "'=A' ties it to another axis"),
    ("1..4x64x=mx32", "axis M must be a set or a range"),   # tied to a fixed axis
    ("1..4x?x=mx32", "axis M must be a set or a range"),
    ("1..4x=nx=mx32", "or tied itself"),
])
def test_tie_errors_name_the_problem(text, msg):
    with pytest.raises(WorkloadError, match=msg):
        Family.parse(text, "batch_matmul")


@pytest.mark.parametrize("text,msg", [
    ("1..8x64x512", "needs 4 sizes"),
    ("8..1x64x512x64", "LO <= HI"),
    ("1..8x64..2048:0x512x64", "STEP >= 1"),
    ("1..8xabcx512x64", "malformed size 'abc' for axis M"),
    ("0,1x64x512x64", "sizes are >= 1"),
    ("1..8x1..100000x512x64", "more than 65536 values"),
])
def test_parse_errors_name_the_problem(text, msg):
    with pytest.raises(WorkloadError, match=msg):
        Family.parse(text, "batch_matmul")


def test_family_text_versus_one_shape():
    assert is_family_text("1..8x64x512x64") and is_family_text("8,16x64x512x64")
    assert is_family_text("?x64x512x64")
    assert not is_family_text("4x256x256x256") and not is_family_text("4,256,256,256")


def test_trace_weights_and_membership():
    fam = Family.parse("1..2x64..128:64x32x16", "batch_matmul")
    traced = fam.with_trace([((1, 64, 32, 16), 3), ((2, 128, 32, 16), 1)])
    assert dict(traced.probabilities()) == {(1, 64, 32, 16): 0.75, (2, 128, 32, 16): 0.25}
    with pytest.raises(WorkloadError, match="not in the family"):
        fam.with_trace([((3, 64, 32, 16), 1)])
    with pytest.raises(WorkloadError, match="not positive"):
        fam.with_trace([((1, 64, 32, 16), 0)])


# ---- buckets and the choice of kernels ----

def test_buckets_partition_the_family_at_powers_of_two():
    fam = Family.parse("1..8x64..2048:64x512x64", "batch_matmul")
    buckets = F.make_buckets(fam)
    seen = [s for b in buckets for s in b.shapes]
    assert sorted(seen) == sorted(fam.shapes())  # every shape in exactly one bucket
    for b in buckets:
        assert b.rep in b.shapes and all(b.holds(s) for s in b.shapes)
        for a, (lo, hi) in b.bounds.items():  # (2^(j-1), 2^j], clipped to the family's range
            top = 1 << (hi - 1).bit_length()
            assert top // 2 < lo <= hi <= top or lo == hi == 1
            assert lo >= {"B": 1, "M": 64}[a] and hi <= {"B": 8, "M": 2048}[a]
    assert {b.bounds["M"] for b in buckets} == {(64, 64), (65, 128), (129, 256), (257, 512),
                                                (513, 1024), (1025, 2048)}
    assert abs(sum(b.prob for b in buckets) - 1) < 1e-9
    # The spread of representatives covers the flop range, smallest and largest included.
    reps = F.spread(sorted({b.rep for b in buckets}, key=lambda s: fam.workload(s).flop), 8)
    assert len(reps) == 8 and reps[0] == (1, 64, 512, 64) and reps[-1][0] >= 5


def test_greedy_pick_lowers_the_expected_time_at_each_pick():
    times = np.array([[1.0, 4.0, 4.0],     # fast on bucket 0
                      [4.0, 1.0, 4.0],     # fast on bucket 1
                      [2.0, 2.0, 2.0],     # good everywhere
                      [2.1, 2.1, 2.1]])    # never better than row 2
    weights = np.array([1.0, 1.0, 1.0])
    picks, curve = F.pick_kernels(times, weights, max_kernels=4)
    assert picks[0] == 2 and curve[0] == pytest.approx(6.0)
    assert set(picks[1:]) == {0, 1} and 3 not in picks  # row 3 never makes a bucket faster
    assert all(b < a for a, b in zip(curve, curve[1:]))
    assert curve[-1] == pytest.approx(1.0 + 1.0 + 2.0)
    assert F.pick_kernels(times, weights, max_kernels=1)[0] == [2]
    # A bucket of almost no weight still gets its kernel when it is 5% faster there ...
    weights = np.array([1.0, 1.0, 1e-9])
    times = np.array([[1.0, 1.0, 2.0], [3.0, 3.0, 1.0], [1.0, 1.0, 1.99]])
    assert F.pick_kernels(times, weights, max_kernels=3)[0] == [2, 1]
    # ... and none where it buys less than that.
    times = np.array([[1.0, 1.0, 2.0], [3.0, 3.0, 1.95]])
    assert F.pick_kernels(times, weights, max_kernels=3)[0] == [0]


# ---- one library: kernels, generic kernel, dispatcher ----

def _check_all(lib, fam, shapes):
    rng = np.random.default_rng(1)
    for shape in shapes:
        wl = fam.workload(shape)
        a, b = random_inputs(wl, rng)
        got = lib.run(a, b)
        want = reference_matmul(wl, a, b)
        assert np.allclose(got, want, rtol=1e-4, atol=1e-3), shape


@pytest.mark.parametrize("layout", ["NT", "NN"])
def test_a_family_over_m_serves_few_rows_with_a_kernel_of_their_own_shape(layout):
    """A CPU family whose only varying axis is M (decoding's sequence of tokens against one
    weight) runs M = 1 to 4 (NN: to 8) on the gemv templates, each a kernel of that exact
    shape in the library, before its buckets; the other sizes as before; numpy's answer for
    each (``EXACT_M``)."""
    fam = Family.parse("1..40x96x128", "dense", layout=layout)
    most = 4 if layout == "NT" else 8
    assert [m for m, _ in F.exact_templates(fam, CPU)] == list(range(1, most + 1))
    lib = F.compile_library(fallback_library(fam, CPU, 2, "llvm"), CPU)
    assert [lib.kernel_for((1, m, 96, 128)) for m in (1, most)] == [-1, -1]
    assert lib.kernel_for((1, most + 1, 96, 128)) >= 0
    assert any("M = 1 " in line and "_gemv" in line for line in lib.describe())
    _check_all(lib, fam, [(1, m, 96, 128) for m in (1, 2, 3, most, most + 1, 17, 40)])
    assert F.exact_templates(Family.parse("1..4x1..8x96x128", "batch_matmul"), CPU) == []


@pytest.mark.parametrize("op,text,layout,outside,template", [
    # decoding's q . K^T over the cached keys: N (and the heads) vary; K = 40, a tail of 8
    ("batch_matmul", "1..3x1x16..80:16x40", "NT", [(2, 1, 7, 40), (4, 1, 99, 40)],
     "batch_matmul_gemv.x86"),
    # its P . V over the cached values: K varies; N = 24, one vector and a rest of 8 columns
    ("batch_matmul", "2x1x24x5..77:12", "NN", [(2, 1, 24, 3), (2, 1, 24, 100)],
     "batch_matmul_gemv_nn.x86"),
    ("dense", "2x33..300:89x200", "NT", [(1, 2, 5, 200)], "dense_gemv.x86"),  # weight rows
])
def test_few_rows_against_a_varying_length_run_the_gemv_kernels(op, text, layout, outside,
                                                               template):
    """One or two rows against a weight or cache of varying length: the gemv templates'
    kernels of symbolic N and batch (K and batch for [K, N]) are every bucket kernel and the
    generic one, right inside the family and outside it (odd lengths: the generic kernel)."""
    fam = Family.parse(text, op, layout=layout)
    assert F.family_template(fam, CPU).name == template
    assert F.family_template(fam, CPU, any_size=True).name == template
    assert F.exact_templates(fam, CPU) == []
    lib = F.compile_library(fallback_library(fam, CPU, 2, "llvm"), CPU)
    assert {k.template for k in lib.library.kernels} == {template}
    assert lib.library.generic.template == template
    _check_all(lib, fam, fam.shapes() + outside)
    assert all(lib.kernel_for(s) == len(lib.library.kernels) for s in outside)
    # Where M varies too, the gemv's kernels (one M: its rows unrolled) are not the family's.
    varied = Family.parse("1..2x1..4x64x32" if op == "batch_matmul" else "1..4x64..128:64x32",
                          op, layout=layout)
    why = get_template(template).family_check(varied)
    assert why and "one size of M" in why
    assert F.family_template(varied, CPU).name != template


def test_library_of_bucket_kernels_is_right_for_every_shape(tmp_path):
    """The CPU family of the issue, 256 shapes, through one exported and re-loaded .so whose
    buckets are routed to four kernels (the template's fallbacks at four representatives:
    different tilings), and shapes outside the family through the generic kernel."""
    import tvm
    fam = Family.parse("1..8x64..2048:64x512x64", "batch_matmul")
    lib = F.compile_library(fallback_library(fam, CPU, 4, "llvm"), CPU)
    so = tmp_path / "fam.so"
    lib.export_library(so)
    loaded = tvm.runtime.load_module(str(so))["main"]
    rng = np.random.default_rng(0)
    shapes = fam.shapes()
    assert len(shapes) == 256
    outside = [(9, 64, 512, 64), (1, 2100, 512, 64), (3, 7, 512, 64), (2, 1, 512, 64)]
    for shape in shapes + outside:
        wl = fam.workload(shape)
        a, b = random_inputs(wl, rng)
        out = tvm.runtime.empty(wl.out_shape, wl.out_dtype, tvm.cpu())
        loaded(tvm.runtime.tensor(a), tvm.runtime.tensor(b), out)
        assert np.allclose(out.numpy(), reference_matmul(wl, a, b), rtol=1e-4, atol=1e-3), shape
    assert {lib.kernel_for(s) for s in shapes} == {0, 1, 2, 3}
    assert all(lib.kernel_for(s) == 4 for s in outside)  # the generic kernel
    # A fixed axis of another size is refused by the library, not computed wrong.
    with pytest.raises(Exception, match="512|shape"):
        a = np.zeros((1, 64, 64), "float32")
        b = np.zeros((1, 256, 64), "float32")
        loaded(tvm.runtime.tensor(a), tvm.runtime.tensor(b),
               tvm.runtime.empty((1, 64, 256), "float32", tvm.cpu()))


@pytest.mark.parametrize("op,text,layout", [
    ("batch_matmul", "1..3x5..40:7x24x16", "TN"),   # odd sizes: every axis padded
    ("dense", "1..70:23x96x?", "NN"),               # K of any size (the generic kernel)
    ("dense", "1..4x96x?", "NT"),                   # and of a weight stored [N, K]
    ("dense", "?x40x24", "TT"),
])
def test_generic_kernel_any_layout_and_size(op, text, layout):
    fam = Family.parse(text, op, layout=layout)
    lib = F.build_family(fam, CPU, logs=[])  # no log: the generic kernel alone
    shapes = fam.shapes() if fam.enumerable else []
    extra = {"batch_matmul": [(4, 61, 24, 16)], "dense": [(1, 3, 96, 50), (1, 77, 96, 8),
                                                          (1, 129, 40, 24)]}[op]
    fits = [s for s in extra if all(fam.fixed(a) in (None, v) for a, v in zip("BMNK", s))]
    assert fits  # sizes of the varying axes outside their values: the generic kernel too
    _check_all(lib, fam, shapes + fits)


def test_a_weight_of_symbolic_n_packs_across_its_panels_where_they_outgrow_l1():
    """The generic kernel of a family whose N varies, B stored [N, K] with K = 600 (a panel of
    16 columns is 38 KB, past L1): its padded B packs across each panel's width (the
    transposes need static sizes; ``_edge_transposed_pack``). Right for N of whole panels,
    of a ragged last panel and below one panel."""
    fam = Family.parse("5x?x600", "dense", layout="NT")
    lib = F.build_family(fam, CPU, logs=[])  # no log: the generic kernel alone
    _check_all(lib, fam, [(1, 5, 64, 600), (1, 5, 61, 600), (1, 5, 7, 600)])


# ---- tuning, the log's family line, and apply ----

@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    from tvm_ext.measure import MeasureOptions, RunOptions
    log = tmp_path_factory.mktemp("fam") / "fam.json"
    fam = Family.parse("1..2x16..64:16x32x16", "batch_matmul")
    options = MeasureOptions(run=RunOptions(number=2, repeat=2), n_parallel=1)
    library, report = F.tune_family(fam, CPU, log, trials=4, max_kernels=2, tuner="random",
                                    measure_options=options)
    return fam, log, library, report


def test_tune_family_writes_records_and_one_library_line(tuned):
    fam, log, library, report = tuned
    lines = log.read_text().splitlines()
    assert lines[-1].startswith(record.FAMILY_PREFIX)
    records, set_aside = record.load_log(log)  # the family line is not a record
    assert len(records) == len(lines) - 1 and not set_aside
    tuned_keys = {r.workload.key() for r in records}
    assert tuned_keys == {fam.workload(s).key() for s in report.tuned}
    assert 1 <= len(library.kernels) <= 2 and len(library.routes) == len(report.buckets)
    # a kernel is a representative's (tuned, or its fallback) or one the proposer gave at a
    # heavy bucket (measured only in the re-ranking)
    heavy = {s for b in F.make_buckets(fam)
             for s in (b.rep, max(b.shapes, key=lambda s: fam.workload(s).flop))}
    assert all((k.rep in report.tuned or (not k.tuned and k.rep in heavy))
               and (k.tuned or k.cost is None) for k in library.kernels)
    assert len(report.curve) == len(library.kernels)
    assert report.lines()[0].startswith(f"{len(report.buckets)} buckets")


def test_heavy_buckets_get_proposals_at_their_largest_member():
    """The attention family's heaviest bucket (B 17..32, M and N 2049..4096) has its
    representative at 18x3520, where 128-wide wgmma tiles overhang: the proposer's first at
    32x4096x4096 (two warpgroups, 128 x 256) joins the candidates as that shape's fallback,
    with proposals no other heavy shape gave. No measuring: the proposer only."""
    from tvm_ext.task import Task
    cuda = {"kind": "cuda", "arch": "sm_90", "model": "h100"}
    fam = Family.parse("1..32x64..4096:64x=mx128", "batch_matmul", "float16", "float16",
                       layout="NT")
    name = F.family_template(fam, cuda).name
    granules = F.family_granules(fam, name)

    def task_at(shape):
        return Task(fam.workload(shape), cuda, template=name, symbolic=True, granules=granules)

    buckets = F.make_buckets(fam)
    kernels = F.heavy_proposals(fam, buckets, task_at, top=3, proposed=2)
    at_big = [k for k in kernels if k.rep == (32, 4096, 4096, 128)]
    assert at_big and at_big[0].source == "" and not at_big[0].tuned
    assert at_big[0].config == task_at((32, 4096, 4096, 128)).fallback_config().to_json_dict()
    assert all(k.source == "proposed" for k in at_big[1:])
    assert {k.rep for k in kernels} >= {(18, 3520, 3520, 128), (32, 4096, 4096, 128)}
    configs = [json.dumps(k.config["entity"]) for k in kernels]
    assert len(configs) == len(set(configs))  # no config proposed twice


def test_tuning_a_family_over_m_tunes_the_few_rows_as_their_own_shape(tmp_path):
    """M = 1..6 against a weight stored [N, K]: M = 1 to 4 run kernels of their own shape,
    tuned as that shape (no bucket of them is); the library keeps each one's best record,
    reads it back, is right at every M; a config the space refuses is set aside, with the
    reason, for its fallback."""
    from tvm_ext.measure import MeasureOptions, RunOptions
    fam = Family.parse("1..6x96x128", "dense", layout="NT")
    log = tmp_path / "own.json"
    options = MeasureOptions(run=RunOptions(number=2, repeat=2), n_parallel=1)
    library, report = F.tune_family(fam, CPU, log, trials=2, max_kernels=2, tuner="random",
                                    measure_options=options)
    own = F.exact_templates(fam, CPU)
    assert [m for m, _ in own] == [1, 2, 3, 4]
    # one bucket kernel's bucket, M 5..6; the tuned records: its representative and M 1..4
    assert [b.describe() for b in report.buckets] == ["M 5..6"] == \
        [F.Bucket(bounds, [], 0, ()).describe() for bounds, _ in library.routes]
    records = record.load(log)
    assert {r.workload.key() for r in records} == {fam.workload((1, m, 96, 128)).key()
                                                   for m in (1, 2, 3, 4, 6)}
    assert [(k.rep[1], k.template) for k in library.exact] == own
    for k in library.exact:
        best = [r for r in record.ranked_for(records, fam.workload(k.rep), CPU)
                if r.task_name == k.template][0]
        assert k.tuned and k.config == best.config.to_json_dict() and k.cost == best.result.mean
    assert [k.rep[1] for k in report.exact] == [1, 2, 3, 4] and "M = 4" in report.lines()[2]
    lib = F.build_family(fam, CPU, log)
    assert lib.library.to_json() == library.to_json()
    assert sum("tuned config" in line and "that shape's own" in line
               for line in lib.describe()) == 4
    _check_all(lib, fam, fam.shapes() + [(1, 9, 96, 128)])
    # The M = 2 kernel's config outside this target's space: set aside, its fallback runs.
    bad = F.Library.from_json(json.loads(json.dumps(library.to_json())))
    for knob in bad.exact_kernel(2, own[1][1]).config["entity"]:
        if knob[1] == "ot":
            knob[2] = 999  # no option of the knob
    built = F.compile_library(bad, CPU)
    assert list(built.library.set_aside) == [-2]
    assert "M = 2's own kernel" in built.library.set_aside[-2]
    assert any(line.startswith("  M = 2 ") and "its fallback" in line
               for line in built.describe())
    _check_all(built, fam, [(1, 2, 96, 128)])


def test_library_from_the_log_is_the_tuned_one(tuned, tmp_path):
    fam, log, library, _ = tuned
    (back,) = F.load_libraries(log)
    assert back.to_json() == library.to_json()
    lib = F.build_family(fam, CPU, log)
    assert lib.library.to_json() == library.to_json()
    with apply_history_best(str(log)):
        assert F.build_family(fam, CPU).library.to_json() == library.to_json()
    _check_all(lib, fam, fam.shapes() + [(3, 100, 32, 16)])
    # Another family of the same op is not served by this library: the generic kernel alone.
    other = Family.parse("1..2x16..64:16x32x32", "batch_matmul")
    assert F.build_family(other, CPU, log).library.kernels == []


def test_corrupt_family_line_is_named(tuned, tmp_path):
    _, log, _, _ = tuned
    bad = tmp_path / "bad.json"
    bad.write_text(log.read_text() + '{"family_library": {"op": "batch_matmul"}}\n')
    with pytest.raises(LogError, match=r"bad.json:\d+: corrupt family library"):
        F.load_libraries(bad)


def test_cli_family_dry_run_export_and_errors(tuned, tmp_path):
    fam, log, library, _ = tuned
    run = [sys.executable, "-m", "tvm_ext.tune", "--target", "llvm"]
    out = subprocess.run(run + ["--shape", "1..8x64..2048:64x512x64", "--dry-run"],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "24 buckets" in out.stdout and "would tune 8 representatives" in out.stdout
    so = tmp_path / "lib.so"
    out = subprocess.run(run + ["--shape", fam.text, "--log", str(log), "--export", str(so)],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert f"library from {log} written to {so}" in out.stdout and so.stat().st_size > 0
    for args, msg in [(["--shape", "1..8x64x512x64", "--max-kernels", "0"], "--max-kernels"),
                      (["--shape", "4x64x512x64", "--export", "x.so"], "--export is for a "
                                                                       "shape family"),
                      (["--shape", "?x64x512x64"], "needs --shape-trace"),
                      (["--shape", "1..4x6..3x512x64"], "LO <= HI")]:
        out = subprocess.run(run + args, capture_output=True, text=True)
        assert out.returncode == 2 and msg in out.stderr, (args, out.stderr)
        assert len(out.stderr.strip().splitlines()) == 1


def test_cli_shape_trace(tmp_path):
    trace = tmp_path / "trace.txt"
    trace.write_text("1x64x512x64 10\n2x128x512x64 # a comment\n")
    out = subprocess.run([sys.executable, "-m", "tvm_ext.tune", "--target", "llvm", "--shape",
                          "1..2x64..128:64x512x64", "--shape-trace", str(trace), "--dry-run"],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "2 shapes" in out.stdout and "2 buckets" in out.stdout
    trace.write_text("1x64x512 ten\n")
    out = subprocess.run([sys.executable, "-m", "tvm_ext.tune", "--target", "llvm", "--shape",
                          "1..2x64..128:64x512x64", "--shape-trace", str(trace), "--dry-run"],
                         capture_output=True, text=True)
    assert out.returncode == 2 and "trace.txt:1: expected" in out.stderr


def test_library_json_keeps_the_trace():
    fam = Family.parse("1..2x64x32x16", "batch_matmul").with_trace([((1, 64, 32, 16), 2.0)])
    lib = F.Library(fam, "llvm", [], [], F.LibKernel("batch_matmul.x86", (1, 64, 32, 16), {},
                                                     tuned=False))
    back = F.Library.from_json(json.loads(json.dumps(lib.to_json())))
    assert back.family == fam


def test_kernel_outside_this_targets_space_is_set_aside(tuned):
    """A library kernel whose config this target's space refuses is not built as something
    else: its buckets run the generic kernel, and the library says why."""
    fam, log, library, _ = tuned
    lib = F.Library.from_json(json.loads(json.dumps(library.to_json())))
    entity = lib.kernels[0].config["entity"]
    for knob in entity:
        if knob[0] == "tile_y":
            knob[2] = [-1, 7]  # 7 divides no M of the representative
    built = F.compile_library(lib, CPU)
    assert list(built.library.set_aside) == [0]
    assert "not a value of this space" in built.library.set_aside[0]
    text = "\n".join(built.describe())
    assert "generic: kernel set aside" in text and "set aside: kernel 0" in text
    served = [s for s in fam.shapes() if lib.routes and any(
        i == 0 and all(lo <= s["BMNK".index(a)] <= hi for a, (lo, hi) in b.items())
        for b, i in lib.routes)]
    assert served and all(built.kernel_for(s) == len(lib.kernels) for s in served)
    _check_all(built, fam, fam.shapes())


def test_library_kernel_says_where_its_config_came_from():
    """A proposed kernel keeps its origin through the log; a line written before origins
    existed reads as what it was (tuned, or the fallback)."""
    k = F.LibKernel("batch_matmul.x86", (2, 64, 64, 64), {"entity": []}, tuned=False,
                    source="proposed")
    assert F.LibKernel.from_json(k.to_json()) == k and k.how == "proposed"
    old = {"template": "batch_matmul.x86", "rep": [2, 64, 64, 64], "config": {}, "tuned": False}
    assert F.LibKernel.from_json(old).how == "fallback"
    assert "source" not in F.LibKernel("t", (1, 1, 1, 1), {}, True, 1.0).to_json()
