"""Records: AutoTVM v0.2 shape, tolerant reading, locked appends, best/merge, old logs."""
import json
import os

import pytest

from tvm_ext import record
from tvm_ext.errors import LogError
from tvm_ext.result import MeasureResult
from tvm_ext.space import ConfigEntity, OtherOptionEntity, SplitEntity
from tvm_ext.workload import Workload

DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data")
LLVM = '{"keys": ["cpu"], "kind": "llvm", "mcpu": "znver5"}'
WL = Workload.create("batch_matmul", (2, 32, 32, 16))


def _line(cost, index=0, target=LLVM, error_no=0, wl=WL):
    cfg = ConfigEntity(index, {"tile_y": SplitEntity([-1, 2 ** index]),
                               "tile_x": SplitEntity([-1, 16]), "tile_k": SplitEntity([-1, 4])})
    res = MeasureResult([cost] if error_no == 0 else [], error_no, 0.1, 1.0, "boom")
    return record.encode(target, "batch_matmul.x86", wl, cfg, res)


def test_encode_has_autotvm_shape_and_roundtrips():
    line = _line(1e-3, 1)
    obj = json.loads(line)
    assert obj["version"] == 0.2 and obj["input"][1] == "batch_matmul.x86"
    assert obj["input"][2][0] == ["TENSOR", [2, 32, 16], "float32"]
    assert obj["config"]["entity"][0] == ["tile_y", "sp", [-1, 2]]
    rec = record.decode(line)
    assert rec.workload == WL and rec.result.costs == [1e-3] and rec.config["tile_y"].size[-1] == 2


def test_truncated_last_line_is_skipped(tmp_path):
    p = tmp_path / "log.json"
    p.write_text(_line(1e-3) + "\n" + _line(2e-3, 1) + "\n" + _line(3e-3, 2)[:40])
    recs = record.load(p)
    assert [r.result.costs[0] for r in recs] == [1e-3, 2e-3]
    # appending after a truncated line starts a fresh line; both old records survive
    record.append(p, [_line(4e-4, 3)])
    assert [r.result.costs[0] for r in record.load(p)][-1] == 4e-4


def test_corrupt_middle_line_names_line(tmp_path):
    p = tmp_path / "log.json"
    p.write_text(_line(1e-3) + "\n{garbage\n" + _line(2e-3) + "\n")
    before = p.read_bytes()
    with pytest.raises(LogError, match=r"log\.json:2: corrupt record"):
        record.load(p)
    assert p.read_bytes() == before


def test_missing_and_unreadable_logs(tmp_path):
    with pytest.raises(LogError, match="does not exist"):
        record.load(tmp_path / "none.json")
    with pytest.raises(LogError, match="is a directory"):
        record.load(tmp_path)
    binary = tmp_path / "bin.json"
    binary.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(LogError, match="not UTF-8"):
        record.load(binary)


