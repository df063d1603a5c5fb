"""The CPU matrix-vector template (issue 25, item 2) and odd shapes on llvm: numerics of the
fallback and of random valid configs over primes, K = 1 and M = 1, and which template the
strategy picks. (Speed: ``python -m tvm_ext.bench --suite cpu``.)"""
import numpy as np
import pytest

from tvm_ext.measure.check import random_inputs, reference_matmul
from tvm_ext.strategy import BUILTIN, templates_for
from tvm_ext.target import host_cpu_target
from tvm_ext.task import Task
from tvm_ext.workload import Workload

CPU = host_cpu_target()


def _check(task, cfg, rng):
    import tvm
    wl = task.workload
    a = rng.standard_normal(wl.a_shape).astype("float32")
    b = rng.standard_normal(wl.b_shape).astype("float32")
    out = tvm.runtime.empty(wl.out_shape, "float32", tvm.cpu())
    task.build(cfg).mod["main"](tvm.runtime.tensor(a), tvm.runtime.tensor(b), out)
    np.testing.assert_allclose(out.numpy(), reference_matmul(wl, a, b), rtol=1e-4,
                               atol=1e-4 * max(1, wl.K) ** 0.5)


def _check_space(task, seed: int, picks: int = 3):
    """``task``'s fallback (in its space, breaking none of its rules) and ``picks`` random valid
    configs give numpy's answer; returns the fallback."""
    cfg = task.fallback_config()
    assert cfg.index is not None and not task.space.violations(cfg), cfg
    rng = np.random.default_rng(seed)
    for c in [cfg] + [task.config(i) for i in task.space.random_valid(
            np.random.default_rng(seed + 1), picks)]:
        _check(task, c, rng)
    return cfg


@pytest.mark.parametrize("shape", [(1, 4096, 1024), (1, 257, 97), (3, 131, 61), (4, 64, 1),
                                   (1, 1, 1), (2, 1000, 1000)], ids=str)
def test_gemv_numerics(shape):
    wl = Workload.create("dense", shape, layout="NT")
    task = Task(wl, CPU, template="dense_gemv.x86")  # (the default for one row: the test below)
    rng = np.random.default_rng(0)
    picks = task.space.random_valid(np.random.default_rng(1), 3)
    for cfg in [task.fallback_config()] + [task.config(i) for i in picks]:
        _check(task, cfg, rng)


@pytest.mark.parametrize("shape", [(1, 4096, 1024), (2, 1000, 1000), (3, 96, 61)], ids=str)
def test_gemv_weight_rows_side_by_side(shape):
    """``rows``: 2, 4 or 8 weight rows streamed side by side (each vector of A loaded once for
    them) give numpy's answer, with whole and partial vectors of partial sums; a task's rows
    that ``rows`` does not divide break the space's rule."""
    wl = Workload.create("dense", shape, layout="NT")
    task = Task(wl, CPU, template="dense_gemv.x86")
    rng = np.random.default_rng(3)
    base = task.fallback_config().values_dict()
    checked = 0
    for rows in (2, 4, 8):
        for kv in sorted({base["tile_k"][-1], 1}):
            values = {**base, "rows": rows, "tile_k": [-1, 1, kv],
                      "tile_x": [-1, 8 if wl.N % 8 == 0 else 4]}
            cfg = task.space.config_from_values(values)
            if cfg.index is None or task.space.violations(cfg):
                continue  # (more partial sums than the vector registers hold)
            assert cfg.value("rows", 1) == rows
            _check(task, cfg, rng)
            checked += 1
    assert checked >= 2, checked  # 2 on AVX2 with M = 2: its 16 registers hold fewer sums
    odd = task.space.config_from_values({**base, "rows": 4, "tile_x": [-1, 2]})
    assert any("rows" in v for v in task.space.violations(odd)), odd


