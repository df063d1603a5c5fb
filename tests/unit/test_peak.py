"""The FMA-peak bench (issue 25, item 4): a register-only FMA kernel, its sum checked."""
import pytest

from tvm_ext.bench import cpu, peak
from tvm_ext.workload import Workload


@pytest.fixture(autouse=True)
def no_idle_time(monkeypatch):
    """These tests check what the bench builds, checks and samples, not how fast: no idle
    time before each sample (``cpu.IDLE_S``)."""
    monkeypatch.setattr(cpu, "IDLE_S", 0.0)


def test_peak_kernel_sums_right_and_reports_a_rate():
    r = peak.measure(steps=20_000, repeat=2)  # checks the kernel's sum itself
    assert r["threads"] >= 1 and r["chains"] == 12 and r["lanes"] >= 4
    assert r["gflops"] >= r["gflops_median"] > 0


def test_peak_samples_last_long_enough_whatever_repeat_says(monkeypatch):
    """``--repeat 1`` once took the peak from a single 0.4 ms call (144 GFLOP/s where 7 gave
    193): the peak takes ``PEAK_SAMPLES`` samples at least, each of back-to-back calls that
    last ``PEAK_SAMPLE_S`` (``bench.common.time_calls``, the benches' own sampler)."""
    seen, real = [], peak.time_calls
    monkeypatch.setattr(peak, "time_calls", lambda call, repeat, min_s:
                        seen.append((repeat, min_s)) or real(call, repeat=1, min_s=0.0))
    peak.measure(steps=2_000, repeat=1)
    assert seen == [(peak.PEAK_SAMPLES, peak.PEAK_SAMPLE_S)] and peak.PEAK_SAMPLES >= 5
    assert peak.PEAK_SAMPLE_S >= 0.01


def test_peak_refuses_nonsense(capsys):
    import pytest
    with pytest.raises(SystemExit):
        peak.main(["--steps", "0"])
    assert "--steps and --repeat must be >= 1" in capsys.readouterr().err


def test_peak_builds_for_another_llvm_target_and_refuses_a_gpu_one(capsys):
    """``--target``: the peak kernel of that target's vectors (AVX2 code: 8 lanes, 12 chains
    in 16 registers), whatever the host's are; a CUDA target is refused before anything runs."""
    import pytest
    import tvm
    from cpu_helpers import host_runs_avx2
    if not host_runs_avx2():
        pytest.skip("runs AVX2 code")
    avx2 = tvm.target.Target({"kind": "llvm", "mcpu": "znver3", "num-cores": 2})
    r = peak.measure(steps=20_000, repeat=2, target=avx2)
    assert (r["lanes"], r["chains"]) == (8, 12) and r["gflops"] > 0
    with pytest.raises(SystemExit):
        peak.main(["--target", '{"kind": "cuda", "arch": "sm_90"}'])
    assert "the peak and its rows build for llvm" in capsys.readouterr().err


def test_peak_kernel_keeps_every_operand_in_registers():
    """The peak kernel's loop on AVX2 (16 vector registers): 12 accumulators, the invariant
    vector and the broadcasts in registers, nothing spilled to the stack and reloaded at each
    step (its first version, 8 invariant vectors beside 8 accumulators, did: Zen 3 measured
    112 GFLOP/s with it and 180-192 without, while the GEMM rows ran at 150). Built only, so
    it checks any host."""
    import re

    import tvm
    avx2 = tvm.target.Target({"kind": "llvm", "mcpu": "znver3", "num-cores": 2})
    mod, flops = peak.peak_kernel(2, 8, 12, 1000, avx2)
    asm = mod.mod.inspect_source("asm").splitlines()
    fmas = [i for i, line in enumerate(asm) if "vfmadd" in line]
    loop = asm[fmas[0]:fmas[-1] + 1]
    assert len(fmas) >= 12 and flops == 2.0 * 2 * 12 * 8 * 1000
    assert not [line for line in loop if "rsp" in line]  # no spill, no reload
    # every FMA's operands are registers: the broadcast, the invariant vector, its accumulator
    assert all(re.search(r"vfmadd231ps\s+%ymm\d+, %ymm\d+, %ymm\d+", asm[i]) for i in fmas)


