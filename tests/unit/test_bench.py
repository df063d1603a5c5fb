"""The benchmark command runs end to end on tiny shapes (its numbers are not asserted)."""
import json
import subprocess
import sys

import pytest

from tvm_ext import bench
from tvm_ext.bench.__main__ import main


@pytest.fixture(scope="module")
def quick_suite(tmp_path_factory):
    """One quick CPU suite run, tuned 2 trials a row: (its log, its JSON rows, its stdout),
    shared by the tests that read them (the run takes most of a minute on 2 cores)."""
    import contextlib
    import io
    from tvm_ext.bench import cpu
    tmp = tmp_path_factory.mktemp("quick_suite")
    log, out, printed = tmp / "q.json", tmp / "rows.json", io.StringIO()
    # the idle time before each sample is for the figures, which these tests do not read
    with contextlib.redirect_stdout(printed), pytest.MonkeyPatch.context() as mp:
        mp.setattr(cpu, "IDLE_S", 0.01)
        rc = main(["--suite", "cpu", "--quick", "--tune", "2", "--log", str(log), "--repeat",
                   "2", "--json", str(out)])
    assert rc == 0
    return str(log), json.loads(out.read_text()), printed.getvalue()


def test_cpu_suite_quick(quick_suite):
    _, rows, printed = quick_suite
    # bmm, dense, gemv, gemv_nn, odd, then the chain; every row measured, tuned, with numpy's
    # best sample and (tuned matmul rows) the template's fallback timed beside it.
    assert [r["name"].split()[0] for r in rows] == ["bmm", "dense", "gemv", "gemv_nn", "odd",
                                                    "chain"]
    assert all(r["ours_ms"] > 0 and r["ref_ms"] > 0 and r["ref_best_ms"] > 0 for r in rows)
    assert all(0 < r["ours_best_ms"] <= r["ours_ms"] for r in rows)
    assert all(r["tuned"].endswith("tuned") for r in rows)
    assert all(r["fallback_ms"] > 0 for r in rows[:-1])
    assert "dense_gemv.x86 tuned" in rows[2]["tuned"]
    assert "dense_gemv_nn.x86 tuned" in rows[3]["tuned"]
    assert "ratio" in printed


def test_cpu_suite_only_runs_the_rows_it_names(tmp_path):
    """``--only`` picks the CPU suite's rows ("chain": its two matmuls and the exp)."""
    out = tmp_path / "rows.json"
    assert main(["--suite", "cpu", "--quick", "--only", "odd", "chain", "--log",
                 str(tmp_path / "none.json"), "--repeat", "1", "--json", str(out)]) == 0
    assert [r["name"].split()[0] for r in json.loads(out.read_text())] == ["odd", "chain"]
    assert main(["--suite", "cpu", "--quick", "--only", "gemv", "--log",
                 str(tmp_path / "none.json"), "--repeat", "1", "--json", str(out)]) == 0
    assert [r["name"].split()[0] for r in json.loads(out.read_text())] == ["gemv"]


