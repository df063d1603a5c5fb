"""CPU templates: numerics for every layout over sampled configs; apply at build time."""
import json
import os
import re

import numpy as np
import pytest
import tvm
from tvm import relax, s_tir, te

import tvm_ext
from tvm_ext import record
from tvm_ext.measure import LocalMeasurer
from tvm_ext.result import MeasureErrorNo, MeasureResult
from tvm_ext.task import Task
from tvm_ext.workload import Workload
from tvm_ext.measure.check import random_inputs, reference_matmul, tolerance
from tvm_ext.ops.common import matmul_compute
from tvm_ext.ops.x86_gemm import divides
from cpu_helpers import host_runs_avx2

CASES = [("batch_matmul", (2, 48, 64, 40)), ("dense", (24, 96, 56))]
# CPU targets by their vector facts, whatever this host is (nothing built for them is run unless
# the host has those instructions).
AVX512 = {"kind": "llvm", "mcpu": "znver5", "num-cores": 2}
AVX2 = {"kind": "llvm", "mcpu": "znver3", "num-cores": 2}


@pytest.mark.parametrize("op,shape", CASES)
@pytest.mark.parametrize("layout", ["NN", "NT", "TN", "TT"])
def test_numerics_sampled_configs(op, shape, layout):
    wl = Workload.create(op, shape, layout=layout)
    task = Task(wl, "llvm")
    rng = np.random.default_rng(0)
    valid = list(task.space.valid_indices())
    picks = [task.fallback_config()] + [task.config(int(i)) for i in
                                        rng.choice(valid, size=min(3, len(valid)),
                                                   replace=False)]
    a, b = random_inputs(task.workload, rng)
    ref = reference_matmul(wl, a, b)
    for cfg in picks:
        kernel = tvm_ext.Kernel(task, tvm_ext.dispatch.Choice(wl, task.name, cfg, False),
                                task.build(cfg))
        np.testing.assert_allclose(kernel.run(a, b), ref, *tolerance(wl), err_msg=str(cfg))


def test_float64_and_measure_checks_answer():
    wl = Workload.create("batch_matmul", (1, 32, 32, 32), "float64")
    task = Task(wl, "llvm")
    res = LocalMeasurer(number=1, repeat=1, min_repeat_ms=0).measure_one(task,
                                                                         task.fallback_config())
    assert res.ok and res.costs[0] > 0


def test_wrong_answer_is_detected(tmp_path):
    import json
    import faulty_ops
    space = tmp_path / "faulty.json"
    space.write_text(json.dumps(faulty_ops.SPACE))
    task = Task(Workload.create("batch_matmul", (1, 16, 32, 16)), "llvm", template="faulty.x86",
                space_file=str(space))
    wrong = task.config_with({"fault": "wrong"})
    res = LocalMeasurer(number=1, repeat=1).measure_one(task, wrong)
    assert res.error_no == MeasureErrorNo.WRONG_ANSWER and "differ from numpy" in res.error_msg
    ok = LocalMeasurer(number=1, repeat=1).measure_one(task, task.fallback_config())
    assert ok.ok


def test_a_pack_width_that_does_not_divide_n_is_padded():
    """A pack width that does not divide N (24 of 32) pads N inside the kernel: it measures and
    its answer is checked (an instantiation error is a result: tests/unit/test_measure.py)."""
    wl = Workload.create("batch_matmul", (1, 16, 32, 16))
    task = Task(wl, "llvm")
    cfg = task.config_with({"tile_y": [-1, 4], "tile_x": [-1, 24],
                            "tile_k": [-1, 4]})
    res = LocalMeasurer().measure_one(task, cfg)
    assert res.ok, res.error_msg


@pytest.mark.parametrize("op,shape,ki,layout", [
    ("dense", (37, 41, 131), 4, "NT"), ("dense", (37, 41, 131), 16, "NN"),
    ("batch_matmul", (2, 19, 40, 29), 8, "TN")])
def test_a_k_step_that_does_not_divide_k_is_padded(op, shape, ki, layout):
    """A prime K is padded up to the unrolled K step with zeros in A's and B's reads (131 ->
    132 with ki = 4), as M and N are padded to the register tile: right answers in every
    layout, and the fallback takes ki = 4 where it adds at most 1/8 of K."""
    wl = Workload.create(op, shape, layout=layout)
    task = Task(wl, "llvm")
    assert task.fallback_config()["tile_k"].size[-1] == 4
    cfg = next(task.config(i) for i in task.space.valid_indices()
               if task.config(i)["tile_k"].size[-1] == ki)  # the space has it
    rng = np.random.default_rng(0)
    a, b = random_inputs(wl, rng)
    kernel = tvm_ext.Kernel(task, tvm_ext.dispatch.Choice(wl, task.name, cfg, False),
                            task.build(cfg))
    np.testing.assert_allclose(kernel.run(a, b), reference_matmul(wl, a, b), *tolerance(wl))


def test_apply_history_best_uses_tuned_config_and_reports(tmp_path):
    wl = Workload.create("batch_matmul", (2, 32, 64, 32))
    other = Workload.create("dense", (16, 32, 16))
    task = Task(wl, "llvm")
    cfg = task.config_with({"tile_y": [-1, 2], "tile_x": [-1, 32],
                                         "tile_k": [-1, 2]})
    res = LocalMeasurer(number=1, repeat=1).measure_one(task, cfg)
    log = tmp_path / "log.json"
    record.append(log, [record.encode(task.target_str, task.name, wl, cfg, res)])
    with tvm_ext.apply_history_best(str(log)) as ctx:
        k1 = tvm_ext.build(wl, "llvm")
        k2 = tvm_ext.build(other, "llvm")
    assert k1.choice.tuned and k1.choice.config == cfg
    assert not k2.choice.tuned
    assert [c.tuned for c in ctx.report.choices] == [True, False]
    assert "1 of 2 kernels used a tuned config" in ctx.report.summary()
    rng = np.random.default_rng(1)
    a, b = random_inputs(task.workload, rng)
    np.testing.assert_allclose(k1.run(a, b), reference_matmul(wl, a, b), *tolerance(wl))


