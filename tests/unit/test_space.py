"""ConfigSpace: AutoTVM's split enumeration and index order, filters, constraints, files."""
import json
import time

import numpy as np
import pytest

from tvm_ext.errors import SpaceError
from tvm_ext.space import (AnnotateSpace, ConfigEntity, ConfigSpace, ReorderSpace, SplitEntity,
                           SplitSpace, build_space, eval_expr, get_factors, load_space_spec)


def test_factors_and_split_enumeration_match_autotvm():
    assert get_factors(12) == [1, 2, 3, 4, 6, 12]
    s = SplitSpace("t", 8, num_outputs=2)
    assert [e.size for e in s.entities] == [[-1, 1], [-1, 2], [-1, 4], [-1, 8]]
    # 3-way: AutoTVM's DFS puts the first chosen factor innermost and varies the last fastest.
    s3 = SplitSpace("t", 4, num_outputs=3)
    assert [e.size for e in s3.entities] == [
        [-1, 1, 1], [-1, 2, 1], [-1, 4, 1], [-1, 1, 2], [-1, 2, 2], [-1, 1, 4]]


def test_split_policies():
    assert len(SplitSpace("t", 12, policy="power2")) == 4  # 1,2,4,8 (tails allowed)
    verbose = {tuple(e.size) for e in SplitSpace("t", 12, policy="verbose").entities}
    assert (-1, 8) in verbose and (-1, 6) in verbose
    assert [e.size for e in SplitSpace("t", 64, max_factor=4).entities] == \
        [[-1, 1], [-1, 2], [-1, 4]]
    cand = SplitSpace("t", 64, policy="candidate", num_outputs=2, candidate=[[4, 16], [8, 8]])
    assert [e.size for e in cand.entities] == [[4, 16], [8, 8]]
    filt = SplitSpace("t", 64, filter=lambda e: e.size[-1] >= 16)
    assert [e.size[-1] for e in filt.entities] == [16, 32, 64]
    with pytest.raises(SpaceError, match="unknown policy"):
        SplitSpace("t", 8, policy="bogus")


def test_mixed_radix_index_first_knob_least_significant():
    cs = ConfigSpace()
    cs.define_split("a", 8)          # 4 entities
    cs.define_knob("b", [0, 16, 64])  # 3
    cs.define_reorder("c", 2, "all")  # 2
    assert len(cs) == 24
    for idx in range(len(cs)):
        cfg = cs.get(idx)
        assert cs.index_of(cfg) == idx
        assert cs.index_from_digits(cs.digits(idx)) == idx
    cfg = cs.get(1 + 4 * 2 + 12 * 1)
    assert cfg["a"].size == [-1, 2] and cfg["b"].val == 64 and cfg["c"].perm == [1, 0]


def test_reorder_and_annotate_policies():
    assert len(ReorderSpace("r", 3, "all")) == 6
    assert [e.perm for e in ReorderSpace("r", 4, "interval_all", interval=(1, 3))] == \
        [[0, 1, 2, 3], [0, 2, 1, 3]]
    ann = AnnotateSpace("a", 2, "try_unroll_vec")
    assert all(e.anns.count("vec") <= 1 for e in ann.entities)
    assert len(ann) == 8  # 9 combinations minus vec+vec


def test_constraints_prune_and_name_facts():
    cs = ConfigSpace({"vector_lanes": 8})
    cs.define_split("x", 64)
    cs.define_split("y", 16)
    cs.add_constraint("x[-1] * y[-1] <= 4 * vector_lanes", "register tile")
    valid = list(cs.valid_indices())
    assert valid and len(valid) < len(cs)
    for i in valid:
        c = cs.get(i)
        assert c["x"].size[-1] * c["y"].size[-1] <= 32
    bad = next(i for i in range(len(cs)) if i not in valid)
    assert cs.violations(cs.get(bad)) == ["register tile"]


