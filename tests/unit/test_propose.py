"""The proposer ranks without measuring: valid configs only, fast, and in a sane order."""
import time

import numpy as np

from tvm_ext.propose import estimate, model_for, propose, scored
from tvm_ext.strategy import all_templates
from tvm_ext.target import cuda_target, parse_target
from tvm_ext.task import Task
from tvm_ext.tuner import make_tuner
from tvm_ext.workload import Workload

CPU = parse_target("llvm -mcpu=znver4")


def test_every_builtin_template_has_a_model():
    assert all(model_for(t.name) is not None for t in all_templates()
               if not t.name.startswith("faulty"))


def test_proposals_are_valid_distinct_and_ranked():
    task = Task(Workload.create("dense", (128, 3072, 768)), CPU)
    ranked = scored(task.space)
    top = propose(task.space, 20)
    assert len(top) == len(set(top)) == 20 and all(task.space.is_valid(i) for i in top)
    # The template's fallback first, then the model's order (ties uncapped),
    fallback = task.fallback_config().index
    assert top[0] == fallback
    order = [i for _, i in ranked if i != fallback]
    assert propose(task.space, 20, per_tie=20)[1:] == order[:19]
    assert propose(task.space, 5, exclude=[fallback], per_tie=20) == order[:5]
    # or at most 5 places for configs the model cannot tell apart (same estimate), the rest
    # in rank order.
    est = {i: t for t, i in ranked}
    for i in top[1:]:
        assert sum(abs(est[j] / est[i] - 1) <= 1e-3 for j in top[1:]) <= 5
    assert set(top[1:]) <= set(order[:200]) and top[1] == order[0]
    times = [t for t, _ in ranked]
    assert times == sorted(times) and np.isfinite(times).all()


def test_large_spaces_are_sampled_within_the_budget():
    task = Task(Workload.create("dense", (1024, 1024, 1024), "float16"), cuda_target("sm_90"),
                template="dense_mma.cuda")
    assert len(task.space) > 100_000
    start = time.time()
    top = propose(task.space, 20)
    assert time.time() - start < 4.0 and len(top) == 20  # about a second, 2 shared cores
    assert all(task.space.is_valid(i) for i in top)


def test_the_model_knows_what_costs():
    """Rows of 3 vectors (LLVM splits such vector types: measured 8-10x slower) and row chunks
    that pack B again for every 2 rows rank after a plain 8 x 16 register tile."""
    task = Task(Workload.create("dense", (128, 3072, 768)), CPU)
    good = task.config_with({"tile_y": [-1, 16, 8], "tile_x": [-1, 4, 16], "tile_k": [-1, 12],
                             "tile_inner": [-1, 4]})
    three = task.config_with({"tile_y": [-1, 16, 8], "tile_x": [-1, 1, 48], "tile_k": [-1, 12],
                              "tile_inner": [-1, 4]})
    repack = task.config_with({"tile_y": [-1, 1, 2], "tile_x": [-1, 4, 16], "tile_k": [-1, 12],
                               "tile_inner": [-1, 2]})
    assert estimate(task.space, good) < estimate(task.space, three)
    assert estimate(task.space, good) < estimate(task.space, repack)


def test_the_gemv_nn_model_ranks_long_runs_of_rows_and_even_tasks_first():
    """dense_gemv_nn.x86 on 1x4096x4096: a task reading 8 tiles of each row (4 KB) before one
    reading 512 B (gemv_nn's sweep on a 2-core Zen 5: a short run of each row ran 1.6x
    slower, docs/BENCHMARKS.md), and on 768 columns 6 even tasks before 3 that put 2 tiles on
    one core and 1 on the other; the estimates finite."""
    task = Task(Workload.create("dense", (1, 4096, 4096), layout="NN"), CPU)
    long = task.config_with({"columns": 128, "tiles": 8, "tile_k": [-1, 8]})
    short = task.config_with({"columns": 128, "tiles": 1, "tile_k": [-1, 8]})
    assert estimate(task.space, long) < estimate(task.space, short) < float("inf")
    task = Task(Workload.create("dense", (1, 768, 3072), layout="NN"), CPU)
    even = task.config_with({"columns": 128, "tiles": 1, "tile_k": [-1, 8]})
    uneven = task.config_with({"columns": 128, "tiles": 2, "tile_k": [-1, 8]})
    assert estimate(task.space, even) < estimate(task.space, uneven)


