"""TensorCore templates (wmma and mma.sync) on a GPU: numerics for every dtype x layout x
alignment case, split-K and sliced-K, measured in parallel through the isolated pool measurer."""

import pytest

from cuda_helpers import (SLICE_K_CASES, SPLIT_K_CASES, SPLIT_K_SHAPE, TC_ALIGNED, TC_TEMPLATES,
                          TC_UNALIGNED, pool_failures, sample_configs, slice_configs,
                          split_configs, tc_op)
from tvm_ext.target import cuda_target
from tvm_ext.task import Task
from tvm_ext.workload import Workload

def _gpu_cases(template):
    """(template, workload, random configs besides the fallback): 2 dtypes x 4 layouts x
    {aligned, unaligned}, and f16 -> f16 aligned and unaligned."""
    op = tc_op(template)
    cases = []
    for dtype, out in (("float16", "float32"), ("int8", "int32")):
        for layout in ("NN", "NT", "TN", "TT"):
            cases.append((template, Workload.create(op, TC_ALIGNED[op], dtype, out, layout), 1))
            cases.append((template, Workload.create(op, TC_UNALIGNED[op], dtype, out, layout), 0))
    for shapes in (TC_ALIGNED, TC_UNALIGNED):  # f16 out (mma: f32 accumulators, cast at the end)
        cases.append((template, Workload.create(op, shapes[op], "float16", "float16"), 1))
    return cases


def _with_chunk_8(task, configs):
    """``configs`` plus, for the mma templates, the fallback at chunk 8 (K steps of 128 f16 /
    256 int8 elements; added to their spaces after the random samples were chosen) where it
    is valid."""
    if "_mma." not in task.name:
        return configs
    fb = task.fallback_config().values_dict()
    c8 = task.space.config_from_values({**fb, "chunk": 8})
    return configs + [c8] if task.space.is_valid(c8) else configs


@pytest.mark.gpu
@pytest.mark.parametrize("template", TC_TEMPLATES)
def test_numerics_on_gpu_every_dtype_layout_alignment(template):
    """Every case of ``_gpu_cases`` (the fallback, random configs and, for the mma spaces, a
    chunk-8 config) built by pool workers and run in isolated runners, each output compared
    with numpy (a wrong answer is error 5, a crash error 4). Several minutes per template on
    an H100 host: run one template at a time (``-k``) under a 10-minute limit."""
    import tvm
    target = cuda_target("sm_" + tvm.cuda(0).compute_version.replace(".", ""))
    cases = []
    for _, wl, n_random in _gpu_cases(template):
        task = Task(wl, target, template=template)
        cases.append((task, _with_chunk_8(task, sample_configs(task, n_random, 7))))
    n, failures = pool_failures(cases)
    assert n >= 25
    assert not failures, "\n".join(failures)


@pytest.mark.gpu
def test_split_k_numerics_on_gpu():
    """Split configs (fallback tiles with split 2/4/8, and random ones) for f16 -> f16 NT,
    int8 -> int32 NN and f16 -> f32 TN, checked against numpy in the pool measurer."""
    import tvm
    target = cuda_target("sm_" + tvm.cuda(0).compute_version.replace(".", ""))
    tasks = [Task(Workload.create("dense", SPLIT_K_SHAPE, dtype, out, layout=layout), target,
                  template="dense_mma.cuda") for dtype, out, layout in SPLIT_K_CASES]
    n, failures = pool_failures([(task, split_configs(task, 3)) for task in tasks])
    assert n >= 12
    assert not failures, "\n".join(failures)


@pytest.mark.gpu
def test_slice_k_numerics_on_gpu():
    """Sliced-K configs (the fallback's tiles with slice 2 and 4, and random ones) for f16 ->
    f16 NT, int8 -> int32 NN, f16 -> f32 TN and bf16 -> bf16 TT, checked against numpy in
    the pool measurer."""
    import tvm
    target = cuda_target("sm_" + tvm.cuda(0).compute_version.replace(".", ""))
    tasks = [Task(Workload.create("dense", shape, dtype, out, layout=layout), target,
                  template="dense_mma.cuda") for shape, dtype, out, layout in SLICE_K_CASES]
    n, failures = pool_failures([(task, slice_configs(task, 3)) for task in tasks])
    assert n >= 16
    assert not failures, "\n".join(failures)


@pytest.mark.gpu
def test_padded_fallback_numerics_on_gpu():
    """The mma fallback of a padded shape whose 128 x 128 tile would not launch (64 KB staged
    C tile): the tile it takes instead, f16 -> f16 and int8 -> int32, checked against numpy."""
    import tvm
    target = cuda_target("sm_" + tvm.cuda(0).compute_version.replace(".", ""))
    tasks = [Task(Workload("batch_matmul", 8, 3000, 500, 128, dtype=d, out_dtype=o,
                           layout="NT"), target, template="batch_matmul_mma.cuda")
             for d, o in (("float16", "float16"), ("int8", "int32"))]
    n, failures = pool_failures([(t, [t.fallback_config()]) for t in tasks])
    assert n == 2
    assert not failures, "\n".join(failures)
