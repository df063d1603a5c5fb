"""MetaSchedule bridge: ms.tune_tir over our space; our records exported to a MetaSchedule
database that MetaSchedule's own MetaScheduleApplyDatabase applies to a model legalized with our
strategy; and imported back."""
import numpy as np
import pytest
import tvm
from tvm import relax
from tvm.script import relax as R

import tvm_ext
import tvm_ext.metaschedule as tms
import tvm_ext.relax as tr
from tvm_ext.target import host_cpu_target
from tvm_ext.task import Task
from tvm_ext.workload import Workload
from tvm_ext.measure.check import random_inputs, reference_matmul

WL = Workload.create("batch_matmul", (2, 32, 48, 16), layout="NN")


def _model():
    bb = relax.BlockBuilder()
    x = relax.Var("x", R.Tensor(WL.a_shape, "float32"))
    w = relax.Var("w", R.Tensor(WL.b_shape, "float32"))
    with bb.function("main", [x, w]):
        with bb.dataflow():
            y = bb.emit(R.matmul(x, w))
            out = bb.emit_output(R.nn.relu(y))
        bb.emit_func_output(out)
    return bb.get()


def test_tune_tir_export_apply_import(tmp_path):
    from tvm.s_tir import meta_schedule as ms
    target = host_cpu_target()
    task = Task(WL, target)
    db = tms.tune(task, trials=8, work_dir=str(tmp_path / "ms"))
    recs = db.get_all_tuning_records()
    assert len(recs) == 8 and all(r.run_secs for r in recs)
    ours = tms.import_records(db, target)
    assert len(ours) == 8 and all(task.space.is_valid(r.config) for r in ours)
    assert len({r.config for r in ours}) > 1  # the knobs really were searched

    # our best record -> a MetaSchedule database -> MetaSchedule's own apply pass
    assert tms.export_records(ours, str(tmp_path / "export"), target) == 1
    exported = ms.database.JSONDatabase(work_dir=str(tmp_path / "export"))
    legalized = tr.legalize_as_strategy(_model())
    with target, exported:
        applied = relax.transform.MetaScheduleApplyDatabase(enable_warning=True)(legalized)
    scheduled = [gv.name_hint for gv, f in applied.functions.items()
                 if isinstance(f, tvm.tirx.PrimFunc) and f.attrs is not None
                 and f.attrs.get("tirx.is_scheduled", False)]
    assert scheduled == ["tvm_ext_matmul"]
    vm = relax.VirtualMachine(tvm.compile(applied, target), tvm.cpu())
    rng = np.random.default_rng(0)
    a, b = random_inputs(task.workload, rng)
    got = vm["main"](tvm.runtime.tensor(a), tvm.runtime.tensor(b)).numpy()
    np.testing.assert_allclose(got, np.maximum(reference_matmul(WL, a, b), 0), rtol=1e-4,
                               atol=1e-4)


def test_strategy_legalization_is_used_by_build():
    mod = _model()
    legalized = tr.legalize_as_strategy(mod)
    names = [gv.name_hint for gv in legalized.functions]
    assert "tvm_ext_matmul" in names
    with tvm_ext.apply_history_best([]) as ctx:
        ex = tr.build(mod, "llvm", strategy=True)
    assert [c.workload for c in ctx.report.choices] == [WL]
    rng = np.random.default_rng(1)
    a = rng.standard_normal(WL.a_shape).astype("float32")
    b = rng.standard_normal(WL.b_shape).astype("float32")
    got = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(a),
                                                      tvm.runtime.tensor(b)).numpy()
    np.testing.assert_allclose(got, np.maximum(a @ b, 0), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("shapes", [((2, 8, 4), (4, 6)), ((3, 5), (2, 5, 7))])
def test_strategy_falls_back_to_tvm_for_other_matmuls(shapes):
    bb = relax.BlockBuilder()
    x = relax.Var("x", R.Tensor(shapes[0], "float32"))
    w = relax.Var("w", R.Tensor(shapes[1], "float32"))
    with bb.function("main", [x, w]):
        with bb.dataflow():
            out = bb.emit_output(R.matmul(x, w))
        bb.emit_func_output(out)
    legalized = tr.legalize_as_strategy(bb.get())
    assert "tvm_ext_matmul" not in [gv.name_hint for gv in legalized.functions]


def test_tune_default_is_metaschedule_on_its_own_and_reuses_a_finished_run(tmp_path):
    """The bench's MetaSchedule column: ``ms.tune_tir`` with MetaSchedule's default design
    space on the plain matmul; the kernel it picks computes the matmul, and a second call on
    the same work folder compiles the recorded best without tuning again (fewer trials asked
    reuse it too)."""
    import json
    import time
    wl = Workload.create("dense", (8, 32, 16), layout="NT")
    target = host_cpu_target()
    ex, secs = tms.tune_default(wl, target, trials=2, work_dir=str(tmp_path))
    assert secs > 0
    done = json.loads((tmp_path / "tvm_ext_done.json").read_text())
    assert done["trials"] == 2 and done["workload"] == str(wl)
    rng = np.random.default_rng(0)
    a = rng.uniform(-1, 1, wl.a_shape).astype("float32")
    b = rng.uniform(-1, 1, wl.b_shape).astype("float32")
    dev = tvm.cpu()
    out = tvm.runtime.empty(wl.out_shape, "float32", dev)
    ex.mod["main"](tvm.runtime.tensor(a, dev), tvm.runtime.tensor(b, dev), out)
    np.testing.assert_allclose(out.numpy(), a @ b.T, rtol=1e-4, atol=1e-4)
    records = (tmp_path / "database_tuning_record.json").read_text()
    start = time.time()
    _, again = tms.tune_default(wl, target, trials=1, work_dir=str(tmp_path))
    assert again == secs and time.time() - start < 10
    assert (tmp_path / "database_tuning_record.json").read_text() == records


def test_tvmscript_import_memoises_getmodule_of_frames_and_restores_it():
    """``ops.common.fast_tvmscript_import`` (TVM's tensor intrinsics, 54 s -> 7.5 s to import
    on a 2-core Zen 3): inside it ``inspect.getmodule`` of a frame answers as the standard one
    does, asks it once per file, leaves other objects to it, and is restored on the way out,
    an exception too."""
    import inspect
    import sys

    from tvm_ext.ops.common import fast_tvmscript_import
    real = inspect.getmodule
    frame = sys._getframe()
    name = frame.f_code.co_filename
    with fast_tvmscript_import():
        assert inspect.getmodule is not real
        assert inspect.getmodule(frame, name) is real(frame, name) is sys.modules[__name__]
        assert inspect.getmodule(inspect) is inspect and inspect.getmodule(np.sum) is np
    assert inspect.getmodule is real
    asked = []

    def counting(obj, _filename=None):
        asked.append(_filename)
        return real(obj, _filename)
    inspect.getmodule = counting
    try:
        with fast_tvmscript_import():
            got = [inspect.getmodule(frame, "<frozen importlib._bootstrap>") for _ in range(3)]
        assert got == [None] * 3 and asked == ["<frozen importlib._bootstrap>"]
    finally:
        inspect.getmodule = real
    with pytest.raises(RuntimeError):
        with fast_tvmscript_import():
            raise RuntimeError("an import that fails")
    assert inspect.getmodule is real
