"""Fault matrix, logs: nothing recorded is lost, nothing is applied as something it is not.

Each case that runs the CLI asserts that the log's bytes before the run are a prefix of its
bytes after (or are unchanged), that the error is one line, and the exit code.
"""
import json
import os
import resource
import shutil
import signal
import subprocess
import sys

import pytest

from tvm_ext import record
from tvm_ext.dispatch import apply_history_best, choose
from tvm_ext.errors import LogError
from tvm_ext.result import MeasureResult
from tvm_ext.space import ConfigEntity, OtherOptionEntity, SplitEntity
from tvm_ext.task import Task
from tvm_ext.workload import Workload

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WL = Workload.create("batch_matmul", (2, 32, 64, 32))
TARGET = "llvm -mcpu=znver3"
TUNE = ["--op", "batch_matmul", "--target", TARGET, "--shape", "2x32x64x32", "--number", "1",
        "--repeat", "1", "--local", "--batch-size", "4", "--confirm", "0", "-q"]


def cli(*args, cwd, preexec_fn=None):
    env = dict(os.environ, PYTHONPATH=ROOT, TVM_EXT_NO_GPU="1")
    return subprocess.run([sys.executable, "-m", "tvm_ext.tune", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300, preexec_fn=preexec_fn)


def _error_line(r):
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("tvm_ext.tune: error:"), r.stderr
    return lines[0]


def _complete_records(data: bytes):
    """Every line is a whole record (or our marker of an unfinished one)."""
    for line in data.decode().splitlines():
        if line.strip() and not line.startswith("#"):
            record.decode(line)


def _line(task, values, cost, **result):
    cfg = task.config_with(values)
    return record.encode(task.target_str, task.name, task.workload, cfg,
                         MeasureResult([cost], 0, 0.1, 1.0, **result))


# ---- 1. a full disk ----

def _file_size_limit(limit):
    def cap():  # in the child: writes past ``limit`` bytes fail (EFBIG), as on a full disk
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return cap


def _tune_until_full(tmp_path, log):
    r = cli(*TUNE, "--trials", "4", "--log", str(log), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    before = log.read_bytes()
    cap = _file_size_limit(len(before) + 2500)
    r = cli(*TUNE, "--trials", "8", "--resume", "--log", str(log), cwd=tmp_path,
            preexec_fn=cap)
    return before, r


def test_short_write_fails_loudly_and_keeps_every_whole_record(tmp_path):
    """A write cut short (here by a file-size limit: the write returns fewer bytes, then
    EFBIG) stops tuning with one line naming the log, and leaves only whole records."""
    log = tmp_path / "bmm.json"
    before, r = _tune_until_full(tmp_path, log)
    assert r.returncode == 2
    assert str(log) in _error_line(r) and "not written" in r.stderr
    after = log.read_bytes()
    assert after.startswith(before) and len(after) > len(before)  # batches before the limit
    _complete_records(after)
    # The next run (no limit) resumes from what reached the file.
    r = cli(*TUNE, "--trials", "4", "--resume", "--log", str(log), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert log.read_bytes().startswith(after)


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("mount") is None,
                    reason="making a small tmpfs needs root")
def test_full_tmpfs(tmp_path):
    """The same on a real 8 KB filesystem (where this machine lets us mount one): 4 records,
    then a resumed run that fills it (a record takes some 600 bytes)."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8k", "tmpfs", str(mnt)]).returncode:
        pytest.skip("mount of a tmpfs is not permitted here")
    try:
        log = mnt / "bmm.json"
        r = cli(*TUNE, "--trials", "4", "--log", str(log), cwd=tmp_path)
        assert r.returncode == 0, r.stderr
        before = log.read_bytes()
        r = cli(*TUNE, "--trials", "64", "--resume", "--log", str(log), cwd=tmp_path)
        assert r.returncode == 2 and str(log) in _error_line(r)
        after = log.read_bytes()
        assert after.startswith(before)
        _complete_records(after)
    finally:
        subprocess.run(["umount", str(mnt)])


# ---- 2. a log that cannot be written: found before anything is measured ----

@pytest.mark.parametrize("where", ["proc", "under_a_file"])
def test_unwritable_log_is_refused_before_measuring(tmp_path, where):
    if where == "proc":
        log = "/proc/tvm_ext_x.json"
    else:
        (tmp_path / "afile").write_text("x")
        log = str(tmp_path / "afile" / "bmm.json")
    r = cli(*TUNE, "--trials", "4", "--log", log, cwd=tmp_path)
    assert r.returncode == 2 and log in _error_line(r)
    assert "measured" not in r.stdout and not os.path.exists(log)


# ---- 3. a user's file that is not a log ----

def test_a_file_that_is_not_a_log_is_never_appended_to(tmp_path):
    other = tmp_path / "mine.json"
    other.write_text(json.dumps([1, 2, 3]))  # one line, no final newline
    before = other.read_bytes()
    r = cli(*TUNE, "--trials", "4", "--log", str(other), cwd=tmp_path)
    assert r.returncode == 2 and "not a tuning log" in _error_line(r)
    assert other.read_bytes() == before
    with pytest.raises(LogError, match="not a tuning log"):
        record.check_appendable(other)
    with pytest.raises(LogError, match="not a tuning log"):
        apply_history_best(str(other))
    assert other.read_bytes() == before


def test_a_killed_writer_s_only_line_is_still_a_log(tmp_path):
    """A log whose first and only line was cut by a killed writer is a log (its line is an
    unfinished record), not a foreign file."""
    task = Task(WL, TARGET)
    log = tmp_path / "bmm.json"
    log.write_text(_line(task, {}, 1e-3)[:60])
    assert record.load(log) == []
    record.append(log, [_line(task, {}, 2e-3)])
    assert [r.result.mean for r in record.load(log)] == [2e-3]


# ---- 4. records that do not fit the space are passed over, with the reason ----

def _log_with(tmp_path, task, entities, cost=1e-4):
    """A log holding the fallback (slower) and a record with ``entities`` replaced."""
    fb = task.fallback_config()
    ents = [e for e in fb.to_json_dict()["entity"]]
    bad = json.loads(_line(task, {}, cost))
    bad["config"]["entity"] = [next((x for x in entities if x[0] == e[0]), e) for e in ents]
    log = tmp_path / "bad.json"
    log.write_text(json.dumps(bad) + "\n" + _line(task, {}, 1e-3) + "\n")
    return log


@pytest.mark.parametrize("entity,why", [
    (["tile_x", "sp", [-1, 7]], "tile_x"),       # 7 does not divide N = 64
    (["yt", "ot", "four"], "yt"),                 # a string for an integer knob
    (["tile_y", "sp", [-1, 2, 2, 2]], "tile_y"),  # a split of the wrong length
])
def test_record_outside_the_space_is_skipped_with_the_reason(tmp_path, entity, why):
    task = Task(WL, TARGET, template="batch_matmul.x86")
    log = _log_with(tmp_path, task, [entity])
    with apply_history_best(str(log)) as ctx:
        _, choice = choose(WL, TARGET)
    assert choice.tuned and choice.record_cost == 1e-3  # the next record, which fits
    assert len(ctx.report.skipped) == 1 and why in ctx.report.skipped[0]
    assert "skipped" in str(ctx.report)


# ---- 5. a record that lacks a knob ----

def test_record_lacking_a_knob_is_completed_from_the_fallback_and_ranks_last(tmp_path):
    task = Task(WL, TARGET, template="batch_matmul.x86")
    fast = json.loads(_line(task, {}, 1e-4))
    fast["config"]["entity"] = [e for e in fast["config"]["entity"] if e[0] != "tile_k"]
    log = tmp_path / "lack.json"
    log.write_text(json.dumps(fast) + "\n" + _line(task, {}, 1e-3) + "\n")
    with apply_history_best(str(log)) as ctx:
        _, choice = choose(WL, TARGET)
    assert choice.tuned and choice.record_cost == 1e-3 and not choice.completed
    log.write_text(json.dumps(fast) + "\n")  # only the incomplete one
    with apply_history_best(str(log)) as ctx:
        _, choice = choose(WL, TARGET)
    assert choice.tuned and choice.completed == ["tile_k"]
    assert "completed from fallback (tile_k)" in str(ctx.report)


# ---- 6. impossible costs ----

@pytest.mark.parametrize("cost", [0.0, -1.0, float("inf"), float("nan")])
def test_impossible_costs_are_set_aside(tmp_path, cost):
    task = Task(WL, TARGET)
    good = _line(task, {}, 1e-3)
    bad = json.loads(good)
    bad["result"][0] = [cost]
    log = tmp_path / "costs.json"
    log.write_text(good + "\n" + json.dumps(bad) + "\n")
    records, aside = record.load_log(log)
    assert len(records) == 1 and sum(aside.values()) == 1
    assert "not a positive time" in next(iter(aside))
    r = cli("--best", str(log), cwd=tmp_path)
    assert r.returncode == 0 and "1.0000 ms" in r.stdout and "-1000" not in r.stdout
    assert not MeasureResult([0.0]).ok and not MeasureResult([-1e-3]).ok  # never written


# ---- 7. records of templates we do not have ----

def test_records_of_other_operators_are_set_aside_not_fatal(tmp_path):
    task = Task(WL, TARGET)
    conv = {"input": [TARGET, "conv2d_NCHWc.x86",
                      [["TENSOR", [1, 64, 56, 56], "float32"],
                       ["TENSOR", [64, 64, 3, 3], "float32"], [1, 1], [1, 1, 1, 1], [1, 1],
                       "NCHW", "NCHW", "float32"], {}],
            "config": {"index": 3, "code_hash": None,
                       "entity": [["tile_ic", "sp", [-1, 8]], ["unroll_kw", "ot", True]]},
            "result": [[1e-4], 0, 1.0, 1.0], "version": 0.2, "tvm_version": "0.8.0"}
    nopack = json.loads(_line(task, {}, 1e-5))
    nopack["input"][1] = "dense_nopack.x86"
    nopack["input"][2] = [["TENSOR", [32, 32], "float32"], ["TENSOR", [64, 32], "float32"],
                          None, "float32"]
    log = tmp_path / "mixed.json"
    log.write_text("\n".join([json.dumps(conv), json.dumps(conv), json.dumps(nopack),
                              _line(task, {}, 1e-3)]) + "\n")
    records, aside = record.load_log(log)
    assert len(records) == 2 and aside == {"conv2d_NCHWc.x86 (no such template)": 2}
    with apply_history_best(str(log)) as ctx:
        _, choice = choose(WL, TARGET)
    assert choice.tuned and choice.record_cost == 1e-3
    assert ctx.report.set_aside == {"conv2d_NCHWc.x86 (no such template)": 2,
                                    "dense_nopack.x86 (no such template)": 1}
    assert "3 records set aside" in ctx.report.summary()


def test_entities_of_a_record_keep_their_kinds():
    """(The decoder keeps a wrong-typed value as it is, for the space to judge.)"""
    cfg = ConfigEntity.from_json_dict({"index": 1, "entity": [["yt", "ot", "four"],
                                                              ["tile_y", "sp", [-1, 2]]]})
    assert isinstance(cfg["yt"], OtherOptionEntity) and isinstance(cfg["tile_y"], SplitEntity)
