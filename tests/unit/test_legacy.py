"""Records of TVM <= 0.19 AutoTVM and TopHub logs, read by what their knobs meant (tvm_ext.legacy).

The logs in tests/data are hand-written in the shapes TopHub and AutoTVM wrote (JSON layout,
argument tuples of each TVM version, knob names and kinds, tvm_version fields), with values of
our own: legacy_tophub_cuda.log (TopHub's cuda log: conv2d records of 0.7.dev0, batch_matmul.cuda
records of 0.7.dev1 with the 2-argument workload and odd K), legacy_autotvm_cuda.json and
legacy_autotvm_x86.json (AutoTVM runs of TVM 0.7 to 0.20.dev0, with conv2d records and a record of
tvm_ext merged in), and the older autotvm_v019_x86.json.
"""
import os

import pytest

from tvm_ext import record
from tvm_ext.legacy import AS_IS, LEGACY, SET_ASIDE, TRANSLATED, translate, version_key
from tvm_ext.result import MeasureResult
from tvm_ext.space import ConfigEntity, OtherOptionEntity, SplitEntity
from tvm_ext.strategy import registered
from tvm_ext.target import target_info
from tvm_ext.task import Task
from tvm_ext.workload import Workload

DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data")
CUDA = {"kind": "cuda", "arch": "sm_80"}
AVX512 = {"kind": "llvm", "mcpu": "znver5", "num-cores": 2}
TOPHUB, AT_CUDA, AT_X86, V019 = ("legacy_tophub_cuda.log", "legacy_autotvm_cuda.json",
                                 "legacy_autotvm_x86.json", "autotvm_v019_x86.json")
UNKNOWN = "not a template of ours"

# Every record of the logs, by (log, line): how it applies, and a piece of the reason.
EXPECTED = {
    # TopHub, batch_matmul.cuda of TVM 0.7.dev1: (x [1, M, K], y [1, N, K]); odd M, N and K.
    (TOPHUB, 5): (TRANSLATED, "tile_y [by, ty, yi] over M"),              # 64x64x20
    (TOPHUB, 6): (SET_ASIDE, "tile_k = [-1, 10] is not one of"),          # ki 10 (and unroll 32)
    (TOPHUB, 7): (TRANSLATED, "no vector loads"),                         # 4096x20x20
    (TOPHUB, 8): (SET_ASIDE, "tile_k = [-1, 11] is not one of"),          # K = 33
    (TOPHUB, 9): (TRANSLATED, "tile_x [bx, tx, xi] over N"),              # 33x33x20
    (TOPHUB, 10): (SET_ASIDE, "tile_k = [-1, 5] is not one of"),          # K = 5
    (TOPHUB, 11): (SET_ASIDE, "auto_unroll_max_step = 8 is not one of"),  # K = 20, unroll 8
    (TOPHUB, 12): (SET_ASIDE, "tile_k = [-1, 20] is not one of"),         # 133x133x20
    (TOPHUB, 13): (SET_ASIDE, "tile_k = [-1, 7] is not one of"),          # K = 133
    # AutoTVM on CUDA
    (AT_CUDA, 2): (TRANSLATED, "interleave_y = vthread"),                 # dense_large_batch 0.7.0
    (AT_CUDA, 3): (SET_ASIDE, "interleave_y = 4 is not one of 1, 2"),     # vthread 4 over M
    (AT_CUDA, 4): (TRANSLATED, "tile_k [ko, kt, ki] -> [-1, kt * ki]"),   # 0.8.dev0
    (AT_CUDA, 5): (SET_ASIDE, "rules out: a thread's tile splits"),       # 2x2 tile, vthread 2x2
    (AT_CUDA, 6): (TRANSLATED, "tile_k [-1, kf, 1]"),                     # dense_small_batch
    (AT_CUDA, 7): (SET_ASIDE, "tile_k = [-1, 5, 1] is not one of"),       # 5 threads along K
    (AT_CUDA, 8): (SET_ASIDE, "TVM 0.9.0 had no dense_small_batch.cuda"),  # .gpu from 0.8
    (AT_CUDA, 9): (TRANSLATED, "the unroll knobs are ours"),              # bmm 0.9.0, NT
    (AT_CUDA, 10): (TRANSLATED, "the unroll knobs are ours"),             # bmm 0.13.0, NN
    (AT_CUDA, 11): (SET_ASIDE, "auto_unroll_max_step = 16 is not one of"),  # 0.19.0
    (AT_CUDA, 12): (TRANSLATED, "TVM 0.20.dev0 batch_matmul.cuda"),       # the last AutoTVM
    (AT_CUDA, 13): (AS_IS, "the same knobs"),                             # dense_tensorcore 0.9
    (AT_CUDA, 14): (SET_ASIDE, "wmma_m = 32 chose the 32x8x16 fragment"),
    (AT_CUDA, 15): (AS_IS, "batch_matmul_tensorcore.cuda"),               # 0.10.0
    (AT_CUDA, 16): (SET_ASIDE, "TVM 0.7.0 had no batch_matmul_tensorcore.cuda"),
    (AT_CUDA, 17): (AS_IS, "written by tvm_ext (TVM 0.27.0.post1)"),
    # AutoTVM on x86 (line 1 is a comment, lines 2-3 conv2d_NCHWc.x86)
    (AT_X86, 4): (TRANSLATED, "every k step updated all yi rows"),        # dense_pack 0.7.0
    (AT_X86, 5): (TRANSLATED, "all yi rows per k step for r = 1"),        # tile_inner [-1, 1]
    (AT_X86, 6): (TRANSLATED, "ordinary stores (nt_store 0)"),            # r = 2 of yi = 8
    (AT_X86, 7): (SET_ASIDE, "groups of 3 with a ragged last one"),       # r = 3 of yi = 8
    (AT_X86, 8): (TRANSLATED, "r >= yi"),                                 # r = 16 of yi = 4
    (AT_X86, 9): (SET_ASIDE, "tile_x = [-1, 1, 128] is not one of"),      # xi = 128
    (AT_X86, 10): (SET_ASIDE, "fit the vector registers"),                # 16 x 64 tile
    (AT_X86, 11): (SET_ASIDE, "summed k in vectors of tile_k[-1] = 16"),  # bmm x86, 2 args
    (AT_X86, 12): (SET_ASIDE, "no config of ours is that kernel"),        # bmm x86, 6 args
    (AT_X86, 13): (UNKNOWN, ""),                                          # dense_nopack.x86
    (V019, 1): (SET_ASIDE, "(rfactor)"),
    (V019, 2): (SET_ASIDE, "(rfactor)"),
    (V019, 3): (TRANSLATED, "ordinary stores (nt_store 0)"),              # r = 4 of yi = 8
}
SET_ASIDE_BY_LOAD = {TOPHUB: {"conv2d_nchw.cuda": 2, "depthwise_conv2d_nchw.cuda": 1,
                              "conv2d_nchw_winograd.cuda": 1},
                     AT_CUDA: {"conv2d_nchw.cuda": 1}, AT_X86: {"conv2d_NCHWc.x86": 2},
                     V019: {}}