def test_expressions_are_sandboxed():
    assert eval_expr("ceildiv(a, 16) + max(b) ", {"a": 17, "b": [1, 5]}) == 7
    with pytest.raises(SpaceError, match="unsupported syntax"):
        eval_expr("__import__('os').system('true')", {})
    with pytest.raises(SpaceError, match="unknown name"):
        eval_expr("foo + 1", {})


def test_features_and_json_roundtrip():
    cs = ConfigSpace()
    cs.define_split("a", 32, num_outputs=3)
    cs.define_knob("u", [0, 512])
    cs.define_annotate("an", 2, "try_unroll")
    cfg = cs.get(len(cs) - 1)
    fea = cs.features(cfg)
    assert fea.dtype == np.float32 and fea[:3].prod() == 32  # resolved split sizes
    back = ConfigEntity.from_json_dict(json.loads(json.dumps(cfg.to_json_dict())))
    assert back == cfg and cs.index_of(back) == cfg.index


def test_extra_inner_sizes_follow_the_policys_splits():
    plain = [e.size for e in SplitSpace("t", 64, num_outputs=3, policy="verbose",
                                        max_factor=16).entities]
    more = SplitSpace("t", 64, num_outputs=3, policy="verbose", extra_inner=[6, 4, 99],
                      max_factor=16)
    sizes = [e.size for e in more.entities]
    assert sizes[:len(plain)] == plain  # every split of the policy keeps its place
    extra = sizes[len(plain):]
    # 6 (no divisor of 64) innermost, the policy's factors outside it, a tail allowed
    # (verbose); 4 is a factor already, 99 over max_factor and the length
    assert extra and all(s[-1] == 6 and s[1] * 6 <= 64 for s in extra)
    assert [-1, 8, 6] in extra and [-1, 16, 6] not in extra
    # a policy without tails takes no size that does not divide the length
    assert len(SplitSpace("t", 64, policy="factors", extra_inner=[6])) == \
        len(SplitSpace("t", 64, policy="factors"))
    # in a space file: an expression over facts (the register tile's rows of an AVX2 target)
    knob = {"name": "y", "kind": "split", "axis": "M", "policy": "verbose",
            "extra_inner": "[(vector_registers - 3) // 2]"}
    space = build_space({"knobs": [knob]}, {"M": 1024}, {"vector_registers": 16})
    assert [-1, 6] in [e.size for e in space.knobs["y"].entities]
    with pytest.raises(SpaceError, match="extra_inner must be a list of integers"):
        build_space({"knobs": [{**knob, "extra_inner": "vector_registers"}]}, {"M": 8},
                    {"vector_registers": 16})
    # never dropped in silence: a candidate list is the whole set, one output has no inner
    for bad in ({"policy": "candidate", "candidate": [[-1, 8]]}, {"num_outputs": 1}):
        with pytest.raises(SpaceError, match="split 'y': extra_inner needs a policy that makes "
                                             "the splits and 2 or more outputs"):
            build_space({"knobs": [{**knob, **bad}]}, {"M": 1024}, {"vector_registers": 16})


def test_whole_axis_adds_the_split_that_covers_a_padded_axis():
    """``whole_axis`` (3 outputs): after the other splits, for each innermost size that does not
    divide the axis, [-1, ceil(length / size), size]: 171 tiles of 6 rows on M = 1024."""
    kw = dict(num_outputs=3, policy="verbose", extra_inner=[6, 9])
    plain = [e.size for e in SplitSpace("t", 1024, **kw).entities]
    whole = SplitSpace("t", 1024, whole_axis=True, **kw)
    assert [e.size for e in whole.entities] == plain + [[-1, 171, 6], [-1, 114, 9]]
    assert whole.entities[-2].resolved(1024) == [1, 171, 6]
    with pytest.raises(SpaceError, match="split 't': whole_axis needs 3 outputs, got 2"):
        SplitSpace("t", 1024, policy="verbose", extra_inner=[6], whole_axis=True)
    from tvm_ext.task import Task  # dense_pack.x86's rows on AVX2 (6 rows a register tile)
    from tvm_ext.workload import Workload
    task = Task(Workload.create("dense", (1024, 1024, 2048), layout="NN"),
                {"kind": "llvm", "mcpu": "znver3", "num-cores": 2}, template="dense_pack.x86")
    cfg = task.space.config_from_values({**task.fallback_config().values_dict(),
                                         "tile_y": [-1, 171, 6], "tile_inner": [-1, 6]})
    assert cfg.index is not None and not task.space.violations(cfg)