@pytest.mark.parametrize("op,shape,layout", [
    ("dense", (7, 13, 11), "NT"), ("dense", (1, 97, 89), "NN"), ("dense", (5, 3, 1), "TN"),
    ("dense", (31, 37, 41), "TT"), ("batch_matmul", (3, 1, 17, 29), "NT"),
    ("batch_matmul", (2, 19, 1, 23), "NN"), ("batch_matmul", (1, 53, 59, 1), "TN"),
], ids=str)
def test_odd_shapes_every_cpu_template(op, shape, layout):
    """Primes, K = 1, M = 1 and N = 1 on every CPU template that applies."""
    wl = Workload.create(op, shape, layout=layout)
    rng = np.random.default_rng(0)
    for t in [t for t in templates_for(wl, CPU) if t in BUILTIN]:  # not other tests' templates
        task = Task(wl, CPU, template=t.name)
        picks = task.space.random_valid(np.random.default_rng(2), 2)
        for cfg in [task.fallback_config()] + [task.config(i) for i in picks]:
            _check(task, cfg, rng)


def test_strategy_picks_gemv_for_few_rows():
    def names(shape, layout="NT", epilogue=""):
        wl = Workload.create("dense", shape, layout=layout, epilogue=epilogue)
        return [t.name for t in templates_for(wl, CPU)]
    assert names((1, 4096, 4096)) == ["dense_gemv.x86", "dense_pack.x86"]
    assert names((4, 512, 512)) == ["dense_gemv.x86", "dense_pack.x86"]
    assert names((5, 512, 512)) == ["dense_pack.x86"]  # more rows: the packed GEMM
    assert names((1, 512, 512), "NN") == ["dense_gemv_nn.x86", "dense_pack.x86"]  # [K, N]
    assert names((1, 8, 512), "NN") == ["dense_pack.x86"]  # N under a vector
    assert names((7, 512, 512), "NN") == ["dense_gemv_nn.x86", "dense_pack.x86"]
    assert names((9, 512, 512), "NN") == ["dense_pack.x86"]
    assert names((1, 512, 512), epilogue="bias+relu") == ["dense_pack.x86"]


@pytest.mark.parametrize("op,shape,layout", [
    ("dense", (37, 61, 17), "NT"), ("dense", (12, 48, 16), "NN"),
    ("batch_matmul", (2, 23, 41, 9), "TN"),
], ids=str)
def test_padded_tails(op, shape, layout):
    """Tiles that do not divide M or N (primes) pad them inside the kernel; tasks of several
    register tiles that do not divide them leave a ragged last task. Both, alone and together,
    over the packed GEMMs' spaces: right answers, nothing written past the output."""
    from tvm_ext.ops.x86_gemm import divides
    wl = Workload.create(op, shape, layout=layout)
    task = Task(wl, CPU, template="dense_pack.x86" if op == "dense" else "batch_matmul.x86")
    rng = np.random.default_rng(0)
    valid = task.space.random_valid(np.random.default_rng(3), 400)
    padded = [i for i in valid if not divides(wl, task.config(i))]
    ragged = [i for i in valid if divides(wl, task.config(i))
              and (wl.M % np.prod(task.config(i)["tile_y"].size[1:])
                   or wl.N % np.prod(task.config(i)["tile_x"].size[1:]))]
    assert len(padded) >= 3 and (len(ragged) >= 2 or op == "batch_matmul")
    for i in padded[:4] + ragged[:2]:
        _check(task, task.config(i), rng)


def test_a_prime_shape_gets_whole_vectors_and_no_guard_in_the_micro_kernel():
    """257 x 509 x 131 (the CPU suite's odd row): the fallback pads to whole vectors and
    register rows (it was 1 x 1 tiles, 0.04x numpy), and no guard depends on the micro-kernel's
    loops (k, the register tile's rows and vector): the padding's guards are the crop's, in the
    write-back, and a ragged last task's depends on the task's loops only."""
    import re
    wl = Workload.create("dense", (257, 509, 131), layout="NT")
    task = Task(wl, CPU, template="dense_pack.x86")
    cfg = task.fallback_config()
    lanes = task.facts["vector_lanes"]
    assert cfg["tile_x"].size[-1] % lanes == 0 and cfg["tile_y"].size[-1] >= 4
    assert task.space.is_valid(cfg.index)
    lines = task.instantiate(cfg).script().splitlines()
    at = next(n for n, line in enumerate(lines) if 'T.sblock("C_update")' in line)
    start = max(n for n in range(at) if re.match(r"\s*for k_0 in", lines[n]))
    inner = {m.group(1) for line in lines[start:at]
             for m in [re.match(r"\s*for (\w+) in", line)] if m}
    assert "k_0" in inner and len(inner) >= 3
    where = [line for line in lines[at:at + 8] if "T.where" in line]
    assert all(not (set(re.findall(r"\w+", w)) & inner) for w in where), where
    _check(task, cfg, np.random.default_rng(0))