def test_a_record_of_another_machine_is_reported_as_such(tmp_path):
    """Where no record of the target's own machine applies, another machine's does, and the
    report says whose time its "ms in log" is (a faster host's time is no promise here); a
    record of the target's own machine (its CPU and thread count) says nothing of it."""
    wl = Workload.create("dense", (16, 64, 32))
    log = tmp_path / "log.json"
    other = {"kind": "llvm", "mcpu": "emeraldrapids", "num-cores": 2}
    task = Task(wl, other)
    res = MeasureResult([1e-5], MeasureErrorNo.NO_ERROR, 0.1)
    record.append(log, [record.encode(task.target_str, task.name, wl, task.fallback_config(),
                                      res)])
    for target, says in ((AVX512, "measured on another machine: emeraldrapids x2"),
                         (other, None)):
        with tvm_ext.apply_history_best(str(log)) as ctx:
            _, choice = tvm_ext.dispatch.choose(wl, target)
        assert choice.tuned, target
        line = str(ctx.report)
        if says:
            assert f"dense_pack.x86 tuned (0.0100 ms in log), {says}" in line, line
        else:
            assert "another machine" not in line, line
    listing = "\n".join(tvm_ext.dispatch.applied_table(record.load(log), AVX512))
    assert "(measured on another machine: emeraldrapids x2)" in listing, listing


def test_old_autotvm_log_applies_by_its_meaning():
    """TVM 0.19 records (skylake-avx512) apply by what their knobs meant then. dense_pack.x86's
    meant what ours do: applied (built for an AVX-512 CPU target, so that its 8x32 register
    tile, which needs AVX-512's 32 vector registers, applies on any host; run only where the
    host has AVX-512). TOPI's batch_matmul.x86 summed K in vectors (rfactor over tile_k), a
    kernel of another shape than ours: its record is set aside with the reason, never built
    as ours."""
    from tvm_ext.target import hardware_facts, host_cpu_target
    log = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data",
                       "autotvm_v019_x86.json")
    wl = Workload.create("batch_matmul", (4, 64, 48, 32))
    dense = Workload.create("dense", (16, 64, 32))
    with tvm_ext.apply_history_best(log) as ctx:
        k = tvm_ext.build(wl, AVX512)
        kd = tvm_ext.build(dense, AVX512)
    assert not k.choice.tuned
    assert ctx.report.skipped and all("batch_matmul.x86" in line and "TVM 0.19.0" in line
                                      for line in ctx.report.skipped)
    assert kd.choice.tuned and kd.choice.config["tile_inner"].size[-1] == 4
    assert len(ctx.report.tuned) == 1
    if hardware_facts(host_cpu_target())["vector_bits"] < 512:
        pytest.skip("the host has no AVX-512: the kernels were built, not run")
    rng = np.random.default_rng(2)
    for kern, w in ((k, wl), (kd, dense)):
        a, b = random_inputs(kern.task.workload, rng)
        np.testing.assert_allclose(kern.run(a, b), reference_matmul(w, a, b), *tolerance(w))


def test_unsupported_dtype_on_cpu():
    from tvm_ext.errors import TemplateError
    with pytest.raises(TemplateError, match="dtype float16"):
        Task(Workload.create("batch_matmul", (1, 16, 16, 16), "float16"), "llvm")



def _synthetic(task, values, cost):
    """A log line for ``values`` as if measured at ``cost`` seconds (nothing is run)."""
    cfg = task.config_with(values)
    assert task.space.is_valid(cfg), task.space.violations(cfg)
    return record.encode(task.target_str, task.name, task.workload, cfg,
                         MeasureResult([cost], 0, 0.1, 1.0))


def test_record_that_breaks_the_targets_space_is_skipped(tmp_path):
    """A register tile tuned on an AVX-512 CPU (32 vector registers) is not applied on an AVX2
    CPU (16): the next record that fits is, else the fallback, and the report says why. Old
    records lacking tile_inner replay their tile_y rows (default_expr), which keeps them valid."""
    from tvm_ext.dispatch import choose
    wl = Workload.create("batch_matmul", (2, 32, 64, 32))
    task = Task(wl, AVX512)
    big = {"tile_y": [-1, 4], "tile_x": [-1, 64], "tile_k": [-1, 4]}  # 4*4+4+1 <= 32; on AVX2 41
    small = {"tile_y": [-1, 2], "tile_x": [-1, 16], "tile_k": [-1, 4], "tile_inner": [-1, 2]}
    log = tmp_path / "avx512.json"
    record.append(log, [_synthetic(task, big, 1e-3), _synthetic(task, small, 2e-3)])
    with tvm_ext.apply_history_best(str(log)) as ctx:
        _, on_avx512 = choose(wl, AVX512)
        _, on_avx2 = choose(wl, AVX2)
    assert on_avx512.tuned and on_avx512.config["tile_x"].size[-1] == 64
    assert on_avx2.tuned and on_avx2.config["tile_x"].size[-1] == 16
    assert len(ctx.report.skipped) == 1 and "vector registers" in ctx.report.skipped[0]
    assert "1 records skipped" in ctx.report.summary()
    only_big = tmp_path / "big.json"
    record.append(only_big, [_synthetic(task, big, 1e-3)])
    with tvm_ext.apply_history_best(str(only_big)):
        _, fell_back = choose(wl, AVX2)
    assert not fell_back.tuned
    # A record without tile_inner (as TVM <= 0.19 wrote them), tile_y rows of 2.
    old = json.loads(_synthetic(task, {**small, "tile_y": [-1, 2]}, 1e-3))
    old["config"]["entity"] = [e for e in old["config"]["entity"]
                               if e[0] in ("tile_y", "tile_x", "tile_k")]
    old_log = tmp_path / "old.json"
    old_log.write_text(json.dumps(old) + "\n")
    with tvm_ext.apply_history_best(str(old_log)):
        _, replay = choose(wl, AVX2)
    assert replay.tuned and replay.config["tile_inner"].size == [-1, 2]


@pytest.mark.parametrize("layout", ["NN", "NT", "TN", "TT"])
def test_a_register_tile_of_1024_bytes_stays_in_registers(layout):
    """A register tile of 16 AVX-512 vectors (4 x 64 f32, 1024 bytes) would be a TVM heap
    workspace as a "local" copy, zeroed by a memset call and stored there before every
    write-back. With nothing after the matmul it accumulates in C itself (LLVM keeps it in
    registers); a padded shape keeps its crop in the write-back of a local copy, which
    ``codegen.stack_tiles`` keeps on the stack (in registers): no memset in either kernel,
    the answer unchanged. f64: 4 x 32 is the same 1024 bytes."""
    rng = np.random.default_rng(1)
    for shape, dtype, tile_x, padded in (((2, 16, 128, 24), "float32", 64, False),
                                         ((2, 16, 64, 24), "float64", 32, False),
                                         ((2, 18, 128, 24), "float32", 64, True)):
        wl = Workload.create("batch_matmul", shape, dtype, layout=layout)
        task = Task(wl, "llvm", template="batch_matmul.x86")
        cfg = task.space.config_from_values(
            {**task.fallback_config().values_dict(), "tile_y": [-1, 4],
             "tile_x": [-1, tile_x], "tile_k": [-1, 8], "tile_inner": [-1, 4]})
        lib = task.build(cfg)
        asm = lib.mod.inspect_source("asm")
        assert "memset" not in asm, (shape, dtype, layout, padded)
        a, b = random_inputs(wl, rng)
        kernel = tvm_ext.Kernel(task, tvm_ext.dispatch.Choice(wl, task.name, cfg, False), lib)
        np.testing.assert_allclose(kernel.run(a, b), reference_matmul(wl, a, b),
                                   *tolerance(wl), err_msg=str(cfg))


