"""Helpers of the CUDA template tests: sampled configs, and nvcc on generated source."""
import numpy as np


def random_valid(task, n, seed, keep=None):
    """``n`` distinct valid configs drawn uniformly from the whole space with ``seed`` (those
    that ``keep`` accepts, if given), by the space's rejection sampling: scanning a
    tensor-core space for its valid configs takes a minute, a few draws take milliseconds."""
    picks = task.space.random_valid(np.random.default_rng(seed), n, keep=keep,
                                    max_draws=200000)
    assert len(picks) == n, f"{task.name}: {len(picks)} of {n} valid configs in 200000 draws"
    return [task.config(i) for i in picks]


def sample_configs(task, n, seed):
    """The fallback config, then ``n`` distinct valid configs drawn with ``seed``."""
    return [task.fallback_config()] + random_valid(task, n, seed)


def cuda_source(task, cfg):
    return task.build(cfg).mod.imports[0].inspect_source()


def nvcc_cubin(src, target, arch):
    """Compile generated CUDA source into a cubin with nvcc (no GPU needed)."""
    from tvm.support import nvcc
    with target:
        return nvcc.compile_cuda(src, target_format="cubin", arch=arch, compiler="nvcc")


def ptxas_verbose(src, arch):
    """Compile generated CUDA source with nvcc (``-Xptxas -v``); asserts it compiled to a
    cubin and returns ptxas's report (registers, spills, shared memory)."""
    import os
    import subprocess
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        cu = os.path.join(d, "k.cu")
        with open(cu, "w") as f:
            f.write(src)
        out = subprocess.run(["nvcc", f"-arch={arch}", "-cubin", "-Xptxas", "-v", cu,
                              "-o", cu + ".cubin"], capture_output=True, text=True)
        size = os.path.getsize(cu + ".cubin") if out.returncode == 0 else 0
    assert size > 1000, out.stderr[-500:]
    return out.stderr


def valid_cases(target, template, workloads, configs_of, at_least):
    """[(task, its configs that the space takes)] of ``template`` (named without the op:
    ``sgemm.cuda`` is dense_sgemm.cuda for a dense workload) for each workload;
    ``configs_of(task)`` gives the configs to try, at least ``at_least`` of which must be
    valid."""
    from tvm_ext.task import Task
    cases = []
    for wl in workloads:
        task = Task(wl, target, template=f"{wl.op}_{template}")
        configs = [c for c in configs_of(task) if task.space.is_valid(c)]
        assert len(configs) >= at_least, task.workload
        cases.append((task, configs))
    return cases