def test_x86_spaces_offer_register_tiles_sized_from_the_registers():
    """6 rows of two AVX2 vectors (BLIS's 6 x 16; 12 accumulators, two B vectors and a
    broadcast in 16 registers) are in the space of a power-of-two M, on both templates."""
    facts = {"vector_lanes": 8, "vector_registers": 16, "num_cores": 2, "dtype_bytes": 4,
             "l2_bytes": 1 << 20, "epilogue": "", "dtype": "float32", "out_dtype": "float32",
             "symbolic": 0, "followed": 0}
    for template, axes in (("batch_matmul.x86", {"B": 2, "M": 1024, "N": 256, "K": 64}),
                           ("dense_pack.x86", {"B": 1, "M": 1024, "N": 256, "K": 64})):
        space = build_space(load_space_spec(template), axes, facts)
        tiles = {(space.get(i)["tile_y"].size[-1], space.get(i)["tile_x"].size[-1],
                  space.get(i)["tile_inner"].size[-1]) for i in space.valid_indices()}
        assert (6, 16, 6) in tiles, template
        assert (14, 8, 14) in tiles and (7, 16, 7) not in tiles  # 14 x 1 vector; 7 not offered
        assert all(y * (x // 8) + x // 8 + 1 <= 16 for y, x, _ in tiles)  # no spills


def test_shipped_space_files_build():
    spec = load_space_spec("batch_matmul.x86")
    facts = {"vector_lanes": 16, "vector_registers": 32, "num_cores": 2, "dtype_bytes": 4,
             "l2_bytes": 1 << 20, "epilogue": "", "dtype": "float32", "out_dtype": "float32",
             "symbolic": 0, "followed": 0}  # as Task.space's
    space = build_space(spec, {"B": 4, "M": 256, "N": 256, "K": 256}, facts)
    assert list(space.knobs)[:3] == ["tile_y", "tile_x", "tile_k"]  # TVM <= 0.19's knobs first
    assert 32 <= sum(1 for _ in space.valid_indices()) < len(space)


def test_user_space_file_narrows(tmp_path):
    spec = load_space_spec("batch_matmul.x86")
    spec["knobs"][2]["max_factor"] = 2
    path = tmp_path / "narrow.json"
    path.write_text(json.dumps(spec))
    facts = {"vector_lanes": 16, "vector_registers": 32}
    wide = build_space(load_space_spec("batch_matmul.x86"), {"B": 1, "M": 64, "N": 64, "K": 64},
                       facts)
    narrow = build_space(load_space_spec("batch_matmul.x86", str(path)),
                         {"B": 1, "M": 64, "N": 64, "K": 64}, facts)
    assert len(narrow.knobs["tile_k"]) == 2 < len(wide.knobs["tile_k"])


def test_bad_space_files(tmp_path):
    with pytest.raises(SpaceError, match="cannot read space file"):
        load_space_spec("batch_matmul.x86", str(tmp_path / "missing.json"))
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(SpaceError, match="not valid JSON"):
        load_space_spec("batch_matmul.x86", str(bad))
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"template": "dense_pack.x86", "knobs": []}))
    with pytest.raises(SpaceError, match="is for template"):
        load_space_spec("batch_matmul.x86", str(other))
    with pytest.raises(SpaceError, match="names axis"):
        build_space({"knobs": [{"name": "t", "kind": "split", "axis": "Q"}]}, {"M": 4})