def _records(log):
    return record.load(os.path.join(DATA, log))


def _by_line(log):
    return {r.line_no: r for r in _records(log)}


def _task(rec) -> Task:
    target = CUDA if target_info(rec.target)["kind"] == "cuda" else AVX512
    return Task(rec.workload, target, template=rec.task_name)


def _rec(task_name, shape, entities, version, op=None, dtype="float32"):
    op = op or record.op_of_task(task_name)
    cfg = ConfigEntity(None, {n: SplitEntity(v) if isinstance(v, list) else OtherOptionEntity(v)
                              for n, v in entities.items()})
    return record.Record("cuda" if task_name.endswith(".cuda") else "llvm", task_name,
                         Workload.create(op, shape, dtype), cfg,
                         MeasureResult([1e-5], 0, 1.0, 1.0), tvm_version=version)


@pytest.mark.parametrize("log", sorted(SET_ASIDE_BY_LOAD))
def test_logs_load_and_set_aside_other_operators(log):
    recs, aside = record.load_log(os.path.join(DATA, log))
    by_template = {}
    for why, n in aside.items():  # keyed by the template's name (and why)
        by_template[why.split()[0]] = by_template.get(why.split()[0], 0) + n
    assert by_template == SET_ASIDE_BY_LOAD[log]
    assert sorted(r.line_no for r in recs) == sorted(k[1] for k in EXPECTED if k[0] == log)
    assert all(r.tvm_version for r in recs)