def pool_failures(cases, builders_each=3):
    """Build and run each (task, configs) case in pool measurers, which check every output
    against numpy; returns (configs measured, one line per failed config).

    A task has two or three configs here, so one measurer would keep most of its builders idle:
    the cases are dealt to several measurers (``builders_each`` builders and one runner
    each) that work at once. Timing is off the point, so their runners may share the GPU."""
    import os
    from concurrent.futures import ThreadPoolExecutor
    from tvm_ext.measure import PoolMeasurer
    n_pools = max(1, min(len(cases), (os.cpu_count() or 2) // builders_each))

    def check(share):
        lines, n = [], 0
        with PoolMeasurer(n_parallel=builders_each, number=1, repeat=1,
                          build_timeout=180) as measurer:
            for task, configs in share:
                for cfg, res in zip(configs, measurer.measure(task, configs)):
                    n += 1
                    if not res.ok:
                        lines.append(f"{task.workload} {cfg}: error {res.error_no} "
                                     f"{res.error_msg}")
        return n, lines

    with ThreadPoolExecutor(n_pools) as ex:
        done = list(ex.map(check, [cases[i::n_pools] for i in range(n_pools)]))
    return sum(n for n, _ in done), [line for _, lines in done for line in lines]


# ---- the kernels a config really builds: shared memory and launch dimensions ----

def lowered_kernels(task, cfg):
    """{kernel name: device PrimFunc} of a config, lowered by the pipeline ``tvm.compile`` runs
    (with the template's pass options), up to the device code generator: the allocations seen
    here are the ones in the CUDA source, with dynamic shared memory merged into one buffer."""
    import tvm  # noqa: PLC0415
    from tvm import tirx  # noqa: PLC0415
    from tvm.tirx.build import split_host_device_mods  # noqa: PLC0415
    from tvm_ext import codegen  # noqa: PLC0415

    mod = task.instantiate(cfg)
    with codegen.pass_options(task.template.pass_config):
        target = tvm.target.Target(task.target).with_host(tvm.target.Target("llvm"))
        mod = tirx.transform.BindTarget(target)(mod)
        pipeline, _, finalize_device = tirx.get_tir_pipeline("default")
        _, device = split_host_device_mods(pipeline(mod))
        out = {}
        for dev_mod in device.values():
            for gv, func in finalize_device()(dev_mod).functions.items():
                out[gv.name_hint] = func
    return out


def _walk(stmt, visit):
    """Visit every statement of a lowered kernel (TVM 0.27 has no Python stmt visitor)."""
    from tvm import tirx  # noqa: PLC0415
    if stmt is None:
        return
    visit(stmt)
    if isinstance(stmt, tirx.stmt.SeqStmt):
        for s in stmt.seq:
            _walk(s, visit)
    for field in ("body", "then_case", "else_case"):
        child = getattr(stmt, field, None)
        if isinstance(child, tirx.stmt.Stmt):
            _walk(child, visit)


def kernel_resources(func):
    """(static shared bytes, dynamic shared bytes, {thread tag: extent}) of a lowered kernel."""
    from tvm import tirx  # noqa: PLC0415
    shared = {"shared": 0, "shared.dyn": 0}
    launch = {}

    def visit(stmt):
        if isinstance(stmt, tirx.stmt.AllocBuffer) and stmt.buffer.scope() in shared:
            n = 1
            for e in stmt.buffer.shape:
                n *= int(e)
            shared[stmt.buffer.scope()] += n * stmt.buffer.dtype.bits // 8 * \
                stmt.buffer.dtype.lanes
        elif isinstance(stmt, tirx.stmt.AttrStmt) and stmt.attr_key == "thread_extent":
            launch[stmt.node.var.name] = int(stmt.value)

    _walk(func.body, visit)
    return shared["shared"], shared["shared.dyn"], launch


def source_static_shared(src):
    """Bytes of the static ``__shared__`` arrays declared in CUDA source, by element type."""
    import re  # noqa: PLC0415
    sizes = {"float": 4, "half": 2, "nv_bfloat16": 2, "int": 4, "signed char": 1, "char": 1,
             "uchar": 1, "unsigned char": 1, "double": 8, "short": 2, "int64_t": 8}
    # Vector types (TVM declares a buffer of 8-half vectors as uint4).
    for base, size in (("uint", 4), ("int", 4), ("float", 4), ("half", 2)):
        sizes.update({f"{base}{n}": size * n for n in (1, 2, 3, 4)})
    total = 0
    for dtype, count in re.findall(
            r"__shared__\s+(?:alignas\(\d+\)\s+)?([A-Za-z_][\w ]*?)\s+\w+\[(\d+)\]", src):
        total += sizes[dtype.strip()] * int(count)
    return total


# The tensor-core templates and the shapes their codegen and GPU tests share.
TC_TEMPLATES = ["dense_tensorcore.cuda", "dense_mma.cuda", "batch_matmul_tensorcore.cuda",
             "batch_matmul_mma.cuda"]
TC_ALIGNED = {"dense": (128, 64, 128), "batch_matmul": (2, 64, 128, 64)}
TC_UNALIGNED = {"dense": (100, 72, 200), "batch_matmul": (3, 50, 70, 56)}


def tc_op(template):
    return "dense" if template.startswith("dense") else "batch_matmul"

SPLIT_K_SHAPE = (64, 128, 4096)
SPLIT_K_CASES = (("float16", "float16", "NT"), ("int8", "int32", "NN"),
                 ("float16", "float32", "TN"))


SLICE_K_CASES = (((512, 16, 512), "float16", "float16", "NT"),
                 ((512, 64, 512), "int8", "int32", "NN"),
                 ((256, 32, 1024), "float16", "float32", "TN"),
                 ((128, 64, 2048), "bfloat16", "bfloat16", "TT"))


def slice_configs(task, n):
    """The fallback's tiles with slice_k 2 and 4 (stage_c 0, the deepest pipeline the space
    allows) where the space allows them, then ``n`` random valid sliced configs."""
    fb = task.fallback_config().values_dict()
    picks = []
    for s in (2, 4):
        for stages in range(fb["stages"], 0, -1):
            c = task.space.config_from_values({**fb, "slice_k": s, "stage_c": 0,
                                               "stages": stages})
            if task.space.is_valid(c):
                picks.append(c)
                break
    return picks + random_valid(task, n, 11, keep=lambda c: c["slice_k"].val > 1)


def split_configs(task, n):
    """The fallback with split_k 2, 4 and 8 where the space allows it, then ``n`` random valid
    split configs."""
    fb = task.fallback_config().values_dict()
    unsliced = {"slice_k": 1} if "slice_k" in fb else {}
    picks = [task.space.config_from_values({**fb, "split_k": s, **unsliced}) for s in (2, 4, 8)]
    picks = [c for c in picks if task.space.is_valid(c)]
    return picks + random_valid(task, n, 5, keep=lambda c: c["split_k"].val > 1)