def test_split_entity_resolves_inferred_outer():
    assert SplitEntity([-1, 4, 8]).resolved(100) == [4, 4, 8]


def _let_space(lets, constraints=()):
    return build_space({"knobs": [{"name": "rows", "kind": "knob", "candidates": [1, 2, 4]},
                                  {"name": "cols", "kind": "knob", "candidates": [8, 16]}],
                        "let": lets, "constraints": list(constraints)},
                       {"M": 64}, {"lanes": 8})


def test_let_term_is_visible_to_constraints():
    space = _let_space({"tile": "rows * cols"},
                       [{"expr": "tile <= 32", "why": "tile fits"}])
    valid = {(c["rows"].val, c["cols"].val) for c in map(space.get, space.valid_indices())}
    assert valid == {(1, 8), (1, 16), (2, 8), (2, 16), (4, 8)}
    big = space.config_from_values({"rows": 4, "cols": 16}, fallback=False)
    assert space.violations(big) == ["tile fits"] and space.names_of(big)["tile"] == 64


def test_let_term_uses_an_earlier_one_and_facts():
    space = _let_space({"tile": "rows * cols", "vectors": "ceildiv(tile, lanes)",
                        "pad": "M % tile"}, ["vectors >= 2 and pad == 0"])
    names = space.names_of(space.config_from_values({"rows": 2, "cols": 8}, fallback=False))
    assert (names["tile"], names["vectors"], names["pad"]) == (16, 2, 0)
    assert len(list(space.valid_indices())) == 5  # all but rows=1, cols=8 (one vector)
    assert "let vectors = ceildiv(tile, lanes)" in space.describe()
    # Task.complete asks for the names before it has every knob: terms over a missing one wait
    partial = space.names_of(ConfigEntity(None, {"rows": space.entity("rows", 2)}))
    assert partial["rows"] == 2 and "tile" not in partial and "vectors" not in partial


def test_let_term_errors_name_the_term():
    with pytest.raises(SpaceError, match=r"unknown name 'colz' in let 'tile'"):
        _let_space({"tile": "rows * colz"})
    # a let sees only the let terms before it
    with pytest.raises(SpaceError, match=r"unknown name 'area' in let 'tile'"):
        _let_space({"tile": "area // 2", "area": "rows * cols"})
    with pytest.raises(SpaceError, match=r"let 'tile': cannot parse"):
        _let_space({"tile": "rows *"})
    with pytest.raises(SpaceError, match=r"let 'rows' has the name of a knob"):
        _let_space({"rows": "cols * 2"})
    with pytest.raises(SpaceError, match=r"let 'half'"):
        _let_space({"half": "M // (rows - rows)"}).is_valid(0)
    with pytest.raises(SpaceError, match=r"'let' must be an object"):
        _let_space(["tile = rows * cols"])


def test_expression_work_is_bounded():
    # A space file is data: an expression may not compute (or allocate) without bound.
    t0 = time.time()
    for expr, msg in (("2 ** 999999999", "2 ** 999999999 has more than 1024 bits"),
                      ("(2 ** 1000) * (2 ** 1000)", "an integer of 2001 bits"),
                      ("prod([2 ** 600, 2 ** 600])", "an integer of 1201 bits"),
                      ("[1, 2] * 10 ** 9", "a sequence repeated to 2000000000 items"),
                      ("'ab' * 10 ** 9", "a sequence repeated to 2000000000 items")):
        with pytest.raises(SpaceError) as err:
            eval_expr(expr, {})
        assert str(err.value).startswith(f"expression '{expr}' is too large to evaluate: {msg}")
    assert time.time() - t0 < 1
    assert eval_expr("2 ** 1023 > 0 and prod([2, 3, 4]) == 24 and 3 ** 600 > 0", {})
    assert eval_expr("2 ** -1", {}) == 0.5 and eval_expr("[0] * 4", {}) == [0, 0, 0, 0]


