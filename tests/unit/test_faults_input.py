"""Fault matrix, input: bad input is refused in one line before anything is measured, and
Ctrl-C stops a tuning run at once.

Each input case runs the CLI with ``--log`` in a fresh folder and asserts exit code 2, exactly one
line on stderr naming the problem, and that the log was never created (nothing was measured).
"""
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from tvm_ext import record, session
from tvm_ext.result import MeasureErrorNo, MeasureResult
from tvm_ext.space import load_space_spec
from tvm_ext.task import Task
from tvm_ext.workload import Workload

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TESTS = os.path.join(ROOT, "tests")
ENV = dict(os.environ, PYTHONPATH=ROOT, TVM_EXT_NO_GPU="1")
SMALL = ["--op", "batch_matmul", "--shape", "1x16x16x16", "--trials", "2"]


def cli(*args, cwd):
    return subprocess.run([sys.executable, "-m", "tvm_ext.tune", *args], cwd=cwd, env=ENV,
                          capture_output=True, text=True, timeout=300)


def python(code, *, cwd):
    """Run ``code`` in a child Python, as the CLI runs (no GPU, this checkout first)."""
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=cwd, env=ENV,
                          capture_output=True, text=True, timeout=300)


def assert_refused(r, msg, log):
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tvm_ext.tune: error:"), r.stderr
    assert msg in lines[0], lines[0]
    assert not log.exists(), "measured before refusing"


def _space_file(tmp_path, change):
    spec = load_space_spec("batch_matmul.x86")
    change(spec)
    path = tmp_path / "space.json"
    path.write_text(json.dumps(spec))
    return str(path)


def _knob(name):
    return lambda spec: next(k for k in spec["knobs"] if k["name"] == name)


def _set_filter(name, expr):
    return lambda spec: _knob(name)(spec).update(filter=expr)


CASES = {
    # 12: a CUDA target with no GPU visible, not over RPC
    "cuda": (["--target", "cuda"], "needs a CUDA GPU to measure on and none is visible"),
    "cuda_sm90": (["--target", "cuda:sm_90"], "target cuda sm_90 needs a CUDA GPU"),
    "cuda_local": (["--target", "cuda", "--local"], "needs a CUDA GPU"),
    # 13: options out of range
    "seed": (["--target", "llvm", "--seed", "-1"], "seed (--seed) must be >= 0, got -1"),
    "n_parallel": (["--target", "llvm", "--n-parallel", "-1"],
                   "n_parallel (--n-parallel) must be >= 1, got -1"),
    "repeat": (["--target", "llvm", "--repeat", "0"], "repeat (--repeat) must be >= 1"),
    "number": (["--target", "llvm", "--number", "0"], "number (--number) must be >= 1, got 0"),
    "build_timeout_0": (["--target", "llvm", "--build-timeout", "0"],
                        "build_timeout (--build-timeout) must be a positive number"),
    "build_timeout_neg": (["--target", "llvm", "--build-timeout", "-5"], "got -5.0"),
    "run_timeout_0": (["--target", "llvm", "--run-timeout", "0"],
                      "run_timeout (--run-timeout) must be a positive number"),
    "run_timeout_nan": (["--target", "llvm", "--run-timeout", "nan"], "got nan"),
    "batch_size": (["--target", "llvm", "--batch-size", "0"], "--batch-size must be >= 1, got 0"),
    "early_stopping_neg": (["--target", "llvm", "--early-stopping", "-5"],
                           "--early-stopping must be >= 1, got -5"),
    "early_stopping_0": (["--target", "llvm", "--early-stopping", "0"],
                         "--early-stopping must be >= 1, got 0"),
    "empty_shape": (["--target", "llvm", "--shape", ""], "malformed shape ''"),
    "out_dtype": (["--target", "llvm", "--out-dtype", "int8"],
                  "out_dtype int8 is not allowed for float32 inputs (allowed: float32)"),
    "local_and_rpc": (["--target", "llvm", "--local", "--rpc-tracker", "localhost:9190",
                       "--rpc-key", "k"], "not both"),
    "llvm_cpu": (["--target", "llvm -mcpu=foo"], "unknown LLVM CPU -mcpu=foo"),
    "llvm_cpu_typo": (["--target", "llvm -mcpu=skylake-avx51"], "did you mean skylake-avx512"),
    # 14: indices past int32, measured or not
    "int32_overflow": (["--target", "llvm", "--shape", "1x99999999x99999999x99999999"],
                       "buffer A 1x99999999x99999999 has 9999999800000001 elements"),
    "int32_overflow_dry_run": (["--target", "llvm", "--shape", "1x99999999x99999999x99999999",
                                "--dry-run"], "more than int32 indices address"),
    "int32_overflow_c": (["--target", "llvm", "--shape", "2x50000x50000x1"],
                         "buffer C 2x50000x50000 has 5000000000 elements"),
}


def _small(args):
    return SMALL[:2] + (args if "--shape" in args else SMALL[2:4] + args) + SMALL[4:]


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_is_refused_before_measuring(tmp_path, tune_here, case):
    args, msg = CASES[case]
    log = tmp_path / "log.json"
    assert_refused(tune_here(*_small(args), "--log", str(log)), msg, log)