def _register_tile(op, shape, layout, target, rows: int, width: int, row_tiles: int = 1):
    """(task, config, library, its assembly): ``op``'s packed template on ``target`` with
    a ``rows`` x ``width`` register tile (``tile_k`` 4; dense_pack.x86's tasks ``row_tiles``
    tiles tall), a config of the space that breaks none of its rules."""
    wl = Workload.create(op, shape, layout=layout)
    dense = op == "dense"  # dense_pack.x86's splits have a middle factor
    task = Task(wl, target, template="dense_pack.x86" if dense else None)
    values = {**task.fallback_config().values_dict(), "tile_k": [-1, 4],
              "tile_inner": [-1, rows], "tile_y": [-1, row_tiles, rows] if dense else [-1, rows],
              "tile_x": [-1, 1, width] if dense else [-1, width]}
    cfg = task.space.config_from_values(values)
    assert cfg.index is not None and not task.space.violations(cfg), cfg
    lib = task.build(cfg)
    return task, cfg, lib, lib.mod.inspect_source("asm")


def _answers_as_numpy(task, cfg, lib, rng):
    """The built kernel's answer on random inputs is numpy's."""
    wl = task.workload
    a, b = random_inputs(wl, rng)
    kernel = tvm_ext.Kernel(task, tvm_ext.dispatch.Choice(wl, task.name, cfg, False), lib)
    np.testing.assert_allclose(kernel.run(a, b), reference_matmul(wl, a, b), *tolerance(wl),
                               err_msg=str(cfg))


def _ymm_accumulators(asm: str) -> set:
    """The registers that AVX2 FMAs (``vfmadd231ps`` on ymm) of ``asm`` accumulate into."""
    return {line.split(",")[-1].strip() for line in asm.splitlines()
            if "vfmadd231ps" in line and "%ymm" in line}


@pytest.mark.skipif(not host_runs_avx2(), reason="runs AVX2 code")
@pytest.mark.parametrize("layout", ["NN", "NT", "TN", "TT"])
def test_six_rows_of_two_avx2_vectors_pad_m_and_answer_right(layout):
    """The AVX2 register tile of BLIS (6 x 16: 12 accumulators, two B vectors and a broadcast
    in 16 registers; ``extra_inner`` of the x86 spaces) on a power-of-two M, which 6 does not
    divide (padded up to the tile inside the kernel), on both templates: the FMAs accumulate
    in 12 vector registers and the answer is numpy's."""
    rng = np.random.default_rng(3)
    for op, shape in (("dense", (64, 48, 40)), ("batch_matmul", (2, 32, 32, 24))):
        wl = Workload.create(op, shape, layout=layout)
        task = Task(wl, AVX2)
        dense = op == "dense"  # dense_pack.x86's splits have a middle factor
        values = {**task.fallback_config().values_dict(), "tile_k": [-1, 4],
                  "tile_inner": [-1, 6], "tile_y": [-1, 2, 6] if dense else [-1, 6],
                  "tile_x": [-1, 1, 16] if dense else [-1, 16]}
        cfg = task.space.config_from_values(values)
        assert cfg.index is not None and not task.space.violations(cfg), cfg
        lib = task.build(cfg)
        asm = lib.mod.inspect_source("asm")
        accumulators = _ymm_accumulators(asm)
        assert len(accumulators) >= 12, (op, layout, sorted(accumulators))
        a, b = random_inputs(wl, rng)
        kernel = tvm_ext.Kernel(task, tvm_ext.dispatch.Choice(wl, task.name, cfg, False), lib)
        np.testing.assert_allclose(kernel.run(a, b), reference_matmul(wl, a, b),
                                   *tolerance(wl), err_msg=str(cfg))


@pytest.mark.parametrize("layout", ["NN", "NT", "TN", "TT"])
def test_three_vectors_a_row_stay_whole_vectors(layout):
    """A register tile three vectors wide (4 x 24 on AVX2, 8 x 48 on AVX-512: the spaces'
    ``extra_inner`` rows for 3 vectors) is vectorized as three vectors, not as one vector of
    24 or 48 lanes, which LLVM legalizes by moving single elements through the stack
    (``vinsertps``; 8 x 48 on dense 128x3072x768 ran 7x slower than 8 x 32): its FMAs
    accumulate in 12 AVX2 registers, and the answer is numpy's. K is whole vectors, so that a
    weight stored [N, K] packs by register transposes (a padded one gathers its elements). The
    AVX-512 kernel is only compiled (the host may not run it)."""
    rng = np.random.default_rng(5)
    for op, shape in (("dense", (16, 96, 64)), ("batch_matmul", (2, 8, 48, 32))):
        for target, rows, width in ((AVX2, 4, 24), (AVX512, 8, 48)):
            task, cfg, lib, asm = _register_tile(op, shape, layout, target, rows, width)
            assert "vinsertps" not in asm and "vextractps" not in asm, (op, target, layout)
            if target is AVX512 or not host_runs_avx2():
                continue
            accumulators = _ymm_accumulators(asm)
            assert len(accumulators) >= 12, (op, layout, sorted(accumulators))
            _answers_as_numpy(task, cfg, lib, rng)


def test_a_gemv_step_of_three_vectors_stays_whole_vectors():
    """dense_gemv.x86's partial sums three vectors wide (``tile_k[-1]`` = 24 on AVX2, 48 on
    AVX-512, a factor of K = 480) are three vectors, not one of 24 or 48 lanes moved element by
    element (360 ``vinsertps`` on AVX-512 before); the AVX2 kernel's answer is numpy's."""
    wl = Workload.create("dense", (1, 64, 480), layout="NT")
    for target, width in ((AVX2, 24), (AVX512, 48)):
        task = Task(wl, target, template="dense_gemv.x86")
        cfg = task.space.config_from_values({**task.fallback_config().values_dict(),
                                             "tile_k": [-1, 2, width], "rows": 1})
        assert cfg.index is not None and not task.space.violations(cfg), cfg
        lib = task.build(cfg)
        asm = lib.mod.inspect_source("asm")
        assert "vinsertps" not in asm and "vextractps" not in asm, target
        if target is AVX512 or not host_runs_avx2():
            continue
        a, b = random_inputs(wl, np.random.default_rng(6))
        kernel = tvm_ext.Kernel(task, tvm_ext.dispatch.Choice(wl, task.name, cfg, False), lib)
        np.testing.assert_allclose(kernel.run(a, b), reference_matmul(wl, a, b), *tolerance(wl))