@pytest.mark.parametrize("op,shape,layout", [
    ("dense", (197, 64, 64), "NT"), ("dense", (197, 64, 64), "TN"),
    ("batch_matmul", (3, 37, 64, 62), "NN"), ("dense", (37, 61, 17), "NT"),
], ids=str)
def test_a_padded_m_reads_the_last_row_of_a_not_a_guarded_zero(op, shape, layout):
    """Rows of A past M (M padded up to the register tile) are read as A's last row, a load
    with no guard (a branch per broadcast in the micro-kernel: the CPU bench's odd_m row);
    their rows of C are cropped. A padded K (17 -> 18 here) keeps
    its guarded zeros. The answers match numpy."""
    wl = Workload.create(op, shape, layout=layout)
    task = Task(wl, CPU)
    cfg = task.fallback_config()
    assert wl.M % cfg["tile_y"].size[-1], cfg  # M is padded
    update = [line for line in task.instantiate(cfg).script().splitlines()
              if "C_pad_local[" in line and " + " in line]
    assert update and all(f"T.min(v_i, {wl.M - 1})" in line for line in update), update
    k_padded = wl.K % cfg["tile_k"].size[-1] != 0
    assert all(("if_then_else" in line) == k_padded for line in update), update
    assert all(f"v_i < {wl.M}" not in line for line in update), update
    _check(task, cfg, np.random.default_rng(0))


@pytest.mark.parametrize("shape,large", [((37, 61, 17), False), ((37, 61, 1024), True)],
                         ids=str)
def test_a_padded_n_packs_the_last_column_of_b_without_a_guard(shape, large):
    """Columns of B past N (a weight stored [N, K] padded to the panels) are packed as B's
    last column, a load with no guard (a branch per element of the pack: the CPU bench's
    lm_head row, GPT-2's vocabulary). The blocks inside B go by register transposes
    (``_edge_transposed_pack``), whether a task's panel fits in L1 or not (``large``: it did
    not, and such a pack ran across the panel's width); the elements at the edges by the
    clamped load, in B's order. The answers match numpy."""
    wl = Workload.create("dense", shape, layout="NT")
    task = Task(wl, CPU)
    cfg = task.fallback_config()
    xi = cfg["tile_x"].size[-1]
    assert wl.N % xi and (wl.K * xi * 4 > task.facts["l1d_bytes"]) == large
    script = task.instantiate(cfg).script()
    assert f"tvm_ext_transpose_{task.facts['vector_lanes']}_float32" in script
    pack = [line.strip() for line in script.splitlines()
            if line.strip().startswith("B_pad_global[")]
    assert pack and all("T.min(" in line and f", {wl.N - 1})" in line for line in pack), pack
    assert all(f"< {wl.N}" not in line for line in pack), pack
    # B's order (row, k), not the panels' (panel, k, column in the panel)
    assert all(f"v0 * {xi} + v2" not in line for line in pack), pack
    _check(task, cfg, np.random.default_rng(0))


def test_gemv_rows_side_by_side_fit_the_registers_with_the_weight_from_memory():
    """On AVX2 (16 vector registers), 8 weight rows side by side with one vector of partial
    sums each fit: 8 sums and A's vector, each weight vector an FMA operand from memory (every
    FMA of the kernel reads one); with two vectors each (18 registers) they break the rule."""
    import re

    import tvm
    avx2 = tvm.target.Target({"kind": "llvm", "mcpu": "znver3", "num-cores": 2})
    task = Task(Workload.create("dense", (1, 512, 256), layout="NT"), avx2,
                template="dense_gemv.x86")
    fits = task.space.config_from_values({"tile_x": [-1, 64], "tile_k": [-1, 2, 8], "rows": 8})
    assert fits.index is not None and not task.space.violations(fits), fits
    spills = task.space.config_from_values({"tile_x": [-1, 64], "tile_k": [-1, 2, 16],
                                             "rows": 8})
    assert task.space.violations(spills), spills
    asm = task.build(fits).mod.inspect_source("asm")
    fmas = re.findall(r"vfmadd\d+ps\s+(\S+)", asm)
    assert fmas and all("(" in operand for operand in fmas), fmas[:4]