@pytest.mark.parametrize("log", sorted(SET_ASIDE_BY_LOAD))
def test_every_record_applies_as_is_translated_or_set_aside(log):
    """Translated configs are configs of the target's space that break none of its rules;
    records of ours and TOPI's records whose knobs are ours one for one apply as they are."""
    for rec in _records(log):
        how, why = EXPECTED[(log, rec.line_no)]
        where = f"{log}:{rec.line_no} {rec.task_name} {rec.tvm_version}"
        if how == UNKNOWN:  # apply_history_best drops it before any translation
            assert registered(rec.task_name) is None, where
            continue
        task = _task(rec)
        got = translate(rec, task.space)
        assert (got.how, why in got.reason) == (how, True), f"{where}: {got}"
        if how == TRANSLATED:
            assert list(got.values) == list(task.space.knobs), where
            cfg = task.space.config_from_values(got.values, fallback=False)
        elif how == AS_IS:
            assert got.values is None
            cfg = task.config_of_record(rec.config)
        else:
            assert got.values is None and got.reason, where
            continue
        assert cfg.index is not None and task.space.violations(cfg) == [], where


def test_hand_checked_translations():
    tophub, cuda, x86 = _by_line(TOPHUB), _by_line(AT_CUDA), _by_line(AT_X86)
    simt = {"vec": 1, "offset": 0, "double_buffer": 0, "kmajor": 0, "interleave_y": 1,
            "interleave_x": 1}

    def values(rec):
        return translate(rec, _task(rec).space).values

    # TopHub 0.7.dev1, bmm 1x64x64x20 (2-argument form): tile_y [-1, 16, 4] tile_x [-1, 8, 2]
    # tile_k [-1, 4] unroll 64 / 1: TOPI's own tiling, with its scalar single-buffered loads.
    assert tophub[5].workload == Workload.create("batch_matmul", (1, 64, 64, 20))
    assert values(tophub[5]) == {"tile_y": [-1, 16, 4], "tile_x": [-1, 8, 2], "tile_k": [-1, 4],
                                 "auto_unroll_max_step": 64, "unroll_explicit": 1, **simt}
    # dense_large_batch 0.7.0, 128x1024x256: tile_x (M) [-1, 2, 16, 2], tile_y (N) [-1, 2, 8, 4],
    # tile_k [-1, 4, 2] -> 16 threads x (2 sub-tiles of 2 rows) on M, 8 x (2 of 4) on N, K 8.
    assert values(cuda[2]) == {"tile_y": [-1, 16, 4], "tile_x": [-1, 8, 8], "tile_k": [-1, 8],
                               "auto_unroll_max_step": 0, "unroll_explicit": 1, "vec": 1,
                               "offset": 0, "double_buffer": 1, "kmajor": 0, "interleave_y": 2,
                               "interleave_x": 2}
    # dense_small_batch 0.7.dev1, 1x1000x2048, tile_k [-1, 64]: 64 threads along K, one output.
    assert values(cuda[6]) == {"tile_k": [-1, 64, 1], "tile_x": [-1, 1], "tile_y": [-1, 1],
                              "coalesce_n": 0}
    # dense_pack 0.7.0: no tile_inner (all 8 rows per k step); 0.12.0 tile_inner [-1, 1]: all
    # 4 rows too; 0.9.0 tile_inner [-1, 16] over yi = 4: the 4 rows. TOPI wrote C by ordinary
    # stores: nt_store 0.
    assert values(x86[4]) == {"tile_y": [-1, 2, 8], "tile_x": [-1, 2, 32], "tile_k": [-1, 4],
                              "tile_inner": [-1, 8], "nt_store": 0}
    assert values(x86[5]) == {"tile_y": [-1, 4, 4], "tile_x": [-1, 1, 16], "tile_k": [-1, 8],
                              "tile_inner": [-1, 4], "nt_store": 0}
    assert values(x86[8])["tile_inner"] == [-1, 4]


def _indices(sizes, block, thread):
    """The indices of an axis split [blocks, vthreads, threads, inner] (outermost first) that
    thread ``thread`` of block ``block`` computes."""
    _, v_n, t_n, i_n = sizes
    return {((block * v_n + v) * t_n + thread) * i_n + i for v in range(v_n) for i in range(i_n)}