@pytest.mark.skipif(not host_runs_avx2(), reason="runs AVX2 code")
def test_rows_whole_in_tiles_but_not_in_tasks_pad_by_few_tiles():
    """Where N is padded (509 columns, tiles 16 wide) and M is a whole number of 6-row tiles
    but not of tasks (32 tiles a task), M is padded by the fewest tiles that cover the crop
    (258 rows: 43 tiles -> 44), not to whole tasks (384 rows: 1.5x the work, dense 258x509x132
    ran 0.296 against 0.223 ms); the answers are numpy's."""
    rng = np.random.default_rng(10)
    for m, padded in ((258, 264), (252, 264), (264, 270)):  # 43, 42 and 44 tiles
        wl = Workload.create("dense", (m, 509, 132), layout="NT")
        task = Task(wl, AVX2, template="dense_pack.x86")
        cfg = task.space.config_from_values({
            **task.fallback_config().values_dict(), "tile_y": [-1, 32, 6],
            "tile_x": [-1, 1, 16], "tile_k": [-1, 4], "tile_inner": [-1, 6]})
        assert cfg.index is not None and not task.space.violations(cfg), cfg
        script = task.instantiate(cfg)["main"].script()
        rows = re.search(r"C_pad_local = T\.sblock_alloc_buffer\(\((\d+), 512\)", script)
        assert rows and int(rows.group(1)) == padded, (m, rows and rows.group(0))
        _answers_as_numpy(task, cfg, task.build(cfg), rng)


@pytest.mark.parametrize("layout", ["NN", "NT"])
def test_tiles_that_overhang_c_write_back_whole_vectors(layout):
    """Register tiles whose columns overhang C (N = 509 or 70, tiles 16 or 32 wide) write back
    whole vector rows wherever all their lanes are in C (``codegen.whole_vectors``); only the
    last panel's go element by element. Before, every element of every tile was stored under
    its own branch: no vector store to C at all (the CPU bench's odd row, dense 257x509x131,
    docs/BENCHMARKS.md). The AVX2 kernels' answers are numpy's (the AVX-512 ones are only
    compiled)."""
    rng = np.random.default_rng(9)
    for op, shape in (("dense", (257, 509, 131)), ("batch_matmul", (2, 50, 70, 56))):
        for target, rows, width, reg in ((AVX2, 6, 16, "ymm"), (AVX512, 4, 32, "zmm")):
            task, cfg, lib, asm = _register_tile(op, shape, layout, target, rows, width, 2)
            # whole vector stores to memory other than the stack (C; the pack's are strided)
            stores = re.findall(rf"vmovups\s+%{reg}\d+, -?\d*\(%r(?!sp)", asm)
            assert len(stores) >= rows * 2, (op, target, layout, len(stores))
            if target is AVX512 or not host_runs_avx2():
                continue
            _answers_as_numpy(task, cfg, lib, rng)


@pytest.mark.parametrize("layout", ["NN", "NT", "TN", "TT"])
def test_xc_walks_several_column_panels_in_one_task(layout):
    """batch_matmul.x86's ``xc``: each parallel task computes ``xc`` column panels of its rows
    (a row tile's panels one after the other: longer runs of C written per row), so the
    parallel loop has ``xc`` times fewer tasks; the answer is unchanged, also where N and M are
    padded up to the register tile."""
    rng = np.random.default_rng(2)
    for shape, xc in (((2, 32, 128, 24), 2), ((2, 32, 128, 24), 4), ((2, 18, 120, 16), 2)):
        wl = Workload.create("batch_matmul", shape, layout=layout)
        task = Task(wl, "llvm", template="batch_matmul.x86")
        values = {**task.fallback_config().values_dict(), "tile_y": [-1, 4],
                  "tile_x": [-1, 16], "tile_k": [-1, 4], "tile_inner": [-1, 4], "yt": 1}
        extents = []
        for x in (1, xc):
            cfg = task.space.config_from_values({**values, "xc": x})
            assert not task.space.violations(cfg), cfg
            script = task.template.make_func(wl, cfg, task.facts, task.target).script()
            extents.append(int(re.search(r"T\.parallel\((\d+)", script).group(1)))
            lib = task.build(cfg)
            a, b = random_inputs(wl, rng)
            kernel = tvm_ext.Kernel(task, tvm_ext.dispatch.Choice(wl, task.name, cfg, False),
                                    lib)
            np.testing.assert_allclose(kernel.run(a, b), reference_matmul(wl, a, b),
                                       *tolerance(wl), err_msg=str(cfg))
        assert extents[0] == xc * extents[1], (shape, xc, extents)


@pytest.mark.parametrize("layout", ["NT", "TT", "NN"])
def test_a_weight_stored_nt_is_packed_by_register_transposes(layout):
    """B stored [N, K] is packed into its [K, xi] panels by lanes x lanes blocks transposed in
    registers (``x86_intrin``: LLVM IR imported into the kernel and inlined), not by a vector
    loop that gathers each vector at a stride of K; B stored [K, N] packs by plain copies. The
    answers match numpy for f32 and f64. So do kernels of the plain matmul compute, packed in
    the schedule (the form of Relax's and MetaSchedule's matmuls, and of shapes the tiles do not
    divide), where B itself is packed (only M padded: 23 rows). Where B is padded (N = 120,
    K = 62) or its K is no whole number of blocks (K = 40 on AVX-512), in either compute: its
    whole blocks by transposes, the rest element by element (``_edge_transposed_pack``)."""
    rng = np.random.default_rng(3)
    for op, shape, dtype in (("dense", (24, 128, 64), "float32"),
                             ("batch_matmul", (2, 24, 64, 48), "float32"),
                             ("dense", (24, 64, 64), "float64"),
                             ("dense", (24, 128, 40), "float32"),
                             ("dense", (23, 128, 64), "float32"),
                             ("batch_matmul", (2, 23, 64, 48), "float32"),
                             ("dense", (23, 120, 64), "float32"),
                             ("dense", (23, 128, 62), "float32")):
        wl = Workload.create(op, shape, dtype, layout=layout)
        task = Task(wl, "llvm", template="dense_pack.x86" if op == "dense" else None)
        cfg = task.fallback_config()
        lanes = task.facts["vector_lanes"]
        want = layout != "NN" and cfg["tile_x"].size[-1] % lanes == 0 and wl.K >= lanes
        funcs = [task.template.make_func(wl, cfg, task.facts, task.target)]
        if op == "dense" and divides(wl, cfg):  # the same config on the plain compute
            sch = s_tir.Schedule(tvm.IRModule({"main": te.create_prim_func(
                matmul_compute(wl))}))
            task.template.schedule(sch, cfg, wl, task.facts)
            funcs.append(sch.mod["main"])
        for func in funcs:
            script = func.script()
            assert (f"tvm_ext_transpose_{lanes}_{dtype}" in script) == want, (op, shape, cfg)
        lib = task.build(cfg)
        asm = lib.mod.inspect_source("asm").splitlines()  # inlined: no call of it is left
        assert not [line for line in asm if "call" in line and "tvm_ext_transpose" in line]
        a, b = random_inputs(wl, rng)
        kernel = tvm_ext.Kernel(task, tvm_ext.dispatch.Choice(wl, task.name, cfg, False), lib)
        np.testing.assert_allclose(kernel.run(a, b), reference_matmul(wl, a, b),
                                   *tolerance(wl), err_msg=str(cfg))


