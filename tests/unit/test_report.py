"""The tuning report (``python -m tvm_ext.report``) on a log tuned here: what it prints (trials,
tuning time, the best, the best and the fallback measured against numpy), its plot, the lines
``tune_summary`` gives the CLI (and that their commands work), a CUDA log on a machine without
a GPU, and bad input (one line, exit 2)."""
import contextlib
import io
import json
import os
import re
import shlex
import subprocess
import sys

import pytest

from tvm_ext import record, report
from tvm_ext.measure import MeasureOptions, RunOptions
from tvm_ext.result import MeasureResult
from tvm_ext.session import tune_task
from tvm_ext.space import ConfigEntity
from tvm_ext.target import cuda_target, host_cpu_target, target_str
from tvm_ext.task import Task
from tvm_ext.workload import Workload

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CPU = host_cpu_target()
WL = Workload.create("dense", (32, 60, 48))  # (N < 2 M: dense_pack.x86 is the default)
NUMBER = r"([0-9.]+(?:e-?[0-9]+)?)"


def _main(*argv):
    """(exit code, stdout, stderr) of the report's CLI, run in this process."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = report.main([str(a) for a in argv])
    return rc, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def cpu_log(tmp_path_factory):
    """A real log: 4 random configs of a tiny dense, measured by the pool as the CLI does."""
    log = tmp_path_factory.mktemp("report") / "dense.json"
    s = tune_task(Task(WL, CPU), log, trials=4, tuner="random",
                  measure_options=MeasureOptions(run=RunOptions(number=2, repeat=2)))
    assert s.trials == 4
    return log


@pytest.fixture(scope="module")
def cpu_report(cpu_log):
    return _main(cpu_log, "--rounds", "2")


def test_report_gives_the_recorded_figures(cpu_log, cpu_report):
    rc, out, err = cpu_report
    assert rc == 0, err
    records = record.load(cpu_log)
    best = min((r for r in records if r.result.ok), key=lambda r: r.result.mean)
    assert f"{cpu_log}: 4 records ({4 - sum(r.result.ok for r in records)} failed) of 1 " \
           "workload on llvm" in out
    assert "dense 32x60x48 float32 NT  [llvm " in out
    assert re.search(r"4 trials, \d failed; tuning took", out)
    # first measurement's start (its timestamp minus its all_cost) to the last one's end
    first = min(records, key=lambda r: r.result.timestamp)
    span = max(r.result.timestamp for r in records) - first.result.timestamp \
        + first.result.all_cost
    took = float(re.search(r"tuning took ([0-9.]+) s", out).group(1))
    assert took == pytest.approx(span, abs=0.06) and took > 0
    line = next(ln for ln in out.splitlines() if "best in the log:" in ln)
    assert best.task_name in line and "dense_pack.x86" in line
    assert f"{best.result.mean * 1e3:.4g} ms" in line
    assert f"{WL.flop / best.result.mean / 1e9:.1f} GFLOP/s" in line
    assert "tile_y=" in line  # the best config itself


def test_report_measures_best_fallback_and_numpy_here(cpu_report):
    rc, out, _ = cpu_report
    here = re.search(rf"here \(llvm .* on \d+ threads\): best {NUMBER} ms, fallback {NUMBER} ms, "
                     rf"numpy {NUMBER} ms", out)
    assert here, out
    best, fallback, numpy_ms = (float(v) for v in here.groups())
    assert all(0 < v < 50 for v in (best, fallback, numpy_ms))  # a 32x60x48 GEMM: microseconds
    ratios = re.search(rf"best/fallback speedup {NUMBER}x; numpy/best {NUMBER}", out)
    assert ratios, out
    speedup, vendor = (float(v) for v in ratios.groups())
    assert speedup == pytest.approx(fallback / best, rel=0.02)
    assert vendor == pytest.approx(numpy_ms / best, rel=0.02)
    assert "WRONG" not in out and "failed here" not in out  # both kernels checked right


def test_a_best_record_of_the_fallbacks_config_is_timed_once(monkeypatch):
    """A best record of the fallback's config is one kernel: built, timed once, said so."""
    task = Task(WL, CPU, template="dense_pack.x86")
    rec = record.Record(target_str(CPU), task.name, WL, task.fallback_config(),
                        MeasureResult((1e-5,), 0, 0.1, 1.0))
    built = []
    build = Task.build
    monkeypatch.setattr(Task, "build", lambda self, cfg: built.append(cfg) or build(self, cfg))
    m = report.measure(WL, [rec], CPU, rounds=2)
    assert m.tuned and built == [task.fallback_config()]
    assert m.best_s == m.fallback_s > 0 and m.speedup == 1
    assert "the best record is the fallback's own config" in "\n".join(m.lines())