def test_gemv_partial_sums_stay_in_registers_with_several_rows_of_a():
    """M rows of A x ``rows`` weight rows of partial sums, each one contiguous vector (the
    rfactor's lanes innermost, [m, n, kv]): with the lanes outermost ([kv, m, n]) a vector of
    them was strided, and on AVX-512 LLVM kept 2 x 8 of them in memory, gathered and scattered
    at every step (2x4096x4096 ran 5.3 ms, 1.15 now; numpy 5.0: ``bench.shapes``). No gathers,
    no scatters; the lanes of each output summed in a row; numpy's answer."""
    import re
    wl = Workload.create("dense", (2, 256, 512), layout="NT")
    task = Task(wl, CPU, template="dense_gemv.x86")
    cfg = task.fallback_config()
    kv = cfg["tile_k"].size[-1]
    assert cfg.value("rows", 1) >= 4, cfg  # 8 on AVX-512, 4 on AVX2's 16 registers
    script = task.instantiate(cfg).script()
    assert re.search(rf'C_rf_local = T\.sblock_alloc_buffer\(\(2, 256, {kv}\)', script), script
    asm = task.build(cfg).mod.inspect_source("asm")
    assert "vfmadd" in asm and not re.search(r"vgather|vscatter|vpgather|vpscatter", asm)
    _check(task, cfg, np.random.default_rng(4))


@pytest.mark.parametrize("shape", [(1, 4096, 4093), (2, 4093, 1024), (3, 1031, 1021)], ids=str)
def test_gemv_prime_sizes_take_whole_vectors_and_tasks(shape):
    """A prime K is summed in whole vectors up to its last multiple of the vector, the rest
    (fewer than a vector) after them, and a prime N is padded up to tasks of a power of two
    rows (rows past N read the weight's last row, cropped): before, the space offered only
    their divisors, and 1x4096x4093 summed one float at a time (4.1 ms, numpy 0.8; now 1.07,
    numpy 1.16: ``bench.shapes``).
    The fallback and random configs of the space (now with tiles that do not divide) give
    numpy's answer."""
    wl = Workload.create("dense", shape, layout="NT")
    task = Task(wl, CPU, template="dense_gemv.x86")
    lanes = task.facts["vector_lanes"]
    cfg = task.fallback_config()
    assert cfg.index is not None and not task.space.violations(cfg), cfg
    xi, kv = cfg["tile_x"].size[-1], cfg["tile_k"].size[-1]
    assert kv == lanes and cfg.value("rows", 1) >= 4, cfg
    script = task.instantiate(cfg).script()
    assert ('T.sblock("C_tail")' in script) == bool(wl.K % kv)
    assert ('T.sblock("C_pad")' in script) == bool(wl.N % xi)
    assert wl.N % 64 == 0 or xi & (xi - 1) == 0, cfg  # a prime N: tasks of 2^n rows
    rng = np.random.default_rng(5)
    picks = task.space.random_valid(np.random.default_rng(6), 30)
    ragged = [i for i in picks if wl.K % task.config(i)["tile_k"].size[-1]
              or wl.N % task.config(i)["tile_x"].size[-1]]
    assert len(ragged) >= 3, len(ragged)
    for c in [cfg] + [task.config(i) for i in ragged[:3]]:
        _check(task, c, rng)


@pytest.mark.parametrize("shape", [(1, 768, 3072), (4, 1024, 256), (1, 1000, 1000),
                                   (3, 4093, 61), (2, 16, 1), (1, 97, 7), (6, 300, 100),
                                   (7, 64, 33)], ids=str)
def test_gemv_nn_numerics(shape):
    """dense_gemv_nn.x86 (a weight stored [K, N]): the fallback and random configs over tiles
    that divide N and ones that leave its last columns to the narrow pass (whole vectors of
    them in parallel, or fewer than a vector), prime K and N, K = 1."""
    wl = Workload.create("dense", shape, layout="NN")
    task = Task(wl, CPU)
    assert task.name == "dense_gemv_nn.x86"
    _check_space(task, 7, 4)