@pytest.mark.parametrize("op,shape,layout,tile_x,split", [
    ("dense", (24, 1100, 64), "NT", [-1, 2, 32], True),  # 1088 columns packed whole + 12
    ("batch_matmul", (2, 24, 1100, 64), "NT", [-1, 2, 32], True),
    ("dense", (24, 1100, 64), "NT", [-1, 1, 16], True),  # 1088 + 12 (a task of one panel)
    ("dense", (24, 1120, 64), "NT", [-1, 2, 32], True),  # whole panels, a ragged last task
    ("dense", (24, 1100, 64), "TT", [-1, 2, 32], True),  # A stored [K, M]
    ("dense", (24, 100, 64), "NT", [-1, 2, 32], False),  # a tail of 36 of 100 columns: padded
    ("dense", (23, 1100, 64), "NT", [-1, 2, 32], False),  # M padded as well: padded
    ("dense", (24, 1100, 64), "NN", [-1, 2, 32], False),  # B stored [K, N]: no transposes
])
def test_a_padded_nt_weight_splits_off_its_last_columns(op, shape, layout, tile_x, split):
    """Where N is no whole number of a task's panels and B is stored [N, K], the plain compute
    (the form of padded shapes, Relax's and MetaSchedule's matmuls) computes the columns the
    tasks cover whole as an unpadded B, packed by register transposes, and the few left over
    (at most 1/16 of N) as vector dot products: GPT-2's LM head (64x50257x768) ran 32.25 ms
    with the whole weight padded and 21.2 ms split (docs/BENCHMARKS.md). Not where M or K is padded
    too, nor where the tail is a large share. Numerics against numpy on the process's cores
    (an early version raced there: its accumulators were written back whole by every row)."""
    wl = Workload.create(op, shape, layout=layout)
    task = Task(wl, "llvm")
    lanes = task.facts["vector_lanes"]
    if tile_x[-1] % lanes:
        pytest.skip(f"{tile_x[-1]}-wide panels are not whole blocks of {lanes} lanes here")
    values = {"tile_x": tile_x} if op == "dense" else {"tile_x": [-1, tile_x[-1]],
                                                        "xc": tile_x[1]}
    cfg = task.config_with(values)
    # the plain compute (a Relax or MetaSchedule matmul; the template's own where the tiles
    # do not divide the shape), scheduled with this config
    sch = s_tir.Schedule(tvm.IRModule({"main": te.create_prim_func(matmul_compute(wl))}))
    task.template.schedule(sch, cfg, wl, task.facts)
    script = sch.mod["main"].script()
    assert ('"C_j1"' in script) == split, cfg
    # B stored [N, K] packs by transposes, split or padded (``_edge_transposed_pack``)
    assert (f"tvm_ext_transpose_{lanes}_float32" in script) == (layout != "NN"), cfg
    if not divides(wl, cfg):  # the template's own kernel is this one
        assert task.template.make_func(wl, cfg, task.facts, task.target).script() == script
    lib = task.compile(tvm.IRModule({"main": task.launch(sch.mod["main"], cfg)}))
    kernel = tvm_ext.Kernel(task, tvm_ext.dispatch.Choice(wl, task.name, cfg, False), lib)
    a, b = random_inputs(wl, np.random.default_rng(5))
    np.testing.assert_allclose(kernel.run(a, b), reference_matmul(wl, a, b), *tolerance(wl),
                               err_msg=str(cfg))


@pytest.mark.parametrize("target", ["llvm", AVX2], ids=["host", "avx2"])
def test_a_padded_nt_weight_packs_its_whole_blocks_by_register_transposes(target):
    """A padded B stored [N, K] (the CPU suite's odd row, 257x509x131: N past whole panels, K
    past whole blocks) packs every lanes x lanes block that lies inside B by a register
    transpose, and element by element only at its edges: the blocks of the last panel partly
    or wholly past N (N = 497: one row of that panel inside B), and the columns past K's whole
    blocks. Before, the whole pack was a scalar load and store per element. Also where the
    last task is ragged (3 panels a task on 32, 4 on 3 or 6: its rows past the panels under a
    predicate), B padded or not.
    Answers are numpy's, for f32 and f64, dense and batched."""
    if target is AVX2 and not host_runs_avx2():
        pytest.skip("the host does not run AVX2 code")
    rng = np.random.default_rng(11)
    for op, shape, dtype, panels in (("dense", (257, 509, 131), "float32", 1),
                                     ("dense", (23, 497, 64), "float32", 1),
                                     ("dense", (23, 509, 67), "float32", 3),
                                     ("dense", (23, 96, 64), "float32", 4),
                                     ("dense", (25, 45, 21), "float64", 1),
                                     ("batch_matmul", (2, 12, 53, 29), "float32", 1)):
        wl = Workload.create(op, shape, dtype, layout="NT")
        task = Task(wl, target)
        lanes = task.facts["vector_lanes"]
        cfg = next(c for c in (task.config_with({"tile_x": [-1, panels, w] if op == "dense"
                                                 else [-1, w]}) for w in (2 * lanes, lanes))
                   if task.space.is_valid(c))
        assert not divides(wl, cfg), cfg
        script = task.template.make_func(wl, cfg, task.facts, task.target).script()
        assert f"tvm_ext_transpose_{lanes}_{dtype}" in script, (shape, cfg)
        assert '_transposed"' in script and '_edge"' in script, (shape, cfg)
        assert ('_rest"' in script) == (wl.K % lanes != 0), (shape, cfg)
        _answers_as_numpy(task, cfg, task.build(cfg), rng)