def test_no_measure_builds_nothing(cpu_log, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("--no-measure measured")
    monkeypatch.setattr(report, "measure", refuse)
    rc, out, err = _main(cpu_log, "--no-measure")
    assert rc == 0, err
    assert "recorded figures only (--no-measure)" in out
    assert "best in the log: dense_pack.x86" in out and "4 trials" in out
    assert "here (" not in out


def test_plot_writes_the_tuning_curves(cpu_log, tmp_path):
    pytest.importorskip("matplotlib")
    png = tmp_path / "curves.png"
    rc, out, err = _main(cpu_log, "--no-measure", "--plot", png)
    assert rc == 0, err
    assert f"plot: {png}" in out
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000


def test_plot_without_matplotlib_is_one_line(cpu_log, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` fails
    rc, out, err = _main(cpu_log, "--plot", tmp_path / "c.png")
    assert rc == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("tvm_ext.report: error: --plot needs "
                                                   "matplotlib")
    assert not (tmp_path / "c.png").exists()


def test_tune_summary_measures_and_gives_working_commands(cpu_log):
    lines = report.tune_summary(cpu_log, WL, CPU, rounds=2)
    text = "\n".join(lines)
    assert re.search(r"best of 4 trials: dense_pack.x86 [0-9.e-]+ ms \([0-9.]+ GFLOP/s\)", text)
    ratios = re.search(rf"best/fallback speedup {NUMBER}x; numpy/best {NUMBER}", text)
    assert ratios and all(float(v) > 0 for v in ratios.groups()), text
    assert re.search(r"here \(llvm .*\): best [0-9.e-]+ ms, fallback [0-9.e-]+ ms", text)
    # The listing command: what build applies, through the tune CLI itself.
    listing = next(ln for ln in lines if "python -m tvm_ext.tune --best" in ln)
    argv = shlex.split(listing.split(": ", 1)[1])
    assert argv[:3] == ["python", "-m", "tvm_ext.tune"] and argv[-2:] == ["--target", "llvm"]
    from tvm_ext import tune
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert tune.main(argv[3:]) == 0
    assert "dense 32x60x48 float32 NT" in out.getvalue() and "dense_pack.x86" in out.getvalue()
    # The Python command: a shell command over several lines; run its code as python -c would.
    start = next(i for i, ln in enumerate(lines) if ln.startswith("python -c "))
    argv = shlex.split("\n".join(lines[start:]))
    assert argv[:2] == ["python", "-c"] and len(argv) == 3
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(argv[2], "<python -c>", "exec"), {})
    assert "1 of 1 kernels used a tuned config" in out.getvalue()


def _cuda_log(path):
    """A CUDA log written as the tuner writes one: a workload of two templates with a failed
    trial among them, and a subgraph workload (an epilogue)."""
    target = target_str(cuda_target("sm_90", "h100"))
    wl = Workload.create("dense", (256, 256, 256), "float16")
    sub = wl.with_(epilogue="bias+relu")
    cfg = ConfigEntity.from_json_dict({"index": 0, "code_hash": None,
                                       "entity": [["tile_x", "sp", [-1, 16]]]})
    rows = [("dense_large_batch.cuda", wl, MeasureResult([4e-5], 0, 2.0, 1000.0)),
            ("dense_mma.cuda", wl, MeasureResult([1e-5], 0, 1.0, 1010.0)),
            ("dense_mma.cuda", wl, MeasureResult.error(5, "wrong answer", 1.0)),
            ("dense_mma.cuda", sub, MeasureResult([2e-5], 0, 0.5, 2000.0))]
    rows[2][2].timestamp = 1030.0
    record.append(path, (record.encode(target, name, w, cfg, r) for name, w, r in rows))
    return wl, sub


def test_a_cuda_log_without_a_gpu_gives_the_recorded_figures(tmp_path, monkeypatch):
    import tvm_ext.target
    monkeypatch.setattr(tvm_ext.target, "gpu_visible", lambda: False)
    log = tmp_path / "cuda.json"
    wl, sub = _cuda_log(log)
    rc, out, err = _main(log)
    assert rc == 0, err
    assert "4 records (1 failed) of 2 workloads on cuda sm_90 (h100)" in out
    assert "3 trials (dense_large_batch.cuda 1, dense_mma.cuda 2), 1 failed; tuning took " \
           "32.0 s" in out  # 1000 - 2.0 (the first's all_cost) to 1030
    # the failed record (no time) is a trial, never the best
    assert "best in the log: dense_mma.cuda  0.01 ms  3355.4 GFLOP/s  tile_x=[-1, 16]" in out
    assert "dense 256x256x256 float16 NT +bias+relu  [cuda sm_90 (h100)]" in out
    assert out.count("recorded figures only: no GPU is visible on this machine") == 2
    lines = report.tune_summary(log, wl, cuda_target("sm_90", "h100"))
    assert lines[0].startswith("best of 3 trials: dense_mma.cuda 0.01 ms")
    assert lines[1] == "not measured here: no GPU is visible on this machine"
    assert any('tvm_ext.build(wl, "cuda:sm_90")' in ln for ln in lines)
    assert any(f"--best {log} --target cuda:sm_90" in ln for ln in lines)
    sub_lines = "\n".join(report.tune_summary(log, sub, cuda_target("sm_90")))
    assert 'epilogue="bias+relu"' in sub_lines and "best of 1 trials" in sub_lines
    rc, out, err = _main(log, "--target", "llvm")  # the log holds no record for it
    assert rc == 2 and "has no records for target llvm" in err and err.count("\n") == 1


def test_cpu_samples_pause_only_where_the_other_librarys_threads_ran(cpu_log, monkeypatch):
    """The summary's CPU samples, in turn, pause (``CPU_PAUSE_S``) before a call whose
    threads are not the last call's (numpy's BLAS after ours, ours after numpy's) and before
    the first, not between two of our kernels (one thread pool)."""
    from tvm_ext.measure import timing
    events, real_vendor = [], report._vendor_cpu

    def vendor(wl, inputs):
        name, fn, why = real_vendor(wl, inputs)

        def numpy_call():
            return fn()
        return name, numpy_call, why

    class Sampler(timing.WallSampler):  # logs whose calls each sampler runs
        def __init__(self, fn, min_s):
            self.lib = "numpy" if fn.__name__ == "numpy_call" else "ours"
            events.append(self.lib)
            super().__init__(fn, min_s)

        def sample(self):
            events.append(self.lib)
            return super().sample()
    monkeypatch.setattr(report, "_vendor_cpu", vendor)
    monkeypatch.setattr(timing, "WallSampler", Sampler)
    monkeypatch.setattr(report.time, "sleep", lambda s: events.append("pause"))
    m = report.measure(WL, record.load(cpu_log), CPU, rounds=3)
    assert m.fallback_s and m.vendor_s
    calls = [e for e in events if e != "pause"]
    assert calls.count("numpy") == 4 and calls.count("ours") >= 4  # created, then 3 rounds
    last = None
    for before, call in zip(["start"] + events, events):
        if call != "pause":
            assert (before == "pause") == (call != last), events
            last = call


def test_an_epilogue_workload_is_timed_with_its_inputs(tmp_path):
    """A subgraph record (bias+relu) on the CPU: the fused kernel takes the bias, and numpy
    computes the bare matmul, which the report says."""
    sub = WL.with_(epilogue="bias+relu")
    task = Task(sub, CPU)
    log = tmp_path / "sub.json"
    record.append(log, [record.encode(target_str(CPU), task.name, sub, task.fallback_config(),
                                      MeasureResult([1e-5], 0, 0.5, 1000.0))])
    rc, out, err = _main(log, "--rounds", "1")
    assert rc == 0, err
    here = re.search(rf"best {NUMBER} ms, fallback {NUMBER} ms, numpy \(matmul only\) "
                     rf"{NUMBER} ms", out)
    assert here and all(float(v) > 0 for v in here.groups()), out
    assert "numpy computes the matmul alone, without the epilogue" in out
    assert "WRONG" not in out and "failed here" not in out


def test_a_record_that_does_not_apply_here_is_named(tmp_path):
    """A record whose config this host's space refuses: build falls back, and the report says
    why and times the fallback against numpy."""
    task = Task(WL, CPU)
    cfg = task.fallback_config().to_json_dict()
    cfg["entity"] = [[k, kind, [-1, 7, 1] if k == "tile_y" else v]
                     for k, kind, v in cfg["entity"]]  # 7 divides no axis of 32x60x48
    log = tmp_path / "skip.json"
    record.append(log, [record.encode(target_str(CPU), task.name, WL,
                                      ConfigEntity.from_json_dict(cfg),
                                      MeasureResult([1e-6], 0, 0.5, 1000.0))])
    rc, out, err = _main(log, "--rounds", "1")
    assert rc == 0, err
    assert "best in the log: dense_pack.x86  0.001 ms" in out
    assert re.search(rf"here \(llvm .*\): fallback {NUMBER} ms, numpy {NUMBER} ms", out), out
    assert re.search(rf"numpy/fallback {NUMBER}", out)
    assert "no record of the log applies here, so build uses the fallback: " in out
    assert "knob 'tile_y' = [-1, 7, 1] is not a value of this space" in out


def _one_line_error(rc, out, err, *words):
    assert rc == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("tvm_ext.report: error: "), err
    for w in words:
        assert w in err


def test_bad_logs_are_one_line_errors(tmp_path, cpu_log):
    _one_line_error(*_main(tmp_path / "nope.json"), "does not exist")
    empty = tmp_path / "empty.json"
    empty.write_text("")
    _one_line_error(*_main(empty), "holds no tuning record")
    lines = cpu_log.read_text().splitlines()
    corrupt = tmp_path / "corrupt.json"
    corrupt.write_text("\n".join([lines[0], '{"input": [1, 2', *lines[1:]]) + "\n")
    _one_line_error(*_main(corrupt), f"{corrupt}:2: corrupt record")
    failed = tmp_path / "failed.json"
    record.append(failed, [record.encode(target_str(CPU), "dense_pack.x86", WL,
                                         Task(WL, CPU).fallback_config(),
                                         MeasureResult.error(2, "compile error"))])
    _one_line_error(*_main(failed), "none is valid", "error numbers 2")
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"not": "a log"}) + "\n")
    _one_line_error(*_main(other), "is not a tuning log")
    _one_line_error(*_main(cpu_log, "--rounds", "0"), "--rounds must be at least 1")
    assert "no summary" in report.tune_summary(tmp_path / "nope.json", WL, CPU)[0]


def test_the_module_runs_as_a_command(tmp_path):
    env = dict(os.environ, PYTHONPATH=ROOT, TVM_EXT_NO_GPU="1")
    r = subprocess.run([sys.executable, "-m", "tvm_ext.report", str(tmp_path / "nope.json")],
                       env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr == f"tvm_ext.report: error: log {tmp_path / 'nope.json'} does not exist\n"


def test_samples_taken_after_a_pause_run_their_call_first(monkeypatch):
    """The summary and the CPU benches pause before each sample (OpenBLAS's spinning
    workers): each sample then runs its call untimed for ``timing.WARM_S`` first, so cores
    that were idle are not timed waking up. On a clock that only the call moves (2**-10 s a
    call, exact in binary): a wall clock on a loaded host made the count of warm calls vary."""
    import types

    from tvm_ext.bench.common import time_calls
    from tvm_ext.measure import timing
    now, step = [0.0], 2.0 ** -10
    calls = []
    monkeypatch.setattr(timing, "time", types.SimpleNamespace(perf_counter=lambda: now[0]))

    def call():
        calls.append(now[0])
        now[0] += step
    warm = int(timing.WARM_S / step)
    (sample,) = time_calls(call, repeat=1, min_s=8 * step)
    assert warm >= 5 and len(calls) == 2 + warm + 8  # two probes, the warm calls, 8 timed
    assert sample == step  # the warm calls are not in the sample
    calls.clear()
    sampler = timing.WallSampler(call, report.CPU_SAMPLE_S)  # the summary's sampler
    assert sampler.warm == warm and sampler.number == int(report.CPU_SAMPLE_S / step)
    calls.clear()
    assert sampler.sample() == step
    assert len(calls) == sampler.warm + sampler.number
