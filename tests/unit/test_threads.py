"""CPU kernels run on the cores the process may use (issue: TVM's pool took half of them)."""
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROBE = """
import tvm, tvm_ext
from tvm_ext.target import host_cores
k = tvm_ext.build(tvm_ext.Workload.create("dense", (64, 64, 64)), "llvm")
print(k.threads, tvm.runtime.num_threads(), host_cores())
"""


def _probe(**env):
    base = {k: v for k, v in os.environ.items() if k != "TVM_NUM_THREADS"}
    r = subprocess.run([sys.executable, "-c", PROBE], env={**base, "PYTHONPATH": ROOT, **env},
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return [int(x) for x in r.stdout.split()[-3:]]


def test_kernels_use_every_core_of_the_affinity():
    threads, pool, cores = _probe()
    assert 1 <= cores <= len(os.sched_getaffinity(0))
    assert threads == pool == cores


def test_tvm_num_threads_still_wins():
    threads, pool, _ = _probe(TVM_NUM_THREADS="1")
    assert threads == pool == 1


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="one core: nothing to spread")
def test_a_narrower_affinity_is_honoured():
    """A process pinned to one core runs one thread (taskset: the affinity, not the host)."""
    r = subprocess.run(["taskset", "-c", str(min(os.sched_getaffinity(0))), sys.executable, "-c",
                        PROBE], env={**{k: v for k, v in os.environ.items()
                                        if k != "TVM_NUM_THREADS"}, "PYTHONPATH": ROOT},
                       capture_output=True, text=True, timeout=120)
    if r.returncode and "taskset" in r.stderr:
        pytest.skip("taskset is not available")
    assert r.returncode == 0, r.stderr
    assert [int(x) for x in r.stdout.split()[-3:]] == [1, 1, 1]


POOL_PROBE = """
import os, tempfile
import tvm
from tvm_ext.measure.options import RunOptions
from tvm_ext.measure.runner import run_in_worker
from tvm_ext.measure.worker import Worker, task_payload
from tvm_ext.target import host_cores
from tvm_ext.task import Task
from tvm_ext.workload import Workload
task = Task(Workload.create("dense", (64, 64, 64)), "llvm")
path = os.path.join(tempfile.mkdtemp(), "k.so")
task.build(task.fallback_config()).export_library(path)
w = Worker()
status, value = w.call(run_in_worker, (task_payload(task), path, 0, RunOptions()), 120)
assert status == "ok" and value[0] == "ok", (status, value)
status, pool = w.call(tvm.runtime.num_threads, (), 60)
w.kill()
print(pool, host_cores())
"""


def test_pool_runner_measures_on_every_core():
    """The pool measurer's runner processes run a CPU kernel as it will run: on every core
    of the affinity (a runner left to TVM's default measured on one core of two, so the tuner
    ranked configs for one thread)."""
    base = {k: v for k, v in os.environ.items() if k != "TVM_NUM_THREADS"}
    r = subprocess.run([sys.executable, "-c", POOL_PROBE],
                       env={**base, "PYTHONPATH": ROOT}, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    pool, cores = (int(x) for x in r.stdout.split()[-2:])
    assert pool == cores