def test_the_fallback_pads_m_to_the_full_register_tile_where_that_adds_little():
    """AVX2's register tile is 6 rows of two vectors: on M = 1024 (1026 rows, 0.2% more) the
    fallback takes 6 rather than the 4 that divide M, where C fits in the last-level cache (a
    C that outgrows it keeps whole tiles for its non-temporal stores); on M = 128 (132 rows,
    3% more) it keeps 4; AVX-512's 8 rows divide both."""
    cases = ((AVX2, (1024, 3072, 1024), 6), (AVX2, (128, 3072, 768), 4),
             (AVX512, (1024, 3072, 1024), 8))
    for target, shape, rows in cases:
        task = Task(Workload.create("dense", shape, layout="NN"), target,
                    template="dense_pack.x86")
        c_bytes = shape[0] * shape[1] * 4
        want = 4 if rows == 6 and c_bytes > task.facts["l3_bytes"] else rows
        cfg = task.fallback_config()
        assert cfg["tile_y"].size[-1] == cfg["tile_inner"].size[-1] == want, (shape, cfg)
        assert not task.space.violations(cfg), cfg
    bmm = Task(Workload.create("batch_matmul", (24, 2048, 512, 64), layout="NT"), AVX2)
    if 24 * 2048 * 512 * 4 > bmm.facts["l3_bytes"]:  # 100 MB of C: whole tiles, nt_store
        cfg = bmm.fallback_config()
        assert cfg["tile_y"].size[-1] == 4 and cfg.value("nt_store", 0) == 1, cfg