def test_a_gzip_compressed_log_is_read_as_its_text_and_never_appended_to(tmp_path):
    import gzip
    text = _line(1e-3) + "\n" + _line(2e-3, 1) + "\n"
    p = tmp_path / "log.json.gz"
    p.write_bytes(gzip.compress(text.encode()))
    assert [r.result.costs[0] for r in record.load(p)] == [1e-3, 2e-3]
    before = p.read_bytes()
    for write in (lambda: record.check_appendable(p), lambda: record.append(p, [_line(1.0)])):
        with pytest.raises(LogError, match="gzip-compressed: it is read, not appended to"):
            write()
    assert p.read_bytes() == before
    p.write_bytes(before[:len(before) // 2])  # cut short
    with pytest.raises(LogError, match="corrupt gzip-compressed log"):
        record.load(p)


def test_append_only_and_concurrent_appends(tmp_path):
    import multiprocessing as mp
    p = tmp_path / "log.json"
    record.append(p, [_line(1.0)])
    procs = [mp.Process(target=record.append, args=(p, [_line(0.5, i)] * 50)) for i in range(4)]
    for pr in procs:
        pr.start()
    for pr in procs:
        pr.join()
    recs = record.load(p)
    assert len(recs) == 201 and recs[0].result.costs == [1.0]


def test_pick_best_merge_and_target_check(tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    record.append(a, [_line(3e-3, 0), _line(1e-3, 1), _line(0, 2, error_no=4)])
    cuda = '{"kind": "cuda", "arch": "sm_90"}'
    record.append(b, [_line(5e-4, 3, target=cuda)])
    recs = record.load(a)
    best = record.pick_best(recs)
    assert best[WL.key()].result.mean == 1e-3
    assert recs[2].result.error_no == 4 and not recs[2].result.ok
    out = tmp_path / "merged.json"
    assert record.merge([a, b], out, best_only=True) == 2
    merged = record.load(out)
    assert sorted(r.result.mean for r in merged) == [5e-4, 1e-3]
    assert record.pick_best(merged, target=LLVM)[WL.key()].result.mean == 1e-3
    with pytest.raises(LogError, match="no records for target cuda"):
        record.check_target(recs, {"kind": "cuda", "arch": "sm_90"}, a)


def test_merge_latest_only_drops_superseded_measurements(tmp_path):
    """``latest_only``: of one config measured more than once on one target, only the latest
    measurement is written (whatever its time); other configs, other targets and other
    workloads keep every record; the source log is left as it was."""
    cuda = '{"kind": "cuda", "arch": "sm_90"}'
    other = Workload.create("batch_matmul", (2, 64, 32, 16))

    def at(line, stamp):
        obj = json.loads(line)
        obj["result"][3] = stamp
        return json.dumps(obj)

    log = tmp_path / "log.json"
    lines = [at(_line(1e-3, 0), 10.0), at(_line(2e-3, 1), 11.0),
             at(_line(3e-3, 0), 12.0),  # config 0 again, later and slower: it stands
             at(_line(5e-4, 0, target=cuda), 9.0),  # another target: kept
             at(_line(4e-3, 0, wl=other), 8.0), at(_line(6e-3, 0, wl=other), 13.0)]
    record.append(log, lines)
    out = tmp_path / "compact.json"
    assert record.merge([log], out, latest_only=True) == 4
    kept = [(r.workload.key() == WL.key(), r.target == cuda, r.config.index, r.result.mean)
            for r in record.load(out)]
    assert kept == [(True, False, 1, 2e-3), (True, False, 0, 3e-3), (True, True, 0, 5e-4),
                    (False, False, 0, 6e-3)]
    assert len(record.load(log)) == 6
    # what a build applies is the same from either log
    for path in (log, out):
        recs = record.load(path)
        assert record.best_for(recs, WL, {"kind": "llvm", "mcpu": "znver5"}).result.mean == 2e-3


def test_gpu_model_records_preferred(tmp_path):
    """Records of the target's own GPU model win over faster ones of another model; without a
    model of its own (or none of it in the log), the fastest that applies wins. Distilling
    keeps each model's best."""
    from tvm_ext.target import cuda_target, describe, gpu_model
    h100, h200 = ('{"kind": "cuda", "arch": "sm_90", "model": "%s"}' % m for m in ("h100", "h200"))
    log = tmp_path / "gpu.json"
    record.append(log, [_line(1e-3, 0, target=h100), _line(2e-3, 1, target=h200),
                        _line(3e-3, 2, target=h200), _line(4e-3, 3, target=h100)])
    recs = record.load(log)
    assert record.best_for(recs, WL, cuda_target("sm_90", "h200")).result.mean == 2e-3
    assert record.best_for(recs, WL, cuda_target("sm_90", "h100")).result.mean == 1e-3
    assert record.best_for(recs, WL, cuda_target("sm_90")).result.mean == 1e-3
    assert record.best_for(recs, WL, cuda_target("sm_90", "a100")).result.mean == 1e-3
    assert record.best_for(recs, WL, cuda_target("sm_80")) is None
    out = tmp_path / "best.json"
    assert record.merge([log], out, best_only=True) == 2
    assert sorted(r.result.mean for r in record.load(out)) == [1e-3, 2e-3]
    assert describe(cuda_target("sm_90", "h200")) == "cuda sm_90 (h200)"
    assert len(record.best_table(recs, cuda_target("sm_90"))) == 2
    assert [gpu_model(n) for n in ("NVIDIA H100 80GB HBM3", "NVIDIA H200",
                                   "NVIDIA A100-SXM4-80GB", "Tesla V100")] == \
        ["h100", "h200", "a100", "v100"]


def test_cpu_records_of_the_same_cpu_ranked_first(tmp_path):
    """On the CPU the machine is the mcpu: records of the target's own CPU rank first, fastest
    first, then the others; a target naming no CPU ranks by time alone."""
    z5, z3 = ('{"kind": "llvm", "keys": ["cpu"], "mcpu": "%s"}' % m for m in ("znver5", "znver3"))
    log = tmp_path / "cpu.json"
    record.append(log, [_line(1e-3, 0, target=z5), _line(3e-3, 1, target=z3),
                        _line(2e-3, 2, target=z3), _line(4e-3, 3, target=z5, error_no=4)])
    recs = record.load(log)
    costs = lambda t: [r.result.mean for r in record.ranked_for(recs, WL, t)]  # noqa: E731
    assert costs({"kind": "llvm", "mcpu": "znver3"}) == [2e-3, 3e-3, 1e-3]
    assert costs({"kind": "llvm", "mcpu": "znver5"}) == [1e-3, 2e-3, 3e-3]
    assert costs({"kind": "llvm"}) == [1e-3, 2e-3, 3e-3]
    assert record.best_for(recs, WL, {"kind": "llvm", "mcpu": "znver3"}).result.mean == 2e-3
    assert costs({"kind": "cuda", "arch": "sm_90"}) == []


def test_cpu_records_rank_by_their_thread_count(tmp_path):
    """A time measured on one thread does not rank kernels for two: records of the target's own
    CPU and thread count (``num-cores``) first."""
    one, two = ('{"kind": "llvm", "keys": ["cpu"], "mcpu": "znver4", "num-cores": %d}' % n
                for n in (1, 2))
    log = tmp_path / "threads.json"
    record.append(log, [_line(1e-3, 0, target=one), _line(2e-3, 1, target=two)])
    recs = record.load(log)
    assert [r.result.mean for r in record.ranked_for(recs, WL, json.loads(two))] == [2e-3, 1e-3]
    assert [r.result.mean for r in record.ranked_for(recs, WL, json.loads(one))] == [1e-3, 2e-3]


def test_other_machines_records_rank_by_cpu_then_nearest_thread_count(tmp_path, monkeypatch):
    """Where the target's own machine has no record, a record of its own CPU comes first, then
    the nearest thread count (in doublings), then the fastest: a 16-thread time is shorter than
    a 2-thread one on any CPU, and must not hand a 4-core host the 16-core config. A target
    that names no thread count runs on ``cpu_threads()`` (``TVM_NUM_THREADS`` here)."""
    cpu = '{"kind": "llvm", "keys": ["cpu"], "mcpu": "%s", "num-cores": %d}'
    log = tmp_path / "machines.json"
    record.append(log, [_line(1e-3, 0, target=cpu % ("znver4", 16)),
                        _line(3e-3, 1, target=cpu % ("znver4", 2)),
                        _line(2e-3, 2, target=cpu % ("znver3", 4))])
    recs = record.load(log)
    costs = lambda t: [r.result.mean for r in record.ranked_for(recs, WL, t)]  # noqa: E731
    assert costs(json.loads(cpu % ("znver4", 4))) == [3e-3, 1e-3, 2e-3]
    assert costs(json.loads(cpu % ("znver4", 8))) == [1e-3, 3e-3, 2e-3]
    assert costs(json.loads(cpu % ("znver3", 16))) == [2e-3, 1e-3, 3e-3]
    assert costs({"kind": "llvm", "num-cores": 4}) == [2e-3, 3e-3, 1e-3]
    monkeypatch.setenv("TVM_NUM_THREADS", "4")
    assert costs({"kind": "llvm"}) == [2e-3, 3e-3, 1e-3]
    monkeypatch.setenv("TVM_NUM_THREADS", "16")
    assert costs({"kind": "llvm"}) == [1e-3, 2e-3, 3e-3]


def test_a_config_measured_again_keeps_only_its_latest_time(tmp_path):
    """A config of a template measured twice on one machine ranks by its latest measurement
    (the template's code and the machine's state of then are in the older one): its old,
    faster time does not win over the other configs' new ones. Other machines' records and
    other configs are untouched; on equal timestamps the later line stands. A knob the older
    record lacks (added to the template since) is the same config at its space-file default
    (``xc`` 1), not at another value; a target string with its keys in another order is the
    same target."""
    def line(cost, index, stamp, target=LLVM, **extra):
        cfg = ConfigEntity(index, {"tile_y": SplitEntity([-1, 2 ** index]),
                                   "tile_x": SplitEntity([-1, 16]),
                                   "tile_k": SplitEntity([-1, 4]), **extra})
        res = MeasureResult([cost], 0, 0.1, stamp, "")
        return record.encode(target, "batch_matmul.x86", WL, cfg, res)
    other = '{"keys": ["cpu"], "kind": "llvm", "mcpu": "znver3"}'
    reordered = '{"kind": "llvm", "mcpu": "znver5", "keys": ["cpu"]}'  # LLVM, keys reordered
    log = tmp_path / "again.json"
    record.append(log, [line(1.0e-3, 1, 10.0), line(1.2e-3, 2, 20.0), line(1.3e-3, 1, 30.0),
                        line(0.9e-3, 1, 5.0, target=other), line(1.1e-3, 3, 7.0),
                        line(1.05e-3, 3, 7.0), line(0.8e-3, 0, 1.0),
                        line(1.4e-3, 0, 2.0, xc=OtherOptionEntity(1)),
                        line(0.7e-3, 4, 1.0), line(1.5e-3, 4, 2.0, xc=OtherOptionEntity(2)),
                        line(1.6e-3, 2, 40.0, target=reordered)])
    recs = record.load(log)
    ranked = record.ranked_for(recs, WL, json.loads(LLVM))
    assert [(r.config["tile_y"].size[-1], r.result.mean) for r in ranked] == \
        [(16, 0.7e-3), (8, 1.05e-3), (2, 1.3e-3), (1, 1.4e-3), (16, 1.5e-3), (4, 1.6e-3),
         (2, 0.9e-3)]
    assert record.best_for(recs, WL, json.loads(LLVM)).result.mean == 0.7e-3
    # the same for a log's best per workload and target (merge_logs(best_only=True), --best)
    twice = [r for r in recs if r.config["tile_y"].size[-1] == 2 and "znver3" not in r.target]
    assert [r.result.mean for r in record.best_per_target(twice).values()] == [1.3e-3]


def test_a_measurement_under_the_hosts_triple_supersedes_one_without_it(tmp_path):
    """The host's target names the triple of the LLVM that TVM was built with; a shipped
    record of the same CPU has none. The same config measured again under either supersedes
    the other (``python -m tvm_ext.rerank`` with the host's target re-ranks shipped records),
    in JSON and in legacy strings; a record of another CPU, or of a target that names no CPU,
    stays as it was."""
    host = '{"kind": "llvm", "mcpu": "znver5", "mtriple": "x86_64-conda-linux-gnu", ' \
        '"keys": ["cpu"]}'
    log = tmp_path / "triple.json"
    record.append(log, [
        _line(0.5e-3, 1), _line(0.9e-3, 1, target=host),  # the shipped time, then the host's
        _line(0.6e-3, 2, target=host), _line(1.0e-3, 2),  # and the other way round
        _line(0.4e-3, 1, target='{"kind": "llvm", "mcpu": "znver3"}'),  # another CPU
        _line(0.3e-3, 3, target="llvm -mcpu=znver5 -mtriple=x86_64-pc-linux-gnu"),
        _line(0.8e-3, 3, target="llvm -mcpu=znver5"),
        _line(0.2e-3, 4, target='{"kind": "llvm", "mtriple": "aarch64-linux-gnu"}'),
        _line(0.7e-3, 4, target='{"kind": "llvm"}')])
    latest = record.latest_measurements(record.load(log))
    assert sorted((r.config["tile_y"].size[-1], r.result.mean) for r in latest) == \
        [(2, 0.4e-3), (2, 0.9e-3), (4, 1.0e-3), (8, 0.8e-3), (16, 0.2e-3), (16, 0.7e-3)]


def test_the_same_config_of_another_workload_supersedes_nothing(tmp_path):
    """A config measured later for another workload is another kernel: it does not hide the
    first workload's record from a log's best per workload (``tune --best``,
    ``merge_logs(best_only=True)``), which agrees with what a build applies."""
    other = Workload.create("batch_matmul", (2, 64, 32, 16))
    log = tmp_path / "two.json"
    record.append(log, [_line(1e-3, 0), _line(2e-3, 1), _line(3e-3, 0, wl=other)])
    recs = record.load(log)
    best = {k[1:]: r for k, r in record.best_per_target(recs).items()}
    assert {k: r.result.mean for k, r in best.items()} == {WL.key(): 1e-3, other.key(): 3e-3}
    assert best[WL.key()] is record.best_for(recs, WL, json.loads(LLVM))
    assert record.pick_best(recs)[WL.key()].result.mean == 1e-3


def test_tvm019_autotvm_log_loads():
    recs = record.load(os.path.join(DATA, "autotvm_v019_x86.json"))
    assert [r.task_name for r in recs] == ["batch_matmul.x86", "batch_matmul.x86",
                                           "dense_pack.x86"]
    assert recs[0].workload == Workload.create("batch_matmul", (4, 64, 48, 32))
    assert recs[1].result.error_no == 1 and not recs[1].result.ok
    assert recs[2].workload.op == "dense" and recs[2].config["tile_inner"].size == [-1, 4]
    best = record.pick_best(recs, target={"kind": "llvm"})
    assert best[recs[0].key()].config["tile_y"].size == [-1, 4]