def _check_axis(topi_sizes, ours, interleave):
    """TOPI's split [b, v, t, i] and ours [-1, t, per_thread] with ``interleave`` sub-tiles
    (our schedule splits it [b, interleave, t, per_thread / interleave]) give each thread of
    each block the same indices."""
    length = topi_sizes[0] * topi_sizes[1] * topi_sizes[2] * topi_sizes[3]
    _, t, per = ours
    mine = [length // (t * per), interleave, t, per // interleave]
    assert mine[0] == topi_sizes[0] and mine[2] == topi_sizes[2]
    for b in range(mine[0]):
        for th in range(mine[2]):
            assert _indices(mine, b, th) == _indices(topi_sizes, b, th)


def test_translations_tile_the_same_outputs():
    """Per block and thread, the translated configs compute the output rows and columns (and,
    for dense_small_batch, the k indices) the TOPI config computed."""
    checked = 0
    for log in (TOPHUB, AT_CUDA):
        for rec in _records(log):
            if rec.task_name not in LEGACY or EXPECTED[(log, rec.line_no)][0] != TRANSLATED:
                continue
            task = _task(rec)
            ours = translate(rec, task.space).values
            wl = rec.workload
            if rec.task_name == "batch_matmul.cuda":  # [b, t, i] on both sides, no vthread
                by, ty, yi = rec.config["tile_y"].resolved(wl.M)
                bx, tx, xi = rec.config["tile_x"].resolved(wl.N)
                _check_axis([by, 1, ty, yi], ours["tile_y"], ours["interleave_y"])
                _check_axis([bx, 1, tx, xi], ours["tile_x"], ours["interleave_x"])
                assert ours["tile_k"][1] == rec.config["tile_k"].size[1]
            elif rec.task_name == "dense_large_batch.cuda":  # TOPI's tile_x is M, tile_y N
                _check_axis(rec.config["tile_x"].resolved(wl.M), ours["tile_y"],
                            ours["interleave_y"])
                _check_axis(rec.config["tile_y"].resolved(wl.N), ours["tile_x"],
                            ours["interleave_x"])
                _, kt, ki = rec.config["tile_k"].size
                assert ours["tile_k"][1] == kt * ki and ours["double_buffer"] == 1
            elif rec.task_name == "dense_small_batch.cuda":  # k = ko * kf + thread
                kf = rec.config["tile_k"].size[1]
                _, tx, vec = ours["tile_k"]
                for t in range(kf):
                    assert {ko * kf + t for ko in range(wl.K // kf)} == \
                        {ko * tx * vec + t * vec + v for ko in range(wl.K // (tx * vec))
                         for v in range(vec)}
                assert ours["tile_x"] == [-1, 1] and ours["tile_y"] == [-1, 1]
            checked += 1
    assert checked == 9


def test_the_version_decides_what_tile_inner_means():
    """The same dense_pack.x86 knobs: TVM 0.12's tile_inner [-1, 1] updated all 4 rows per k
    step; ours is one row per k step."""
    knobs = {"tile_y": [-1, 4, 4], "tile_x": [-1, 1, 16], "tile_k": [-1, 8], "tile_inner": [-1, 1]}
    space = Task(Workload.create("dense", (64, 512, 256)), AVX512, template="dense_pack.x86").space
    old = translate(_rec("dense_pack.x86", (64, 512, 256), knobs, "0.12.0"), space)
    assert old.how == TRANSLATED and old.values["tile_inner"] == [-1, 4]
    ours = translate(_rec("dense_pack.x86", (64, 512, 256), knobs, "0.27.0.post1"), space)
    assert ours.how == AS_IS
    # Without a version, TVM's knob layout says who wrote it: these are TVM 0.8-0.19's.
    assert translate(_rec("dense_pack.x86", (64, 512, 256), knobs, None), space).how == TRANSLATED


def test_the_records_of_the_issue_are_translated_not_misread():
    """A dense_large_batch.cuda record (tile_x over M in 4 parts) and a dense_small_batch.cuda
    record (2-way tile_k) used to pass the space check and fail in the schedule; read by their
    meaning they schedule, and a record that claims to be ours with TOPI's knobs is set aside."""
    large = {"tile_x": [-1, 2, 16, 2], "tile_y": [-1, 2, 8, 4], "tile_k": [-1, 4, 2]}
    task = Task(Workload.create("dense", (128, 1024, 256)), CUDA, template="dense_large_batch.cuda")
    got = translate(_rec("dense_large_batch.cuda", (128, 1024, 256), large, "0.7.0"), task.space)
    assert got.how == TRANSLATED
    task.instantiate(task.space.config_from_values(got.values, fallback=False))
    claimed = translate(_rec("dense_large_batch.cuda", (128, 1024, 256), large, "0.27.0.post1"),
                        task.space)
    assert claimed.how == SET_ASIDE and "where ours is a 3-way split" in claimed.reason
    # without a version: TOPI's 4-way layout
    assert translate(_rec("dense_large_batch.cuda", (128, 1024, 256), large, None),
                     task.space).how == TRANSLATED

    small = Task(Workload.create("dense", (1, 1000, 2048)), CUDA, template="dense_small_batch.cuda")
    got = translate(_rec("dense_small_batch.cuda", (1, 1000, 2048), {"tile_k": [-1, 64]},
                         "0.7.dev1"), small.space)
    assert got.how == TRANSLATED
    small.instantiate(small.space.config_from_values(got.values, fallback=False))
    ours = {"tile_k": [-1, 64, 2], "tile_x": [-1, 1], "tile_y": [-1, 1]}
    assert translate(_rec("dense_small_batch.cuda", (1, 1000, 2048), ours, None),
                     small.space).how == AS_IS
    wrong = translate(_rec("dense_small_batch.cuda", (1, 1000, 2048), ours, "0.7.0"), small.space)
    assert wrong.how == SET_ASIDE and "not those TVM 0.7.0's dense_small_batch.cuda wrote" \
        in wrong.reason


def test_records_that_mean_nothing_here_are_set_aside():
    space = Task(Workload.create("dense", (64, 64, 64)), AVX512, template="dense_pack.x86").space
    knobs = {"tile_y": [-1, 3, 5], "tile_x": [-1, 1, 16], "tile_k": [-1, 4], "tile_inner": [-1, 2]}
    got = translate(_rec("dense_pack.x86", (64, 64, 64), knobs, "0.9.0"), space)
    assert got.how == SET_ASIDE and "does not split M = 64" in got.reason
    bmm = Task(Workload.create("batch_matmul", (2, 64, 64, 64)), CUDA,
               template="batch_matmul.cuda").space
    knobs = {"tile_y": [-1, 8, 4], "tile_x": [-1, 8, 4], "tile_k": [-1, 8],
             "auto_unroll_max_step": 64, "unroll_explicit": 1}
    got = translate(_rec("batch_matmul.cuda", (2, 64, 64, 64), knobs, "0.6.0"), bmm)
    assert got.how == SET_ASIDE and "TVM 0.6.0 had no batch_matmul.cuda" in got.reason
    ours = dict(knobs, vec=1, offset=0, double_buffer=0, swizzle=1)  # a knob we do not have
    got = translate(_rec("batch_matmul.cuda", (2, 64, 64, 64), ours, "0.27.0.post1"), bmm)
    assert got.how == SET_ASIDE and "swizzle" in got.reason
    mma = Task(Workload.create("dense", (256, 256, 256), "float16"), CUDA,
               template="dense_mma.cuda").space
    rec = _rec("dense_mma.cuda", (256, 256, 256), {"chunk": 2}, "0.19.0", dtype="float16")
    got = translate(rec, mma)
    assert got.how == SET_ASIDE and "TVM 0.19.0 had no dense_mma.cuda" in got.reason


def test_version_key():
    assert version_key("0.7.dev1") == (0, 7, -1) < version_key("0.7.0") == (0, 7, 0)
    assert version_key("0.19.0") < version_key("0.20.dev0") < version_key("0.20.0")
    assert version_key("0.27.0.post1") == (0, 27, 0)
    assert version_key(None) is None and version_key("unknown") is None


def test_tophub_records_of_other_ops_with_matmul_ranks_do_not_fail_the_log(tmp_path):
    log = tmp_path / "tophub_cuda.log"
    log.write_text(
        '{"input": ["cuda -model=v100", "conv1d_transpose_nchw.cuda", [["TENSOR", [1, 64, 100], '
        '"float32"], ["TENSOR", [64, 32, 4], "float32"], [2], [1, 1], "float32", [0]], {}], '
        '"config": {"index": 77, "code_hash": null, "entity": [["tile_n", "sp", [-1, 1, 1, 1]], '
        '["tile_f", "sp", [-1, 2, 16, 1]], ["tile_x", "sp", [-1, 1, 8, 1]], ["tile_rc", "sp", '
        '[-1, 8]], ["auto_unroll_max_step", "ot", 64], ["unroll_explicit", "ot", 1]]}, '
        '"result": [[1.2e-05], 0, 1.5, 1598402000.0], "version": 0.2, '
        '"tvm_version": "0.7.dev1"}\n')
    recs, aside = record.load_log(log)
    assert recs == [] and sum(aside.values()) == 1