def test_the_sgemm_model_follows_the_h100_sweeps():
    """*_sgemm.cuda: its first proposal is the config the H100 sweeps ran fastest (the
    fallback's) on the GPU suite's f32 rows, and it orders the pairs those sweeps measured
    far apart (docs/BENCHMARKS.md)."""
    sm90 = cuda_target("sm_90", "h100")

    def knobs(bm, bn, bk, mb, tn=8, serp=1, raster=1):
        return {"block_m": bm, "block_n": bn, "block_k": bk, "min_blocks": mb, "thread_n": tn,
                "serpentine": serp, "raster": raster}
    for op, shape, layout, faster, slower in (
            # 8192^3: two blocks an SM 0.91x, one 0.84x; serpentine 0.91x, row order 0.87x
            ("dense", (8192, 8192, 8192), "NN", knobs(128, 128, 16, 2, raster=8),
             knobs(128, 128, 16, 1, raster=8)),
            ("dense", (8192, 8192, 8192), "NN", knobs(128, 128, 16, 2, raster=8),
             knobs(128, 128, 16, 2, serp=0, raster=8)),
            # 1024^3: 64 x 128 tiles 1.04x, 128 x 128 (64 blocks for 132 SMs) 0.58x
            ("dense", (1024, 1024, 1024), "NN", knobs(64, 128, 16, 1), knobs(128, 128, 16, 1)),
            # the seed bmm (K = 64): 64 x 128 1.25x, 128 x 128 0.89x
            ("batch_matmul", (24, 16384, 512, 64), "NT", knobs(64, 128, 16, 2),
             knobs(128, 128, 16, 1))):
        task = Task(Workload.create(op, shape, layout=layout), sm90, template=f"{op}_sgemm.cuda")
        assert task.space.get(propose(task.space, 1)[0]) == task.fallback_config()
        fast, slow = task.config_with(faster), task.config_with(slower)
        assert estimate(task.space, fast) < estimate(task.space, slow), (shape, slower)


def test_the_sgemm_model_counts_warps_on_the_busiest_scheduler():
    """The f32 block's up projection (512x3072x768, H200 sweep of 2026-11-28 in
    docs/BENCHMARKS.md): 384 tiles of 64 x 64 put 3 blocks on an SM; unsliced, 6 warps go to
    4 schedulers 2, 2, 1, 1 (77.2 us), with K in 2 slices 3 each (59.0 us), in 4 6 each (66.4);
    the model ranks them so, and both sliced ahead of the unsliced 64 x 128 tiles (82.9)."""
    task = Task(Workload.create("dense", (512, 3072, 768), layout="NT"),
                cuda_target("sm_90", "h200"), template="dense_sgemm.cuda")
    base = dict(block_m=64, block_n=64, thread_n=8, block_k=16, raster=4, min_blocks=1,
                serpentine=1, spread=0)

    def cost(**knobs):
        cfg = task.config_with({**base, **knobs})
        assert task.space.is_valid(cfg), task.space.violations(cfg)
        return estimate(task.space, cfg)
    assert cost(slice_k=2) < cost(slice_k=4) < cost(slice_k=1)
    assert cost(slice_k=4) < cost(block_n=128, slice_k=1)


def test_the_sgemm_model_counts_the_ctas_of_a_cluster():
    """``cluster_k`` = 2 (H200 sweeps of 2026-11-28, docs/BENCHMARKS.md): at batch 8 the
    block's down projection (1024x768x3072) and q/k/v/o (1024x768x768) in 64 x 64 tiles ran
    fastest with K over a cluster of 2 and in 2 slices (119.0 and 33.7 us), then without the
    cluster (156.6, 40.9), then in 4 slices without it (163.9, 44.4); the model ranks them so,
    its first proposal is the fallback, and at 512 rows (96 tiles, one an SM either way) it
    keeps 4 slices without a cluster ahead of 2 of a cluster unsliced (82.3 against 107.8)."""
    target = cuda_target("sm_90", "h200")
    for shape, raster in (((1024, 768, 3072), 8), ((1024, 768, 768), 8),
                          ((512, 768, 3072), 1)):
        task = Task(Workload.create("dense", shape, layout="NT"), target,
                    template="dense_sgemm.cuda")
        base = dict(block_m=64, block_n=64, thread_n=8, block_k=16, raster=raster,
                    min_blocks=1, serpentine=1, spread=0)

        def cost(sk, ck):
            cfg = task.config_with({**base, "slice_k": sk, "cluster_k": ck})
            assert task.space.is_valid(cfg), task.space.violations(cfg)
            return estimate(task.space, cfg)
        if shape[0] == 1024:
            assert cost(2, 2) < cost(2, 1) < cost(4, 1), shape
        else:
            assert cost(4, 1) < cost(1, 2)
        assert task.space.get(propose(task.space, 1)[0]) == task.fallback_config()