def test_ladder_times_each_rows_micro_kernel_and_its_kernel_after_checking_them():
    """``--ladder``: per row, its config's micro-kernel with A and B in L1 and with A read from
    memory, and the row's kernel, each checked against numpy (``ladder`` asserts them) and
    timed in turn; the tile, K step and tile_inner in the labels are the config's (here the
    fallback's): the micro-kernel takes its rows through the K steps as the row's kernel does;
    a batched row, and an M that the register tile does not divide (A's whole tiles read)."""
    from tvm_ext.dispatch import apply_history_best, choose
    from tvm_ext.target import host_cpu_target
    suite = {"d": Workload.create("dense", (50, 64, 40), layout="NN"),
             "b": Workload.create("batch_matmul", (2, 32, 48, 24))}
    rows, no_peak = peak.ladder(suite, None, repeat=1)
    want = []
    for key, wl in suite.items():
        with apply_history_best([]):
            task, choice = choose(wl, host_cpu_target())
        r, w, ki, inner = (choice.config[n].size[-1] for n in (
            "tile_y", "tile_x", "tile_k", "tile_inner"))  # rows through the K steps at a time
        tile = f"{r} x {w}, tile_k {ki}, inner {inner}"
        want += [(key, f"{tile}: A and B in L1"),
                 (key, f"{tile}: A's {wl.M // r * r} x {wl.K} from memory"),
                 (key, f"the row's kernel ({task.name} fallback)")]
    assert [(key, label) for key, label, _ in rows] == want
    assert all(best >= med > 0 for _, _, (med, best) in rows) and no_peak is None


def test_prepacked_rows_time_both_kernels_after_checking_them():
    from tvm_ext.workload import Workload
    wl = Workload.create("dense", (32, 128, 64), layout="NT")
    rows, no_peak = peak.prepacked_rows(wl, None, repeat=1)  # asserts the kernels agree
    assert [label.split(", ", 1)[1] for label, _ in rows] == [
        "packed at every call (fallback)", "weight packed at build time, no prefetch (fallback)",
        "weight packed at build time (fallback)",
        "dense_swap.x86, weight read in place (fallback)"]
    rows, _ = peak.prepacked_rows(wl.with_(N=48), None, repeat=1)  # N < 2 M: no dense_swap
    assert len(rows) == 3 and all("dense_swap" not in label for label, _ in rows)
    assert all(ms > 0 for _, ms in rows) and no_peak is None


def test_linear_rows_time_a_relax_linear_built_both_ways_after_checking_it():
    from tvm_ext.workload import Workload
    rows = peak.linear_rows(Workload.create("dense", (32, 80, 16), layout="NT"), None, repeat=1)
    # (each checked): the weight read in place at every call, or prepacked by dense_pack.x86;
    # divided by a tensor (fused, not named): packed at every call, or split off and prepacked
    assert list(rows) == ["not prepacked (dense_swap.x86)",
                          "prepacked at build time (dense_pack.x86)",
                          "/ D, fused, packed each call (dense_pack.x86)",
                          "/ D, split, prepacked (dense_pack.x86)"]
    assert all(0 < best <= med for med, best in rows.values())


def test_store_floor_writes_the_whole_output_of_a_batched_shape():
    """The stores' floor writes every element of the output (``store_floor`` checks them all
    and raises otherwise), batched and not, and reports a time."""
    from tvm_ext.workload import Workload
    for wl in (Workload.create("batch_matmul", (2, 64, 128, 8)),
               Workload.create("dense", (96, 40, 8))):  # 40: not a multiple of the lanes
        assert peak.store_floor(wl, repeat=2) > 0