@pytest.mark.parametrize("case", ["cuda", "llvm_cpu_typo", "int32_overflow"])
def test_bad_input_in_a_fresh_process_is_refused_too(tmp_path, case):
    """As a user runs it, in a child (nothing else on stderr)."""
    args, msg = CASES[case]
    log = tmp_path / "log.json"
    assert_refused(cli(*_small(args), "--log", str(log), cwd=tmp_path), msg, log)


SPACE_CASES = {
    "knob_filter_empties": (_set_filter("yt", "value > 100"),
                            "knob 'yt': filter 'value > 100' leaves none of its 4 candidates"),
    # (without the register tile's extra rows, whose number is the host's)
    "split_filter_empties": (lambda spec: _knob("tile_y")(spec).update(
        filter="size[-1] > 1000", extra_inner=[]),
                             "split 'tile_y' of 16 (verbose, 2 outputs): filter 'size[-1] > "
                             "1000' leaves none of its 5 splits"),
    "unbounded_power": (_set_filter("yt", "value < 2 ** 999999999"),
                        "expression 'value < 2 ** 999999999' is too large to evaluate"),
    "unbounded_repeat": (_set_filter("yt", "len([0] * 10 ** 12) > value"),
                         "a sequence repeated to 1000000000000 items"),
    "split_enumeration": (lambda spec: _knob("tile_y")(spec).update(num_outputs=40),
                          "knob 'tile_y' would enumerate"),
}


@pytest.mark.parametrize("case", list(SPACE_CASES))
def test_bad_space_file_is_refused_before_measuring(tmp_path, case):
    change, msg = SPACE_CASES[case]
    space = _space_file(tmp_path, change)
    log = tmp_path / "log.json"
    t0 = time.time()
    r = cli(*SMALL, "--target", "llvm", "--space", space, "--log", str(log), cwd=tmp_path)
    assert time.time() - t0 < 30
    assert_refused(r, msg, log)


def test_cuda_without_gpu_still_lists_and_dry_runs(tmp_path):
    for extra in (["--list-space"], ["--dry-run"]):
        r = cli("--op", "dense", "--shape", "64x128x64", "--target", "cuda", *extra,
                "--log", str(tmp_path / "log.json"), cwd=tmp_path)
        assert r.returncode == 0, r.stderr
    assert not (tmp_path / "log.json").exists()


def test_buffers_larger_than_the_device_memory(tmp_path):
    # The host's RAM is whatever the test machine has: the memory is made small instead.
    r = python(f"""
        import sys
        import tvm_ext.target
        tvm_ext.target.device_memory = lambda target: 8 << 20  # 8 MiB
        from tvm_ext.tune import main
        sys.exit(main({SMALL[:2] + ["--shape", "1x1024x1024x1024", "--target", "llvm",
                                    "--log", "log.json"]!r}))
        """, cwd=tmp_path)
    assert_refused(r, "batch_matmul 1x1024x1024x1024 float32 NT: its buffers need 12.0 MiB "
                   "(A 4.0 MiB, B 4.0 MiB, C 4.0 MiB), more than this host's RAM (8.0 MiB)",
                   tmp_path / "log.json")


def test_model_whose_get_model_raises(tmp_path):
    model = tmp_path / "model.py"
    model.write_text("def get_model():\n    raise RuntimeError('weights not found')\n")
    log = tmp_path / "log.json"
    r = cli("--model", str(model), "--target", "llvm", "--log", str(log), cwd=tmp_path)
    assert_refused(r, f"model file {model}: get_model() failed: RuntimeError: weights not found",
                   log)


# ---- the rules themselves, for Python callers ----

def test_measure_options_rules():
    from tvm_ext.errors import TvmExtError
    from tvm_ext.measure import MeasureOptions, RPCConfig, RunOptions
    for make, msg in ((lambda: RunOptions(repeat=0), "repeat (--repeat) must be >= 1"),
                      (lambda: RunOptions(min_repeat_ms=-1), "min_repeat_ms must be >= 0"),
                      (lambda: MeasureOptions(build_timeout=float("inf")), "got inf"),
                      (lambda: MeasureOptions(devices=()), "devices (--devices) must be one"),
                      (lambda: MeasureOptions(local=True, rpc=RPCConfig("h", 1, "k")),
                       "not both")):
        with pytest.raises(TvmExtError, match=__import__("re").escape(msg)):
            make()
    RunOptions(min_repeat_ms=0)


# ---- 17: resume measures again what failed because of the run, not the config ----

TARGET = "llvm -mcpu=znver3"