def test_gemv_nn_reads_rows_of_the_weight_across_the_tasks_tiles():
    """Each task reads ku rows of the weight at a time across all its tiles (k outside the
    tiles, the tiles' sums in L1 between), each tile's sums in registers: its FMAs take
    the weight from memory and no sum is gathered. The fallback shares the tiles evenly among
    the cores: 768 columns of 128 on 2 cores are 6 tasks of one tile (3 of 2 tiles ran one
    core's 2 against the other's 1)."""
    import re

    import tvm
    wl = Workload.create("dense", (1, 4096, 1024), layout="NN")
    task = Task(wl, CPU)
    cfg = task.fallback_config()
    assert cfg.value("tiles", 1) > 1, cfg
    script = task.instantiate(cfg).script()
    loops = [v for vs in re.findall(r"for ([\w, ]+) in", script) for v in vs.split(", ")]
    assert loops.index("k_0") < loops.index("j_1") < loops.index("k_1"), loops
    asm = task.build(cfg).mod.inspect_source("asm")
    fmas = re.findall(r"vfmadd\d+ps\s+(\S+)", asm)
    assert fmas and not re.search(r"vgather|vscatter", asm)
    assert sum("(" in f for f in fmas) * 2 >= len(fmas), fmas[:8]
    two = tvm.target.Target({"kind": "llvm", "mcpu": "znver5", "num-cores": 2})
    even = Task(Workload.create("dense", (1, 768, 3072), layout="NN"), two,
                template="dense_gemv_nn.x86").fallback_config()
    tiles = 768 // even.value("columns", 64)
    assert tiles % (even.value("tiles", 1) * 2) == 0, even
    _check(task, cfg, np.random.default_rng(9))


@pytest.mark.parametrize("shape,layout", [
    ((16, 1, 1, 4096), "NT"), ((3, 4, 131, 61), "NT"), ((5, 2, 37, 300), "NT"),
    ((2, 3, 17, 1), "NT"), ((16, 1, 1, 4096), "NN"), ((3, 2, 1, 61), "NN")], ids=str)
def test_batched_gemv_numerics(shape, layout):
    """batch_matmul_gemv.x86 (dense_gemv.x86 on each batch): the fallback (in the space, whose
    tasks count every batch's) and random configs, prime N and K, K = 1, a B stored [K, 1]."""
    wl = Workload.create("batch_matmul", shape, layout=layout)
    _check_space(Task(wl, CPU, template="batch_matmul_gemv.x86"), 11)


@pytest.mark.parametrize("shape,layout", [
    ((8192, 1, 1024), "NT"), ((1000, 3, 777), "NT"), ((77, 1, 333), "NT"), ((37, 4, 61), "NT"),
    ((5, 2, 1), "NT"), ((8192, 1, 1024), "NN"), ((77, 1, 333), "NN"), ((1000, 3, 777), "NN"),
    ((37, 4, 61), "NN")], ids=str)
def test_gemv_t_numerics(shape, layout):
    """dense_gemv_t.x86 (few columns: C^T = B A^T by dense_gemv.x86's kernel, written back
    transposed): the fallback and random configs, prime M and K, K = 1, a B stored [K, N]
    (one column read in place, 2-4 copied out as rows first). Its kernel reads A in place: no
    block packs it, and its FMAs are vector ones, nothing gathered."""
    import re
    wl = Workload.create("dense", shape, layout=layout)
    task = Task(wl, CPU, template="dense_gemv_t.x86")
    cfg = _check_space(task, 13)
    assert "pack" not in task.instantiate(cfg).script()
    if wl.K % task.facts["vector_lanes"] == 0:  # vector FMAs, nothing gathered (the pass
        # over K's rest, where there is one, loads a float of each row a step: gathers)
        asm = task.build(cfg).mod.inspect_source("asm")
        assert re.search(r"vfmadd\d+ps", asm) and not re.search(r"vgather|vscatter", asm)