def test_filters_that_empty_a_knob_name_it():
    axes = {"M": 16}
    with pytest.raises(SpaceError, match=r"knob 'yt': filter 'value > 8' leaves none of its "
                                         r"3 candidates \(1, 2, 4\)"):
        build_space({"knobs": [{"name": "yt", "kind": "knob", "candidates": [1, 2, 4],
                                "filter": "value > 8"}]}, axes)
    with pytest.raises(SpaceError, match=r"split 't' of 16 \(factors, 2 outputs\): filter "
                                         r"'size\[-1\] > 16' leaves none of its 5 splits"):
        build_space({"knobs": [{"name": "t", "kind": "split", "axis": "M",
                                "filter": "size[-1] > 16"}]}, axes)
    with pytest.raises(SpaceError, match=r"knob 't' would enumerate 1853020188851841 "
                                         r"candidates \(3 factors of 4 in 33 outputs\)"):
        build_space({"knobs": [{"name": "t", "kind": "split", "axis": "M",
                                "num_outputs": 33}]}, {"M": 4})
    with pytest.raises(SpaceError, match=r"knob 'r' would enumerate 479001600 candidates"):
        ReorderSpace("r", 12)


def test_space_build_time_is_bounded():
    spec = load_space_spec("batch_matmul.x86")
    axes = {"B": 1, "M": 64, "N": 64, "K": 64}
    facts = {"vector_lanes": 16, "vector_registers": 32}
    assert len(build_space(spec, axes, facts)) > 1
    with pytest.raises(SpaceError, match=r"building the space of 'batch_matmul.x86' took more "
                                         r"than 0s \(up to knob 'tile_y'\)"):
        build_space(spec, axes, facts, time_limit=0)


def test_compiled_expressions_agree_with_the_evaluator_on_every_shipped_space():
    """Constraints and let terms run as compiled functions (``expr._compiled``); the tree
    evaluator defines them. Over random configs of every template that serves the CPU and
    GPU suites, both give the same let values and the same verdicts."""
    import numpy as np
    from tvm_ext.bench.cpu import CPU_SUITE
    from tvm_ext.bench.gpu import GPU_SUITE
    from tvm_ext.space.expr import _evaluate
    from tvm_ext.strategy import templates_for
    from tvm_ext.target import cuda_target, host_cpu_target
    from tvm_ext.task import Task
    checked = set()
    for suite, target in ((CPU_SUITE, host_cpu_target()), (GPU_SUITE, cuda_target("sm_90"))):
        for wl in suite.values():
            for template in templates_for(wl, target):
                if not template.module.startswith("tvm_ext."):  # a test's own (faulty_ops)
                    continue
                space = Task(wl, target, template=template.name).space
                rng = np.random.default_rng(0)
                for index in rng.integers(len(space), size=40):
                    config = space.get(int(index))
                    names = space.names_of(config, lets=False)
                    for name, expr in space.lets.items():
                        names[name] = _evaluate(expr.tree, names, expr.text)
                    assert space.names_of(config) == names
                    verdicts = [bool(_evaluate(pred.tree, names, pred.text))
                                for _, pred in space.constraints]
                    assert [bool(pred(names)) for _, pred in space.constraints] == verdicts
                    assert space.is_valid(config) == all(verdicts)
                checked.add(template.name)
    assert len(checked) >= 10, checked


def test_an_expression_too_deep_to_compile_is_evaluated_by_the_tree():
    """A sum of 400 terms nests deeper than Python's parser allows as compiled calls: it falls
    back to the tree evaluator instead of failing to load."""
    from tvm_ext.space.expr import Expr
    expr = Expr(" + ".join(["a"] * 400))
    assert expr._fn is None and expr({"a": 2}) == 800