def test_the_fallback_takes_a_padded_m_in_one_task_where_the_panels_give_the_tasks():
    """A padded M (197, a prime) whose column panels give the tasks: all its row tiles in one
    task (``whole_axis``), each panel of B packed once; a lone panel's M still splits."""
    for target in (AVX512, AVX2, "llvm"):
        task = Task(Workload.create("dense", (197, 3072, 768), layout="NN"), target,
                    template="dense_pack.x86")
        cfg = task.fallback_config()
        _, yo, yi = cfg["tile_y"].size
        assert 197 % yi and yo == -(-197 // yi), cfg
        assert not task.space.violations(cfg), cfg
    _answers_as_numpy(task, cfg, task.build(cfg), np.random.default_rng(0))
    lone = Task(Workload.create("dense", (197, 32, 768), layout="NN"), AVX512,
                template="dense_pack.x86").fallback_config()
    assert lone["tile_y"].size[1] * lone["tile_y"].size[2] < 197, lone


def test_a_deep_k_packs_each_panel_of_b_once():
    """Where a column panel of B (K x xi) outgrows a core's L2, the fallback wants one task a
    core, not two: each task packs its panel, and dense 64x64x65536's rows split into two
    tasks packed its 8 MB panels twice (2.1-2.5 ms, now 1.7: ``bench.shapes``). Its 2 panels
    of 32 columns (AVX-512) on 2 cores: one task a panel; a K whose panels fit: 2 tasks a
    panel. AVX2's 4 panels of 16 are 4 tasks either way."""
    for target, k, row_groups in ((AVX512, 65536, 1), (AVX512, 1024, 2), (AVX2, 65536, 1)):
        task = Task(Workload.create("dense", (64, 64, k), layout="NN"), target,
                    template="dense_pack.x86")
        cfg = task.fallback_config()
        assert (k * cfg["tile_x"].size[-1] * 4 > task.facts["l2_bytes"]) == (k == 65536), cfg
        assert 64 // (cfg["tile_y"].size[1] * cfg["tile_y"].size[2]) == row_groups, (k, cfg)
        assert not task.space.violations(cfg), cfg


def test_the_fallback_keeps_whole_tiles_only_for_non_temporal_stores(small_l3):
    """Whether the fallback keeps register tiles that divide M rather than the full one is the
    space's nt_store rule, not a threshold of its own: with C larger than the last-level cache
    (1 KB here), M = 1024 on AVX2 takes 4 rows and nt_store where the space allows it, and
    the full 6 rows where it does not (an epilogue after the matmul: C not written as the tile
    holds it; 6 padded rows ran 2% faster than 4 without non-temporal stores)."""
    for op, shape, layout in (("dense", (1024, 256, 64), "NN"),
                              ("batch_matmul", (2, 1024, 256, 64), "NT")):
        plain = Task(Workload.create(op, shape, layout=layout), AVX2)
        fused = Task(Workload.create(op, shape, layout=layout, epilogue="relu"), AVX2)
        streamed, padded = plain.fallback_config(), fused.fallback_config()
        assert streamed["tile_y"].size[-1] == 4 and streamed.value("nt_store", 0) == 1, streamed
        assert padded["tile_y"].size[-1] == padded["tile_inner"].size[-1] == 6, padded
        assert padded.value("nt_store", 0) == 0, padded
        for task, cfg in ((plain, streamed), (fused, padded)):
            assert not task.space.violations(cfg), cfg


def test_the_fallback_walks_panels_in_runs_where_c_streams_to_memory():
    """batch_matmul.x86's fallback takes ``xc`` panels a task (runs of 256 bytes of C per row)
    where C is larger than the cores' L2 and the tasks stay many, one panel where C fits."""
    big = Task(Workload.create("batch_matmul", (24, 2048, 512, 64), layout="NT"), AVX512)
    small = Task(Workload.create("batch_matmul", (64, 64, 64, 64)), AVX512)
    cfg = big.fallback_config()
    assert cfg["xc"].val * cfg["tile_x"].size[-1] * 4 >= 256 and big.space.is_valid(cfg)
    assert small.fallback_config()["xc"].val == 1


@pytest.fixture
def small_l3(monkeypatch):
    """Tasks made in the test see an L3 of 1 KB and L2s of 256 bytes: their small C counts
    as one that outgrows them (``nt_store`` needs that)."""
    import tvm_ext.task
    facts = tvm_ext.task.hardware_facts
    monkeypatch.setattr(tvm_ext.task, "hardware_facts", lambda *a, **k: {
        **facts(*a, **k), "l3_bytes": 1024, "l2_bytes": 256})


def _host_tile(task, vectors: int):
    """(rows, width) of a register tile ``vectors`` vectors wide on the host's ISA (16 f32
    lanes and 32 registers on AVX-512, 8 and 16 on AVX2), with at most 4 rows and as many as
    its registers hold beside a row of B and a broadcast: the tests below run their kernels,
    so they build for the host, whichever ISA it has."""
    lanes, regs = task.facts["vector_lanes"], task.facts["vector_registers"]
    return min(4, (regs - 1 - vectors) // vectors), vectors * lanes


@pytest.mark.parametrize("op,shape,layout,vectors", [
    # 4 vectors: on AVX-512 4 x 64 f32, a 1024-byte register tile (2 x 32 on AVX2)
    ("batch_matmul", (2, 16, 128, 24), "NT", 4),
    ("batch_matmul", (3, 8, 48, 20), "NN", 1),
    ("dense", (32, 96, 40), "NT", 2),
    ("dense", (16, 64, 24), "TN", 4),
    # 3 vectors (48 lanes on AVX-512, 24 on AVX2): a micro-kernel of unrolled vectors whose
    # write-back is one loop for the intrinsic
    ("batch_matmul", (2, 8, 96, 24), "NT", 3),
    ("dense", (16, 96, 40), "NN", 3),
])
def test_nt_store_writes_c_by_non_temporal_stores(op, shape, layout, vectors, small_l3):
    """``nt_store`` = 1: the register tile accumulates in a local copy (in registers, whatever
    its size: no memset) and each of its rows goes to C by non-temporal stores
    (``vmovntps``), each parallel task ending with an ``sfence``; the answer is unchanged
    (run on the process's cores). ``nt_store`` = 0 builds neither."""
    wl = Workload.create(op, shape, layout=layout)
    template = "batch_matmul.x86" if op == "batch_matmul" else "dense_pack.x86"
    task = Task(wl, "llvm", template=template)
    rows, tile_x = _host_tile(task, vectors)
    tiles = {"tile_y": [-1, rows], "tile_x": [-1, tile_x]} if op == "batch_matmul" else \
        {"tile_y": [-1, 2, rows], "tile_x": [-1, 1, tile_x]}
    values = {**task.fallback_config().values_dict(), **tiles, "tile_k": [-1, 4],
              "tile_inner": [-1, rows]}
    a, b = random_inputs(wl, np.random.default_rng(6))
    for nt in (1, 0):
        cfg = task.space.config_from_values({**values, "nt_store": nt})
        assert not task.space.violations(cfg), cfg
        lib = task.build(cfg)
        asm = lib.mod.inspect_source("asm")
        assert ("vmovntps" in asm) == bool(nt) and ("sfence" in asm) == bool(nt), (cfg, nt)
        assert "memset" not in asm, cfg
        kernel = tvm_ext.Kernel(task, tvm_ext.dispatch.Choice(wl, task.name, cfg, False), lib)
        np.testing.assert_allclose(kernel.run(a, b), reference_matmul(wl, a, b),
                                   *tolerance(wl), err_msg=str(cfg))


def test_relax_build_compiles_our_kernels_as_the_tuner_measured_them(small_l3, tmp_path):
    """A Relax model built by ``tvm_ext.relax.build`` gets our CPU pipeline for its kernels, as
    ``Task.build`` does (the tuner's measurements): a tuned ``nt_store`` record's tasks end
    with an ``sfence`` (its register tile, 1024 bytes on AVX-512, in registers: no memset).
    Before, the model was compiled with TVM's pipeline: its non-temporal stores had no fence
    before the thread pool counted the task done."""
    from tvm.script import relax as R
    import tvm_ext.relax as tr
    wl = Workload.create("batch_matmul", (2, 16, 128, 24), layout="NN")
    bb = relax.BlockBuilder()
    x = relax.Var("x", R.Tensor(wl.a_shape, "float32"))
    w = relax.Var("w", R.Tensor(wl.b_shape, "float32"))
    with bb.function("main", [x, w]):
        with bb.dataflow():
            out = bb.emit_output(relax.op.matmul(x, w))
        bb.emit_func_output(out)
    task = Task(wl, "llvm", template="batch_matmul.x86")
    rows, width = _host_tile(task, 4)  # 4 x 64 f32 on AVX-512: a 1024-byte tile
    cfg = task.space.config_from_values({
        **task.fallback_config().values_dict(), "tile_y": [-1, rows], "tile_x": [-1, width],
        "tile_k": [-1, 4], "tile_inner": [-1, rows], "nt_store": 1})
    assert not task.space.violations(cfg), cfg
    log = tmp_path / "nt.json"
    record.append(log, [record.encode(task.target_str, task.name, wl, cfg,
                                      MeasureResult([1e-4], 0, 0.1, 1.0))])
    with tvm_ext.apply_history_best(str(log)) as ctx:
        ex = tr.build(bb.get(), "llvm", strategy=True)
    assert [(c.workload, c.config) for c in ctx.report.tuned] == [(wl, cfg)]
    asm = "\n".join(_sources(ex.mod, "asm"))
    assert "vmovntps" in asm and "sfence" in asm and "memset" not in asm
    a, b = random_inputs(wl, np.random.default_rng(8))
    got = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(a),
                                                     tvm.runtime.tensor(b)).numpy()
    np.testing.assert_allclose(got, reference_matmul(wl, a, b), *tolerance(wl))


def _sources(module, fmt):
    """The ``fmt`` source of ``module`` and of every module it imports."""
    out = []
    try:
        out.append(module.inspect_source(fmt))
    except Exception:  # noqa: BLE001 (a module without that format)
        pass
    for sub in module.imports:
        out += _sources(sub, fmt)
    return out


def test_nt_store_is_refused_where_c_is_not_written_whole(small_l3, monkeypatch):
    """Non-temporal stores write whole vector rows of C as the tile holds them: a padded M
    (its crop in the write-back) and an epilogue after the matmul break the space's rule,
    named; a config that asks for them anyway fails to build (``InstantiationError`` naming
    nt_store), never a kernel built without the stores and taken for the config. A C that
    fits in the cores' L2 breaks the rule too (it stays there for the next op)."""
    from tvm_ext.task import InstantiationError
    wl = Workload.create("batch_matmul", (2, 18, 64, 24), layout="NT")
    task = Task(wl, "llvm", template="batch_matmul.x86")
    values = {**task.fallback_config().values_dict(), "tile_y": [-1, 4], "tile_x": [-1, 16],
              "tile_k": [-1, 4], "tile_inner": [-1, 4], "nt_store": 1}
    cfg = task.space.config_from_values(values)
    assert any("non-temporal" in v for v in task.space.violations(cfg))
    sub = Task(Workload.create("batch_matmul", (2, 16, 64, 24), layout="NT",
                               epilogue="bias+relu"), "llvm", template="batch_matmul.x86")
    cfg = sub.space.config_from_values(values)
    assert any("non-temporal" in v for v in sub.space.violations(cfg))
    with pytest.raises(InstantiationError, match="nt_store"):
        sub.instantiate(cfg)
    monkeypatch.undo()  # the host's own last-level cache: far more than this C
    fits = Task(Workload.create("batch_matmul", (2, 16, 64, 24), layout="NT"), "llvm",
                template="batch_matmul.x86")
    assert any("larger than the cores' L2" in v
               for v in fits.space.violations(fits.space.config_from_values(values)))


def test_the_fallback_stores_non_temporally_where_c_outgrows_the_last_level_cache():
    """Both x86 GEMM templates' fallbacks take ``nt_store`` where C is larger than the L3 and
    the tiles allow it (the bmm row's 100 MB of C), not where C fits in it; the space offers
    it from the cores' L2s up (the tuner measures it)."""
    big = Task(Workload.create("batch_matmul", (24, 2048, 512, 64), layout="NT"), AVX512)
    dense = Task(Workload.create("dense", (8192, 4096, 256), layout="NT"), AVX512)
    small = Task(Workload.create("batch_matmul", (64, 64, 64, 64)), AVX512)
    for task in (big, dense, small):
        task.facts = {**task.facts, "l3_bytes": 32 << 20}
    for task, nt in ((big, 1), (dense, 1), (small, 0)):
        cfg = task.fallback_config()
        assert cfg["nt_store"].val == nt and task.space.is_valid(cfg), (task, cfg)
    between = Task(Workload.create("batch_matmul", (24, 2048, 512, 64), layout="NT"), AVX512)
    between.facts = {**between.facts, "l3_bytes": 480 << 20}  # (the VM's)
    assert between.facts["l2_bytes"] * 2 < 100 << 20
    cfg = between.fallback_config()
    assert cfg["nt_store"].val == 0 and between.space.is_valid(cfg), cfg
    values = {**cfg.values_dict(), "tile_y": [-1, 8], "tile_inner": [-1, 8], "nt_store": 1}
    assert between.space.is_valid(between.space.config_from_values(values))


def test_a_kernel_looks_its_entry_up_once():
    """``Kernel.__call__`` calls the entry it looked up the first time: a lookup by name is an
    FFI call per call, which the CPU bench's sub-millisecond rows showed as a slower tuned
    kernel than its own fallback (called through a handle)."""
    wl = Workload.create("batch_matmul", (2, 16, 32, 8))
    kernel = tvm_ext.build(wl, "llvm")
    a, b = random_inputs(wl, np.random.default_rng(4))
    want = kernel.run(a, b)

    class NoLookup:
        @property
        def mod(self):
            raise AssertionError("the entry was looked up again")

    kernel.executable = NoLookup()
    np.testing.assert_allclose(kernel.run(a, b), want)


def test_a_panel_one_column_wide_builds():
    """tile_x = [-1, 1, 1]: the pack of a one-column panel has no loop across it, and the
    register transposes took the task's own loop for it (the schedule raised "the loops are
    not in a chain"; the tuner measured such configs as build errors). It builds and is right."""
    wl = Workload.create("dense", (24, 96, 64), layout="NT")
    task = Task(wl, "llvm")
    cfg = task.space.config_from_values({**task.fallback_config().values_dict(),
                                         "tile_x": [-1, 1, 1]})
    assert task.space.is_valid(cfg)
    lib = task.build(cfg)
    a, b = random_inputs(wl, np.random.default_rng(5))
    kernel = tvm_ext.Kernel(task, tvm_ext.dispatch.Choice(wl, task.name, cfg, False), lib)
    np.testing.assert_allclose(kernel.run(a, b), reference_matmul(wl, a, b), *tolerance(wl))


def test_a_ragged_last_task_packs_by_the_edge_pack():
    """N = 96 in tasks of 4 panels of 16 columns: the last task's pack runs under a predicate,
    which the transpose intrinsic cannot take (tensorize failed and such configs were build
    errors). Its blocks inside B pack by the transposes all the same, the rows past N under
    the predicate (``_edge_transposed_pack``), and the answer is right."""
    wl = Workload.create("dense", (24, 96, 64), layout="NT")
    task = Task(wl, "llvm")
    cfg = task.space.config_from_values({"tile_y": [-1, 1, 3], "tile_x": [-1, 4, 16],
                                         "tile_k": [-1, 4], "tile_inner": [-1, 3], "nt_store": 0})
    assert task.space.is_valid(cfg) and wl.N % (4 * 16) and divides(wl, cfg)
    script = task.template.make_func(wl, cfg, task.facts, task.target).script()
    lanes = task.facts["vector_lanes"]
    assert f"tvm_ext_transpose_{lanes}_float32" in script and '"B_packed_edge"' in script
    assert "T.where" in script.split('"B_packed_edge"')[1].split("T.reads")[0]
    lib = task.build(cfg)
    a, b = random_inputs(wl, np.random.default_rng(6))
    kernel = tvm_ext.Kernel(task, tvm_ext.dispatch.Choice(wl, task.name, cfg, False), lib)
    np.testing.assert_allclose(kernel.run(a, b), reference_matmul(wl, a, b), *tolerance(wl))


@pytest.mark.parametrize("op,shape,layout", [
    ("batch_matmul", (32, 7, 7, 7), "NN"), ("dense", (1, 64, 48), "NT"),
    ("dense", (1, 48, 32), "NN")], ids=str)
def test_tiny_products_run_on_the_calling_thread(op, shape, layout):
    """Under ``SERIAL_FLOPS`` no loop is parallel: waking TVM's thread pool cost more than the
    work (batch_matmul 32x7x7x7: 2.7 us in parallel, 0.5 alone; numpy 1.7). A product over
    it keeps its parallel tasks. Right answers."""
    from tvm_ext.ops.x86_gemm import SERIAL_FLOPS
    wl = Workload.create(op, shape, layout=layout)
    task = Task(wl, "llvm")
    assert wl.flop < SERIAL_FLOPS
    assert "T.parallel" not in task.instantiate(task.fallback_config()).script()
    big = Task(Workload.create(op, tuple(4 * d for d in shape), layout=layout), "llvm",
               template=task.name)
    assert big.workload.flop >= SERIAL_FLOPS
    assert "T.parallel" in big.instantiate(big.fallback_config()).script()
    cfg = task.fallback_config()
    a, b = random_inputs(wl, np.random.default_rng(0))
    kernel = tvm_ext.Kernel(task, tvm_ext.dispatch.Choice(wl, task.name, cfg, False),
                            task.build(cfg))
    np.testing.assert_allclose(kernel.run(a, b), reference_matmul(wl, a, b), *tolerance(wl))