def test_gemv_is_the_default_where_it_wins():
    """The default template by shape (``Template.rank``): the gemv templates for one row (or
    column) and for 2-4 over a K of 8 vectors or more, the packed kernels for 2-4 over a
    shorter K (each output's lanes summed at its end cost as much as its few products);
    every one of them still applies (tunable, records kept)."""
    from tvm_ext.target import hardware_facts
    short, long_ = 4 * hardware_facts(CPU)["vector_lanes"], 8 * hardware_facts(CPU)["vector_lanes"]

    def names(op, shape):
        return [t.name for t in templates_for(Workload.create(op, shape, layout="NT"), CPU)]
    assert names("dense", (1, 4096, short)) == ["dense_gemv.x86", "dense_pack.x86"]
    assert names("dense", (4, 4096, short)) == ["dense_pack.x86", "dense_gemv.x86"]
    assert names("dense", (4, 4096, long_)) == ["dense_gemv.x86", "dense_pack.x86"]
    assert names("dense", (8192, 1, 1024)) == ["dense_gemv_t.x86", "dense_pack.x86"]
    assert names("dense", (1024, 4, short)) == ["dense_pack.x86", "dense_gemv_t.x86"]
    assert names("dense", (1024, 5, 1024)) == ["dense_pack.x86"]  # more columns
    assert names("dense", (4, 4, 1024)) == ["dense_gemv.x86", "dense_pack.x86"]
    assert names("batch_matmul", (16, 1, 1, 4096)) == ["batch_matmul_gemv.x86",
                                                       "batch_matmul.x86"]
    assert names("batch_matmul", (12, 4, 197, short)) == ["batch_matmul.x86",
                                                          "batch_matmul_gemv.x86"]
    # B stored [K, N]: its one column is a row of K contiguous floats (the gemv's), more
    # columns are dense_gemv_nn.x86's tiles (a batch's too)
    wl = Workload.create("dense", (8192, 1, 1024), layout="NN")
    assert [t.name for t in templates_for(wl, CPU)] == ["dense_gemv_t.x86", "dense_pack.x86"]
    wl = Workload.create("batch_matmul", (16, 1, 1, 4096), layout="NN")
    assert [t.name for t in templates_for(wl, CPU)][0] == "batch_matmul_gemv.x86"
    wl = Workload.create("batch_matmul", (32, 1, 128, 4096), layout="NN")
    assert [t.name for t in templates_for(wl, CPU)] == ["batch_matmul_gemv_nn.x86",
                                                        "batch_matmul.x86"]
    # a few columns of a B stored [K, N]: copied out as rows, the gemv on C^T (over a short K
    # below the packed kernel, as for rows); a transposed A of many rows is the packed kernel's
    for n, k, want in ((3, long_, ["dense_gemv_t.x86", "dense_pack.x86"]),
                       (3, short, ["dense_pack.x86", "dense_gemv_t.x86"])):
        wl = Workload.create("dense", (1000, n, k), layout="NN")
        assert [t.name for t in templates_for(wl, CPU)] == want, (n, k)
    wl = Workload.create("dense", (1000, 1, 1024), layout="TT")
    assert [t.name for t in templates_for(wl, CPU)] == ["dense_pack.x86"]


@pytest.mark.parametrize("shape", [(32, 1, 128, 1024), (3, 5, 100, 77), (2, 8, 16, 1),
                                   (4, 3, 97, 61), (12, 1, 64, 197)], ids=str)
def test_batched_gemv_nn_numerics(shape):
    """batch_matmul_gemv_nn.x86 (dense_gemv_nn.x86 on each batch): the fallback and random
    configs, N's last columns in the narrow pass, prime sizes, K = 1."""
    wl = Workload.create("batch_matmul", shape, layout="NN")
    _check_space(Task(wl, CPU, template="batch_matmul_gemv_nn.x86"), 15)


@pytest.mark.parametrize("op,shape,layout,template", [
    ("dense", (2, 1024, 1024), "NT", "dense_gemv.x86"),
    ("batch_matmul", (4, 2, 128, 256), "NT", "batch_matmul_gemv.x86"),
    ("dense", (1, 768, 256), "NN", "dense_gemv_nn.x86"),
    ("batch_matmul", (4, 1, 128, 256), "NN", "batch_matmul_gemv_nn.x86")], ids=str)