def test_gemv_rows_time_numpy_ours_and_the_read_floor_after_checking_them():
    """``--gemv``: numpy's product, our kernel (its weight on huge pages and on TVM's own
    memory) and the weight-reading floor, each checked
    (``gemv_rows`` asserts our output and the floor's row sums) and timed in turn; a K that is
    not a multiple of 4 vectors reads the weight by scalar sums."""
    from tvm_ext.workload import Workload
    for k in (256, 100):
        wl = Workload.create("dense", (1, 96, k), layout="NT")
        rows = peak.gemv_rows(wl, None, repeat=2, back_to_back=k == 256)
        labels = list(rows)
        assert labels[:2] == ["numpy", "ours (dense_gemv.x86, fallback)"]
        assert labels[2] in ("ours, weight on 4 KB pages", "ours, weight on huge pages")
        assert labels[3:len(labels) // (2 if k == 256 else 1)] == ["reading the weight alone"]
        if k == 256:  # each row again, timed call by call after calls of its own
            assert labels[4:] == [f"{label}, back to back" for label in labels[:4]]
        assert all(0 < best <= med for med, best in rows.values())


def test_warm_rows_time_each_call_alone_after_calls_of_its_own():
    """``warm_rows``: per call, ``warm`` untimed calls then ``timed`` timed one by one, each
    label in turn, ``rounds`` times; (median, best) in ms of the timed ones."""
    import time
    made = []

    def call(label, s):
        def fn():
            made.append(label)
            time.sleep(s)
        return fn

    rows = peak.warm_rows({"a": call("a", 0.001), "b": call("b", 0.003)}, warm=3, timed=4,
                          rounds=2)
    assert made == (["a"] * 7 + ["b"] * 7) * 2
    assert 1.0 <= rows["a"][1] <= rows["a"][0] < rows["b"][0] and rows["b"][1] >= 3.0


def test_weight_sweep_times_the_rows_config_on_each_width_after_checking_it():
    """``--weights``: the row's config (here its fallback) on the same M and K with N columns,
    both kernels checked against numpy (``weight_sweep`` asserts them) and timed in turn; a
    width that the config's panels do not divide is built with zero columns in its last
    panel (100), as a Relax model's constant weight is prepacked."""
    from tvm_ext.workload import Workload
    wl = Workload.create("dense", (64, 128, 64), layout="NT")
    rows, no_peak = peak.weight_sweep(wl, None, ns=(64, 256, 100), repeat=2)
    assert [(n, label) for n, _, label, _ in rows] == [
        (n, label) for n in (64, 256, 100)
        for label in ("packed at every call", "weight packed at build time")]
    assert [mb for _, mb, _, _ in rows] == [n * 64 * 4 / 1e6 for n in (64, 256, 100)
                                            for _ in range(2)]
    assert all(0 < best <= med for _, _, _, (med, best) in rows) and no_peak is None


def test_gemm_rows_give_ours_and_numpys_share_of_the_peak_sampled_in_turn(monkeypatch, capsys):
    """--gemm prints each large row's share of the peak, ours and numpy's, against the peak
    kernel sampled in turn with the row (``row.peak_gflops``): the median by the peak's median,
    the best sample by the peak's best; numpy's share is what the host leaves reachable on the
    same shape. The peak kernel is what ``run_cpu`` samples beside the row."""
    from tvm_ext.bench.common import Row
    monkeypatch.setattr(peak, "measure", lambda *a, **k: {
        "threads": 2, "lanes": 8, "chains": 12, "gflops": 300.0, "gflops_median": 290.0})
    kernel = (lambda: None, 1e9)
    monkeypatch.setattr(peak, "peak_call", lambda *a, **k: (*kernel, {}))
    row = Row("gemm1 1024x1024x2048", 2e9, 25.0, "", 20.0, "", "dense_pack.x86 tuned",
              ref_best_ms=12.5, ours_best_ms=16.0)  # numpy 80 GFLOP/s (best 160), ours 100 (125)
    row.peak_gflops = (200.0, 250.0)
    given = {}
    monkeypatch.setattr(cpu, "run_cpu", lambda *a, **k: given.update(k) or [row])
    monkeypatch.setattr(peak, "prepacked_rows", lambda *a, **k: ([], None))
    monkeypatch.setattr(peak, "store_floor", lambda *a, **k: 1.0)
    assert peak.main(["--gemm"]) == 0
    assert given["peak"] == kernel
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("gemm1"))
    assert "100.0 GFLOP/s   50.0% of the peak (its best sample 50.0%" in line, line
    assert "numpy 40.0% (best 64.0%); the peak 200.0 (best 250.0)" in line, line


def test_the_peak_kernel_is_sampled_in_turn_with_every_comparison():
    """``peak=(call, flops)``: the rows of ``run_cpu`` carry the peak kernel's rates from their
    own turns, and ``ladder``, ``prepacked_rows`` and ``weight_sweep`` return them beside
    their rows (which stay the same rows), the rates those of ``flops`` per call."""
    from tvm_ext.bench.cpu import CPU_QUICK, PEAK, run_cpu
    call, flops, info = peak.peak_call(steps=2_000)
    assert flops == 2.0 * info["threads"] * info["chains"] * info["lanes"] * 2_000
    given = (call, flops)
    rows = run_cpu({k: CPU_QUICK[k] for k in ("dense", "chain_mm1", "chain_mm2")}, log=None,
                   repeat=1, peak=given)
    assert len(rows) == 2 and all(best >= med > 0 for med, best in
                                  (r.peak_gflops for r in rows))
    wl = Workload.create("dense", (64, 128, 64), layout="NT")
    for rows, rates, n in (peak.ladder({"d": CPU_QUICK["dense"]}, None, repeat=1, peak=given)
                           + (3,),
                           peak.prepacked_rows(wl, None, repeat=1, peak=given) + (4,),
                           peak.weight_sweep(wl, None, ns=(64,), repeat=1, peak=given) + (2,)):
        assert len(rows) == n and not any(PEAK in str(row) for row in rows)
        assert rates[1] >= rates[0] > 0