def test_the_mma_model_ranks_sliced_k_as_the_h100_sweeps_did():
    """dense_mma on 512 x {64,32,16} x 512 f16: one-warp tiles with K sliced 4 ways in steps of
    2 rank ahead of the unsliced configs (chunk 8 and 4, 4 stages) that the H100 sweep of
    2026-11-26 measured slower on every row (docs/BENCHMARKS.md)."""
    target = cuda_target("sm_90", "h100")
    base = {"block_row_warps": 1, "block_col_warps": 1, "warp_row_tiles": 1,
            "warp_col_tiles": 1, "raster": 1, "stage_c": 0, "split_k": 1, "offset": 8, "vec": 8,
            "stages": 4}
    for n in (64, 32, 16):
        task = Task(Workload.create("dense", (512, n, 512), "float16", "float16"), target,
                    template="dense_mma.cuda")

        def cost(slices, chunk):
            cfg = task.space.config_from_values({**base, "slice_k": slices, "chunk": chunk})
            assert task.space.is_valid(cfg), cfg
            return estimate(task.space, cfg)
        assert cost(4, 2) < min(cost(1, 8), cost(1, 4)), n


def test_xgb_starts_from_the_proposal():
    """Beside transferred records too: half of the first plan (then the model's alone)."""
    task = Task(Workload.create("dense", (128, 3072, 768)), CPU)
    tuner = make_tuner("xgb", task.space, seed=0)
    first = tuner.ask(tuner.plan_size)
    assert tuner.n_seeded > 0
    assert first[:tuner.n_seeded] == propose(task.space, tuner.n_seeded)
    warm, space = make_tuner("xgb", task.space, seed=0), task.space
    picks = space.random_valid(np.random.default_rng(0), 16)
    warm.add_transfer([space.features(space.get(i)) for i in picks], range(1, 17), ["o"] * 16)
    first = warm.ask(warm.plan_size)
    n_model = round(warm.plan_size * (1 - warm.random_share))
    assert warm.n_seeded == n_model // 2 and len(set(first)) == warm.plan_size
    assert first[:2 * warm.n_seeded:2] == propose(task.space, warm.n_seeded)
    warm.tell(first, [1e-3] * len(first))
    warm.ask(warm.plan_size)
    assert warm.n_seeded == n_model // 2


def test_proposer_bench_compares_top_k_with_xgb(tmp_path):
    """``python -m tvm_ext.bench.proposer --xgb N``: per workload the rank correlation over the
    random configs, top-k's best, and an N-trial XGB run's best beside it (issue 21's goal is
    top-k at 95% of a 256-trial XGB run); --configs 0 skips the random configs."""
    import json
    from tvm_ext.bench.proposer import main
    out = tmp_path / "rows.json"
    assert main(["--quick", "--only", "dense", "--configs", "6", "--k", "3", "--xgb", "4",
                 "--json", str(out)]) == 0
    row, = json.loads(out.read_text())
    assert row["configs"] == 6 and -1 <= row["spearman"] <= 1 and len(row["topk"]) == 3
    assert row["xgb_trials"] == 4 and row["xgb_best_ms"] > 0
    assert row["topk_vs_xgb"] == row["xgb_best_ms"] / row["topk_best_ms"]
    # --rescore: the current model on those points (here the recorded one: the same ranks)
    from tvm_ext.bench.cpu import CPU_QUICK
    from tvm_ext.bench.proposer import rescore
    from tvm_ext.target import host_cpu_target
    r, = rescore([row], CPU_QUICK, host_cpu_target(), 2)
    assert r["spearman"] == r["recorded"] == row["spearman"] and 0 < r["top_vs_best"] <= 1
    assert main(["--quick", "--only", "dense", "--rescore", str(out)]) == 0
    assert main(["--quick", "--only", "dense", "--configs", "0", "--k", "2",
                 "--json", str(out)]) == 0
    row, = json.loads(out.read_text())
    assert row["spearman"] is None and "xgb_best_ms" not in row


def test_proposer_bench_measures_top_k_and_the_record_in_turn(tmp_path):
    """``--log``: top-k's best and the log's record are measured again, in turn, and their
    ratio is of those times (not of the tuner's least of 20 against one later time)."""
    import json
    from tvm_ext.bench.cpu import CPU_QUICK
    from tvm_ext.bench.proposer import main
    from tvm_ext.measure import MeasureOptions
    from tvm_ext.session import tune_task
    from tvm_ext.target import host_cpu_target
    from tvm_ext.task import Task
    log, out = tmp_path / "log.json", tmp_path / "rows.json"
    tune_task(Task(CPU_QUICK["dense"], host_cpu_target()), log, trials=2, tuner="random",
              measure_options=MeasureOptions(local=True))
    assert main(["--quick", "--only", "dense", "--configs", "0", "--k", "2", "--log", str(log),
                 "--json", str(out)]) == 0
    row, = json.loads(out.read_text())
    assert row["shipped_ms"] > 0 and row["topk_again_ms"] > 0
    assert row["topk_vs_shipped"] == row["shipped_ms"] / row["topk_again_ms"]