def test_gemv_schedules_take_the_plain_int64_matmul(op, shape, layout, template):
    """The gemv templates' schedules on the plain matmul of int64 sizes (MetaSchedule's design
    space, a Relax model's legalized matmul: ``metaschedule.plain_module``) build and give
    numpy's answer, the batched ones' batch axis beside their tasks."""
    import tvm
    from tvm import s_tir

    from tvm_ext.metaschedule import plain_module
    wl = Workload.create(op, shape, layout=layout)
    task = Task(wl, CPU, template=template)
    sch = s_tir.Schedule(plain_module(wl))
    task.template.schedule(sch, task.fallback_config(), wl, task.facts)
    func = tvm.compile(sch.mod, target=CPU)["main"]
    a, b = random_inputs(wl, np.random.default_rng(17))
    out = tvm.runtime.empty(wl.out_shape, "float32", tvm.cpu())
    func(tvm.runtime.tensor(a), tvm.runtime.tensor(b), out)
    np.testing.assert_allclose(out.numpy(), reference_matmul(wl, a, b), rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("op,shape,layout,template", [
    ("dense", (1, 97, 89), "TN", "dense_gemv_nn.x86"),
    ("dense", (1, 61, 300), "TT", "dense_gemv.x86"),
    ("batch_matmul", (3, 1, 37, 61), "TN", "batch_matmul_gemv_nn.x86"),
    ("batch_matmul", (3, 1, 17, 29), "TT", "batch_matmul_gemv.x86")], ids=str)
def test_one_row_of_a_stored_transposed_is_a_gemv(op, shape, layout, template):
    """One row of A stored [K, 1] (numpy's column vector: x.T @ W) is K contiguous floats, as
    an untransposed row: the gemv templates are the default, give numpy's answer (fallback and
    random configs); two rows stored so are the packed kernel's."""
    wl = Workload.create(op, shape, layout=layout)
    task = Task(wl, CPU)
    assert task.name == template
    rng = np.random.default_rng(19)
    picks = task.space.random_valid(np.random.default_rng(20), 2)
    for c in [task.fallback_config()] + [task.config(i) for i in picks]:
        _check(task, c, rng)
    two = Workload.create(op, shape[:-3] + (2,) + shape[-2:], layout=layout)
    assert [t.name for t in templates_for(two, CPU)] == [
        "dense_pack.x86" if op == "dense" else "batch_matmul.x86"]


def test_a_relax_model_takes_the_gemv_templates():
    """A value head (dense NT, one column), x @ W of 3 columns and a batch of one-row products
    (P . V at decoding) in a Relax function: gemv templates, with and without the strategy form;
    numpy's answer."""
    from tvm import relax
    from tvm.script import relax as R

    import tvm
    from tvm_ext.dispatch import apply_history_best
    from tvm_ext.relax import build
    bb = relax.BlockBuilder()
    x = relax.Var("x", R.Tensor((64, 256), "float32"))
    head = relax.Var("head", R.Tensor((1, 256), "float32"))
    w3 = relax.Var("w3", R.Tensor((256, 3), "float32"))
    p = relax.Var("p", R.Tensor((8, 1, 256), "float32"))
    v = relax.Var("v", R.Tensor((8, 256, 64), "float32"))
    with bb.function("main", [x, head, w3, p, v]):
        with bb.dataflow():
            h = bb.emit(R.matmul(x, R.permute_dims(head)))
            c = bb.emit(R.matmul(x, w3))
            o = bb.emit(R.matmul(p, v))
            out = bb.emit_output(relax.Tuple([h, c, o]))
        bb.emit_func_output(out)
    rng = np.random.default_rng(21)
    args = [rng.uniform(-1, 1, s).astype("float32") for s in
            ((64, 256), (1, 256), (256, 3), (8, 1, 256), (8, 256, 64))]
    want = [args[0] @ args[1].T, args[0] @ args[2], args[3] @ args[4]]
    for strategy in (False, True):
        with apply_history_best([]) as ctx:
            ex = build(bb.get(), CPU, strategy=strategy)
        assert sorted(c.template for c in ctx.report.choices) == [
            "batch_matmul_gemv_nn.x86", "dense_gemv_t.x86", "dense_gemv_t.x86"], strategy
        got = relax.VirtualMachine(ex, tvm.cpu())["main"](*map(tvm.runtime.tensor, args))
        for g, w in zip(got, want):
            np.testing.assert_allclose(g.numpy(), w, rtol=1e-4, atol=1e-4)