def _resume_log(tmp_path):
    task = Task(Workload.create("batch_matmul", (2, 32, 64, 32)), TARGET)
    valid = list(task.space.valid_indices(limit=9))
    errors = [0, 1, 2, 3, 5, 4, 6, 7, 8]  # config's own results first, then the run's
    lines = []
    for i, no in zip(valid, errors):
        res = MeasureResult([1e-4]) if no == 0 else MeasureResult.error(no, f"error {no}")
        lines.append(record.encode(task.target_str, task.name, task.workload, task.config(i),
                                   res))
    # a config measured fine once and timed out another time is measured
    lines.append(record.encode(task.target_str, task.name, task.workload,
                               task.config(valid[0]),
                               MeasureResult.error(MeasureErrorNo.RUN_TIMEOUT, "old")))
    log = tmp_path / "log.json"
    log.write_text("\n".join(lines) + "\n")
    return task, valid, log


def test_resume_retries_failures_of_the_run(tmp_path):
    task, valid, log = _resume_log(tmp_path)
    prepared = session.prepare(task, tuner="grid", log=log, resume=True)
    assert prepared.resumed == 5 and prepared.retry == 4
    assert prepared.tuner.visited == set(valid[:5])
    assert prepared.tuner.ask(4) == valid[5:9]  # run errors 4, 6, 7, 8: measured again


def test_resume_line_counts_failures_to_retry(tmp_path):
    task, _, log = _resume_log(tmp_path)
    before = log.read_bytes()
    r = cli("--op", "batch_matmul", "--shape", "2x32x64x32", "--target", TARGET, "--log",
            str(log), "--resume", "--dry-run", "--tuner", "grid", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert f"resume: 5 configs of this task already in {log} (4 failed ones to retry)" \
        in r.stdout
    assert log.read_bytes() == before


# ---- 18: Ctrl-C ----

HANG = """
    import json, sys
    import faulty_ops
    from tvm_ext.tune import main
    spec = dict(faulty_ops.SPACE, knobs=[{"name": "fault", "kind": "knob",
                                          "candidates": ["run_hang"]}])
    open("space.json", "w").write(json.dumps(spec))
    sys.exit(main(["--target", "llvm", "--shape", "1x16x16x16", "--space", "space.json",
                   "--trials", "1", "--log", "log.json", "--n-parallel", "1", "--number", "1",
                   "--repeat", "1", "--run-timeout", "60", "--build-timeout", "60"]))
"""


def _start_hang(tmp_path):
    """The CLI on a config whose kernel sleeps for an hour, in its own process group (a
    terminal sends Ctrl-C to the whole foreground group: the workers get it too)."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = dict(ENV, PYTHONPATH=os.pathsep.join([ROOT, TESTS]), TMPDIR=str(tmp))
    p = subprocess.Popen([sys.executable, "-c", textwrap.dedent(HANG)], cwd=tmp_path, env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True, preexec_fn=_as_from_a_terminal)
    return p, psutil.Process(p.pid), tmp


def _as_from_a_terminal():
    """The child's SIGINT as a shell leaves it: delivered and at its default. A child inherits
    its parent's signal mask and ignored signals: late in the full suite, the CLI under test
    was seen asleep for 30 s after the Ctrl-C, its SIGINT never delivered."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _workers(proc):
    out = []
    for c in proc.children(recursive=True):
        try:
            if "tvm.exec.popen_worker" in c.cmdline():
                out.append(c)
        except psutil.Error:
            pass
    return out


def _wait_for_workers(proc, n, timeout=120):
    t0 = time.time()
    while time.time() - t0 < timeout:
        found = _workers(proc)
        if len(found) >= n:
            return found
        time.sleep(0.05)
    raise AssertionError(f"{n} workers did not start")


def _interrupt(p, proc):
    """Ctrl-C to the group; (seconds to exit, stderr lines, processes of the tree left)."""
    tree = proc.children(recursive=True)
    t0 = time.time()
    os.killpg(p.pid, signal.SIGINT)
    try:
        _, err = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    took = time.time() - t0
    time.sleep(0.2)
    return took, err.strip().splitlines(), [c for c in tree if _alive(c)]


def _alive(proc):
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_ctrl_c_while_a_kernel_hangs(tmp_path):
    p, proc, tmp = _start_hang(tmp_path)
    _wait_for_workers(proc, 2)  # the builder's and the runner's: the build is done
    time.sleep(3)  # the runner loads the library and runs the kernel, which sleeps
    took, lines, left = _interrupt(p, proc)
    assert p.returncode == 130
    assert took < 3, f"took {took:.1f}s"
    assert len(lines) == 1 and "interrupted" in lines[0], lines
    assert not left, left
    assert not [f for f in os.listdir(tmp) if f.startswith("tvm_ext_build_")]
    log = tmp_path / "log.json"  # no batch finished: no record (the log may be created empty)
    assert not log.exists() or not log.read_text().strip()


def test_ctrl_c_while_workers_start(tmp_path):
    p, proc, tmp = _start_hang(tmp_path)
    _wait_for_workers(proc, 1)  # the first worker is importing TVM
    took, lines, left = _interrupt(p, proc)
    assert p.returncode == 130
    assert took < 3, f"took {took:.1f}s"
    assert len(lines) <= 2, lines  # no tracebacks of the workers
    assert not left, left
    assert not [f for f in os.listdir(tmp) if f.startswith("tvm_ext_build_")]