def test_tuning_cost_quick(quick_suite, tmp_path, capsys):
    """--suite tuning-cost on the CPU: XGB from scratch against a log's best records (the quick
    suite's tuning), stopping with the batch that reaches 90% of each record's speed."""
    import numpy as np
    from tvm_ext.bench.cpu import CPU_QUICK
    from tvm_ext.target import host_cpu_target
    from tvm_ext.task import Task
    log, out = quick_suite[0], tmp_path / "cost.json"
    assert main(["--suite", "tuning-cost", "--quick", "--log", log, "--trials", "16",
                       "--json", str(out)]) == 0
    rows = json.loads(out.read_text())
    assert [r["name"] for r in rows] == ["bmm", "dense", "chain_mm1", "chain_mm2", "gemv",
                                         "gemv_nn", "odd"]
    for r in rows:
        assert r["shipped_ms"] > 0 and 0 < r["trials"] <= 16 and r["best_ms"] > 0
        if r["reached_trial"] is not None:
            assert r["best_ms"] <= r["shipped_ms"] / 0.9
            assert r["trials"] == min(16, -(-r["reached_trial"] // 8) * 8)  # batches of 8
        else:  # 16 trials, or every valid config of a smaller space (gemv_nn 1x48x32: 12)
            task = Task(CPU_QUICK[r["name"]], host_cpu_target(), template=r["template"])
            valid = len(task.space.random_valid(np.random.default_rng(0), 16))
            assert r["trials"] == min(16, valid) and r["best_ms"] > r["shipped_ms"] / 0.9
    assert "reached at" in capsys.readouterr().out
    assert main(["--suite", "tuning-cost", "--log", str(tmp_path / "none.json")]) == 2


def test_unknown_suite(capsys):
    assert main(["--suite", "tpu"]) == 2
    assert "unknown suite 'tpu'" in capsys.readouterr().err


def test_package_import_is_light():
    """``tvm_ext.bench`` names its parts lazily: importing it (and reading a suite) loads
    neither TVM, torch nor matplotlib."""
    code = ("import sys\nfrom tvm_ext import bench\n"
            "bench.main, bench.GPU_SUITE, bench.run_cpu, bench.run_tuning_cost, bench.plot_ratios\n"
            "print(sorted(m for m in ('tvm', 'torch', 'matplotlib') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"
    assert bench.main is main and bench.GPU_SUITE["gemv_f16"].dtype == "float16"


def test_ratio_plot_from_rows(tmp_path):
    """--replot draws the ratio bars of an earlier --json (one bar per kernel kind)."""
    pytest.importorskip("matplotlib")
    rows = [{"name": f"w{i} dense 8x8x8 float32 NT [{kind}]", "ratio": r}
            for i in range(2) for kind, r in (("dlight", 0.5), ("fallback", float("inf")),
                                               ("tuned", 1.5))]
    src = tmp_path / "rows.json"
    src.write_text(json.dumps(rows))
    png = tmp_path / "rows.png"
    assert main(["--replot", str(src), "--plot", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    from PIL import Image  # a matplotlib requirement
    with Image.open(png) as im:  # a palette of at most 256 colours (save_png), all drawn
        assert im.mode == "P" and 3 < len(im.convert("RGB").getcolors(256)) <= 256


def test_plot_without_matplotlib_is_a_line_not_an_error(tmp_path, monkeypatch, capsys):
    """The bench draws its chart after the measurements: without matplotlib it says so in the
    report's words and still succeeds (the rows printed are not lost)."""
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` fails
    src = tmp_path / "rows.json"
    src.write_text(json.dumps([{"name": "w dense 8x8x8 float32 NT [tuned]", "ratio": 1.5}]))
    png = tmp_path / "rows.png"
    assert main(["--replot", str(src), "--plot", str(png)]) == 0
    assert "--plot needs matplotlib, which is not installed (pip install 'tvm_ext[plot]'): " \
        "no plot written" in capsys.readouterr().out
    assert not png.exists()


def test_family_bench_tied_family_and_resume(tmp_path, capsys, monkeypatch):
    """bench.family on a tied family (seq x seq) runs end to end; --resume keeps the tuned
    library, the per-shape logs and their tuning seconds (a run cut off by the device's time
    limit goes on where it stopped) and checks every shape again. TVM's dynamic path giving a
    wrong answer (dlight's P . V on an H200) is said, not timed, and ends nothing."""
    import numpy as np
    import tvm
    import tvm_ext.bench.family as bench_family
    from tvm_ext.bench.family import main as family_main
    argv = ["--shape", "1..2x8..24:16x=mx16", "--trials", "2", "--sample", "1", "--rounds",
            "1", "--max-kernels", "1", "--workdir", str(tmp_path)]
    assert family_main(argv) == 0
    first = capsys.readouterr().out
    assert "all 4 shapes of the family match numpy" in first
    spent = json.loads((tmp_path / "tuning_seconds.json").read_text())
    assert sorted(k.split()[0] for k in spent) == ["family", "shape"]
    assert all(v > 0 for v in spent.values())
    monkeypatch.setattr(bench_family, "dynamic_kernel", lambda fam, target: lambda case: (
        lambda: tvm.runtime.tensor(np.ones(case.wl.out_shape, case.wl.out_dtype))))
    assert family_main(argv + ["--resume"]) == 0
    again = capsys.readouterr().out
    assert "resumed: the family's library" in again and "tuning representative" not in again
    assert "all 4 shapes of the family match numpy" in again
    assert "TVM's dynamic path gives a wrong result for" in again and "not timed" in again
    assert json.loads((tmp_path / "tuning_seconds.json").read_text()) == spent
    with pytest.raises(SystemExit):
        family_main(["--resume"])


def test_gpu_suite_bf16_rows_take_their_f16_twins_record():
    """Each bf16 row of the GPU suite has an f16 twin of the same shape and layout, and the
    shipped sm_90 log's record of that twin builds as a bf16 kernel of the same template and
    knobs (the bench's "f16 record" row); an f16 workload has no such row."""
    from tvm_ext.bench.gpu import GPU_SUITE, f16_record_config
    from tvm_ext.target import cuda_target
    target = cuda_target("sm_90", "h100")
    bf16 = {k: wl for k, wl in GPU_SUITE.items() if wl.dtype == "bfloat16"}
    assert len(bf16) == 4
    for key, wl in bf16.items():
        twin = GPU_SUITE[key.replace("bf16", "f16")]
        assert (twin.op, twin.batch, twin.M, twin.N, twin.K, twin.layout) == \
            (wl.op, wl.batch, wl.M, wl.N, wl.K, wl.layout)
        task, config = f16_record_config(wl, target, ["logs/cuda_sm90.json"])
        assert task.workload == wl and task.space.is_valid(config)
        assert task.name.endswith(("_wgmma.cuda", "_wgmma_ws.cuda"))
    assert f16_record_config(GPU_SUITE["mm1024_f16"], target, ["logs/cuda_sm90.json"]) is None
    assert f16_record_config(bf16["mm1024_bf16"], target, []) is None


def test_gpu_sweep_rejects_unknown_knobs_and_values_before_measuring(capsys):
    """``--sweep T --set K=V,..``: a knob the template lacks, a value outside its candidates
    and a malformed item are one-line errors, before any kernel is built (no GPU needed)."""
    from tvm_ext.bench.__main__ import _knob_grid
    from tvm_ext.bench.gpu import GPU_SUITE, run_sweep
    from tvm_ext.errors import TvmExtError
    from tvm_ext.target import cuda_target
    assert _knob_grid(["staged_store=0,1", "block_n=128"]) == {"staged_store": [0, 1],
                                                                "block_n": [128]}
    with pytest.raises(TvmExtError, match="KNOB=V1,V2"):
        _knob_grid(["staged_store"])
    suite = {"attn_f16": GPU_SUITE["attn_f16"]}
    sm90 = cuda_target("sm_90", "h100")
    # a template by its own name, the dense / batch_matmul twins by either name or their suffix
    from tvm_ext.bench.gpu import template_task
    for name, wl, want in (("batch_matmul.cuda", "attn_f16", "batch_matmul.cuda"),
                           ("small_batch.cuda", "dec_pv_f16", "batch_matmul_small_batch.cuda"),
                           ("dense_small_batch.cuda", "dec_qk_f16",
                            "batch_matmul_small_batch.cuda"),
                           ("sgemm.cuda", "bmm", "batch_matmul_sgemm.cuda")):
        assert template_task(GPU_SUITE[wl], name, sm90).name == want
    with pytest.raises(TvmExtError, match="has no knob 'blockn'"):
        run_sweep(suite, "batch_matmul_wgmma_ws.cuda", {"blockn": [128]}, repeat=1,
                  target=sm90)
    with pytest.raises(TvmExtError, match="3 is not a value of knob 'staged_store'"):
        run_sweep(suite, "batch_matmul_wgmma_ws.cuda", {"staged_store": [0, 3]}, repeat=1,
                  target=sm90)
    assert main(["--suite", "tuning-cost", "--sweep", "dense_pack.x86"]) == 2
    assert "--sweep is an option of the gpu and cpu suites" in capsys.readouterr().err
    assert main(["--suite", "cpu", "--only", "bmm", "--sweep", "batch_matmul.x86", "--set",
                 "xc=3"]) == 2
    assert "3 is not a value of knob 'xc'" in capsys.readouterr().err
    assert main(["--suite", "cpu", "--only", "bmm", "--sweep", "batch_matmul.x86", "--set",
                 "tile_x=32"]) == 2
    assert "knob 'tile_x' is a split: --sweep sets plain knobs" in capsys.readouterr().err
    assert main(["--suite", "cpu", "--only", "nope", "--sweep", "batch_matmul.x86"]) == 2
    assert "--only: no workload of the cpu suite" in capsys.readouterr().err
    assert main(["--suite", "gpu", "--set", "block_n=128"]) == 2
    assert "--set gives --sweep's knob values" in capsys.readouterr().err


def test_the_chains_exp_kernel_has_float32_accuracy():
    """The CPU chain's exp (TVM's fast_exp, vectorised): within a few float32 roundings of
    float64 numpy over the range the chain feeds it, and a large negative input gives 0."""
    import numpy as np
    import tvm
    from tvm_ext.bench.cpu import exp_kernel
    from tvm_ext.target import host_cpu_target
    x = np.random.default_rng(0).uniform(-10, 10, (64, 48)).astype("float32")
    x[0, 0] = -200.0
    k = exp_kernel(x.shape, host_cpu_target())
    y = tvm.runtime.empty(x.shape, "float32", tvm.cpu())
    k["main"](tvm.runtime.tensor(x), y)
    ref = np.exp(x.astype(np.float64))
    got = y.numpy()
    assert got[0, 0] < 1e-30
    assert np.max(np.abs(got - ref)[1:] / ref[1:]) < 4e-7


def test_cpu_sweep_checks_and_samples_every_combination(capsys):
    """``--suite cpu --sweep T --set K=V1,V2``: the template's fallback with each value, each
    kernel checked against numpy and sampled in turn with it: one row per value, on the
    quick suite's shapes (no log involved)."""
    from tvm_ext.bench.cpu import CPU_QUICK, run_cpu_sweep
    rows = run_cpu_sweep({"bmm": CPU_QUICK["bmm"]}, "batch_matmul.x86", {"yt": [1, 2]},
                         repeat=2)
    assert [r.name.split("[")[1] for r in rows] == ["yt=1]", "yt=2]"]
    assert all(r.ours_ms > 0 and r.ref_ms > 0 and r.tuned == "batch_matmul.x86" for r in rows)


def test_shapes_samples_other_templates_in_turn(capsys):
    """``bench.shapes --versus T``: T's fallback checked against numpy and sampled in turn
    with each row it applies to but does not serve (dense 4x4096x64: the packed kernel by
    default, the gemv beside it); a row it serves or does not take has none; an unknown
    template is a one-line error (exit 2) before anything is built."""
    from tvm_ext.bench import shapes
    key = next(k for k, w in shapes.workloads().items() if str(w) == "dense 4x4096x64 float32 NT")
    one = next(k for k, w in shapes.workloads().items() if str(w) == "dense 1x1000x1000 float32 NT")
    assert shapes.main(["--only", key, one, "--repeat", "1", "--versus", "dense_gemv.x86"]) == 0
    out = capsys.readouterr().out.splitlines()
    row, other = (next(line for line in out if line.startswith(k + " ")) for k in (key, one))
    assert "(dense_pack.x86 fallback)" in row and "; dense_gemv.x86 fallback " in row, row
    assert "(dense_gemv.x86 fallback)" in other and "; dense_gemv.x86" not in other, other
    with pytest.raises(SystemExit) as err:
        shapes.main(["--versus", "no_such.x86"])
    assert err.value.code == 2 and "unknown template 'no_such.x86'" in capsys.readouterr().err


def test_one_kernel_for_a_profiler_checks_its_arguments_first(capsys):
    """``python -m tvm_ext.bench.one``: an unknown suite key, no kernel named (or two), knobs
    set on a log's record and a knob with several values are one-line errors (exit 2) before
    anything is built (no GPU needed)."""
    from tvm_ext.bench import one
    assert one.main(["--only", "nope", "--cublas"]) == 2
    assert "not in the GPU suite" in capsys.readouterr().err
    assert one.main(["--only", "mm8192"]) == 2
    assert "give one of --template, --log and --cublas" in capsys.readouterr().err
    assert one.main(["--only", "mm8192", "--cublas", "--log", "logs/cuda_sm90.json"]) == 2
    assert "give one of --template, --log and --cublas" in capsys.readouterr().err
    assert one.main(["--only", "mm8192", "--log", "logs/cuda_sm90.json", "--set",
                     "block_k=8"]) == 2
    assert "--set takes --template" in capsys.readouterr().err
    assert one.main(["--only", "mm8192", "--template", "sgemm.cuda", "--set",
                     "block_k=8,16"]) == 2
    assert "one value a knob" in capsys.readouterr().err


def test_gpu_rows_sample_in_turn_and_mark_failed_kernels():
    """The GPU rows' sampler (no GPU needed): every launch sampled once a round, in the
    launches' order; a kernel that failed has no launch and gets nan, a wrong one inf."""
    import math
    from tvm_ext.bench.gpu import _in_turn
    order = []

    class Sampler:
        def __init__(self, fn):
            self.fn = fn

        def sample(self):
            order.append(self.fn())
            return 1e-3

    res = _in_turn({"cuBLAS": lambda: "c", "tuned": lambda: "t"}, 3, Sampler,
                   {"dlight": "-", "fallback": "wrong answer"})
    assert order == ["c", "t"] * 3
    assert res["cuBLAS"] == res["tuned"] == (1.0, "1.000-1.000")
    assert math.isnan(res["dlight"][0]) and res["dlight"][1] == "-"
    assert res["fallback"] == (math.inf, "wrong answer")


def test_a_tuned_row_whose_record_is_its_fallback_says_so(tmp_path, capsys):
    """A record whose config is the template's fallback (a fallback that won its tuning run's
    closing comparison) makes "tuned/fallback" one kernel: timed once (as the report times it;
    two timings of it differed by the host's noise, 0.83x once on a 16-core VM), and said."""
    from tvm_ext import record
    from tvm_ext.bench.common import Row, print_table
    from tvm_ext.bench.cpu import CPU_QUICK, run_cpu
    from tvm_ext.result import MeasureResult
    from tvm_ext.target import host_cpu_target
    from tvm_ext.task import Task
    wl = CPU_QUICK["dense"]
    task = Task(wl, host_cpu_target())
    log = tmp_path / "fallback.json"
    record.append(log, [record.encode(task.target_str, task.name, wl, task.fallback_config(),
                                      MeasureResult([1e-5], 0, 0.1))])
    assert task.is_fallback(task.fallback_config())
    assert any(task.space.is_valid(i) and not task.is_fallback(task.config(i))
               for i in range(len(task.space)))
    (row,) = run_cpu({"dense": wl}, log=str(log), repeat=1)
    assert row.tuned.endswith("tuned") and row.fallback_same and row.fallback_ms == row.ours_ms
    other = Row("odd x", 1e9, 2.0, "", 1.0, "", "dense_pack.x86 tuned", fallback_ms=1.2)
    print_table([row, other], ref_name="numpy")
    lines = capsys.readouterr().out.splitlines()
    assert "1.00x (one config, timed once: the record is the fallback's)" in lines[-2], lines[-2]
    assert "tuned/fallback 1.20x" in lines[-1] and "one config" not in lines[-1]
