"""Isolated measurement: injected faults become records with the right error number, the run
goes on, the log holds every trial; and a loopback RPC farm."""
import json
import os
import subprocess
import sys
import time

import pytest

from tvm_ext import record
from tvm_ext.result import MeasureErrorNo
from tvm_ext.measure import PoolMeasurer, RPCConfig
from tvm_ext.task import Task
from tvm_ext.tuner import GridSearchTuner
from tvm_ext.session import tune_loop
from tvm_ext.workload import Workload

import faulty_ops  # noqa: E402,F401  (registers faulty.x86)

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tests/: faulty_ops
ROOT = os.path.dirname(HERE)


@pytest.fixture()
def faulty_task(tmp_path):
    space = tmp_path / "faulty.json"
    space.write_text(json.dumps(faulty_ops.SPACE))
    return Task(Workload.create("batch_matmul", (1, 16, 16, 16)), "llvm", template="faulty.x86",
                space_file=str(space))


def test_every_fault_is_one_record_and_tuning_goes_on(faulty_task, tmp_path):
    log = tmp_path / "log.json"
    expect = {"none": MeasureErrorNo.NO_ERROR,
              "build_raise": MeasureErrorNo.INSTANTIATION_ERROR,
              "build_hang": MeasureErrorNo.BUILD_TIMEOUT,
              "run_abort": MeasureErrorNo.RUNTIME_DEVICE,
              "run_hang": MeasureErrorNo.RUN_TIMEOUT,
              "wrong": MeasureErrorNo.WRONG_ANSWER}
    t0 = time.time()
    with PoolMeasurer(n_parallel=2, build_timeout=8, run_timeout=5, number=1, repeat=1,
                      source_paths=(HERE,)) as m:
        s = tune_loop(faulty_task, GridSearchTuner(faulty_task.space), m, n_trial=6, batch_size=3,
                      callbacks=[record.LogWriter(log)])
        # the workers were replaced: a healthy config still measures afterwards
        again = m.measure(faulty_task, [faulty_task.space.get(0)])
    assert time.time() - t0 < 120
    assert s.trials == 6 and s.errors == 5
    recs = record.load(log)
    assert len(recs) == 6
    got = {r.config["fault"].val: r.result.error_no for r in recs}
    assert got == {k: int(v) for k, v in expect.items()}
    assert again[0].ok


@pytest.mark.parametrize("cache_flush", [False, True])
def test_pool_measures_valid_configs(tmp_path, cache_flush, caplog):
    task = Task(Workload.create("batch_matmul", (2, 32, 64, 32)), "llvm")
    cfgs = [task.config(i) for i in list(task.space.valid_indices())[:4]]
    with caplog.at_level("DEBUG", logger="tvm_ext"):
        with PoolMeasurer(n_parallel=2, number=1, repeat=2, cache_flush=cache_flush) as m:
            res = m.measure(task, cfgs)
    assert all(r.ok and len(r.costs) == 2 and r.costs[0] > 0 for r in res)
    # where a batch's time went (bench.proposer --trace): its builds, then its runs
    phases = [r.getMessage() for r in caplog.records if "configs built in" in r.getMessage()]
    assert len(phases) == 1 and "4 configs built in" in phases[0] and "4 run," in phases[0]
    assert sum("waited" in r.getMessage() for r in caplog.records) == 4


def _start(args):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.Popen([sys.executable, "-m", *args], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)


def _kill(proc):
    import signal
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the server's popen workers too
    except ProcessLookupError:
        pass
    proc.wait(timeout=10)


def _free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_loopback_rpc_farm(tmp_path):
    pytest.importorskip("tornado")
    from tvm import rpc
    port = _free_port()
    procs = [_start(["tvm.exec.rpc_tracker", "--host", "127.0.0.1", "--port", str(port),
                     "--port-end", str(port + 1)])]
    try:
        time.sleep(2.0)
        for k in range(2):
            sp = _free_port()
            procs.append(_start(["tvm.exec.rpc_server", "--host", "127.0.0.1", "--port", str(sp),
                                 "--port-end", str(sp + 50), "--tracker", f"127.0.0.1:{port}",
                                 "--key", "cpu-loop"]))
        for _ in range(60):
            time.sleep(0.5)
            try:
                free = rpc.connect_tracker("127.0.0.1", port).summary()["queue_info"] \
                    .get("cpu-loop", {}).get("free", 0)
            except Exception:
                free = 0
            if free == 2:
                break
        assert free == 2, "RPC servers did not register"
        task = Task(Workload.create("batch_matmul", (2, 32, 64, 32)), "llvm")
        log = tmp_path / "rpc.json"
        with PoolMeasurer(n_parallel=2, number=1, repeat=1,
                          rpc=RPCConfig("127.0.0.1", port, "cpu-loop")) as m:
            s = tune_loop(task, GridSearchTuner(task.space), m, n_trial=6, batch_size=6,
                          callbacks=[record.LogWriter(log)])
            assert len(m.runner.sessions) == 2
        recs = record.load(log)
        assert s.trials == 6 and len(recs) == 6 and all(r.result.ok for r in recs)
    finally:
        for p in procs:
            _kill(p)


def test_error_line_skips_the_appended_kernel_source():
    from tvm_ext.result import error_line
    err = RuntimeError("Traceback\nInternalError: CUDALaunch Error: CUDA_ERROR_INVALID_VALUE\n"
                       " grid=(1,8,1),  block=(32,2,1)\n// func_name=main_kernel\n"
                       "// CUDA Source\n// ---\n}\n")
    assert error_line(err) == " grid=(1,8,1),  block=(32,2,1)"
    assert error_line(ValueError("a\n\nlast words  \n"), 4) == "last"


def test_timing_method_resolution():
    """auto times CPU kernels with time_evaluator; graph timing is refused off CUDA, and an
    unknown method is named."""
    import tvm
    from tvm_ext.errors import TvmExtError
    from tvm_ext.measure.timing import resolve
    assert resolve("auto", tvm.cpu(0)) == "evaluator"
    assert resolve("evaluator", tvm.cuda(0)) == "evaluator"
    with pytest.raises(TvmExtError, match="graph timing needs a CUDA device"):
        resolve("graph", tvm.cpu(0))
    with pytest.raises(TvmExtError, match="unknown timing 'wall'"):
        resolve("wall", tvm.cpu(0))


def test_worker_rebuilds_a_family_task_as_symbolic():
    """A shape family's task reaches the build workers as what it is (symbolic, its granules),
    so a kernel template builds its guarded kernel there, as in the tuning process."""
    from tvm_ext.measure.worker import task_in_worker, task_payload
    from tvm_ext.target import cuda_target
    wl = Workload.create("batch_matmul", (3, 448, 320, 128), "float16", "float16")
    task = Task(wl, cuda_target("sm_90"), template="batch_matmul_wgmma.cuda", symbolic=True,
                granules={"B": 1, "M": 64, "N": 64})
    again = task_in_worker(task_payload(task))
    assert again.symbolic and again.granules == {"B": 1, "M": 64, "N": 64}
    assert again.space.facts["granule_m"] == 64
    plain = task_in_worker(task_payload(Task(wl, cuda_target("sm_90"))))
    assert not plain.symbolic and plain.granules == {}
