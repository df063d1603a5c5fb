"""The package's imports point down the data path, and none forms a cycle.

Every ``import`` statement of tvm_ext (module level or inside a function: a lazy import is still
a dependency) is read with ``ast``. A module may import modules of its own component (the files
of ``measure/`` among themselves) or of a component in a lower layer, never a peer's or one above.
"""
import ast
import os
from collections import defaultdict

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PKG = os.path.join(ROOT, "tvm_ext")

# Bottom first. Components in one layer are peers: neither imports the other.
LAYERS = [
    ["errors"],
    ["workload", "target", "result"],
    ["space"],
    ["record"],          # the log format: workloads, configs, results
    ["legacy"],          # what records of TVM <= 0.19 meant, in our knobs
    ["template"],        # what a template is
    ["ops"],             # the templates
    ["strategy"],        # which templates exist and apply
    ["vector_math"],     # exp, tanh, erf as vector code in the CPU pipeline's lowering
    ["codegen", "host_memory"],  # pass options, CUDA compiler mode, launch attributes; CPU
    #                            tensors on huge pages
    ["task"],
    ["propose"],         # ranks a space's configs from hardware facts, measuring nothing
    ["tuner", "measure"],
    ["session"],         # THE tuning driver
    ["dispatch"],        # apply logs at build time
    ["family"],          # shape families: buckets, symbolic kernels, one library
    ["relax"],
    ["metaschedule"],
    ["report"],          # the tuning report; the CLI prints its summary after a run
    ["rerank"],          # a workload's recorded configs measured again in turn
    ["tune", "bench"],   # entry points: nothing imports them
]
LAYER = {name: i for i, names in enumerate(LAYERS) for name in names}


def _modules():
    """{dotted module name: path} of every module of the package."""
    out = {}
    for folder, _, files in os.walk(PKG):
        for f in files:
            if not f.endswith(".py"):
                continue
            rel = os.path.relpath(os.path.join(folder, f), ROOT)[:-3].split(os.sep)
            if rel[-1] == "__init__":
                rel = rel[:-1]
            out[".".join(rel)] = os.path.join(folder, f)
    return out


def _imports(name, path, modules):
    """The tvm_ext modules that ``name`` (at ``path``) imports."""
    is_pkg = path.endswith("__init__.py")
    package = name if is_pkg else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(open(path).read(), path)):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "tvm_ext")
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "tvm_ext":
                continue
            for a in node.names:  # `from pkg import submodule` imports the submodule
                sub = f"{target}.{a.name}"
                found.add(sub if sub in modules else target)
    return {m for m in found if m in modules and m != name}


def _component(module):
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None  # None: the package facade


@pytest.fixture(scope="module")
def graph():
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def test_every_component_has_a_layer(graph):
    missing = sorted({_component(m) for m in graph} - set(LAYER) - {None})
    assert not missing, f"add these to LAYERS: {missing}"


def test_imports_point_down(graph):
    bad = []
    for name, deps in graph.items():
        src = _component(name)
        if src is None:
            continue  # tvm_ext/__init__.py: the facade of lazy names
        for dep in deps:
            dst = _component(dep)
            if dst is None:
                bad.append(f"{name} imports the package facade tvm_ext")
            elif dst != src and LAYER[dst] >= LAYER[src]:
                bad.append(f"{name} ({src}, layer {LAYER[src]}) imports {dep} "
                           f"({dst}, layer {LAYER[dst]})")
    assert not bad, "imports that run up or across the layers:\n" + "\n".join(sorted(bad))


def test_no_import_cycle(graph):
    state, stack, cycles = defaultdict(int), [], []

    def visit(m):  # 0 new, 1 on the stack, 2 done
        state[m] = 1
        stack.append(m)
        for d in sorted(graph[m]):
            if state[d] == 1:
                cycles.append(" -> ".join(stack[stack.index(d):] + [d]))
            elif state[d] == 0:
                visit(d)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if state[m] == 0:
            visit(m)
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def test_the_checker_sees_a_violation():
    """The walker resolves relative imports: a made-up module of ``record`` importing the
    tuning driver is caught (so a passing test above means something)."""
    import tempfile
    modules = {"tvm_ext.record": "", "tvm_ext.session": ""}
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write("def f():\n    from .session import tune_task\n")
    try:
        deps = _imports("tvm_ext.record", f.name, modules)
    finally:
        os.unlink(f.name)
    assert deps == {"tvm_ext.session"}
    assert LAYER[_component("tvm_ext.session")] > LAYER[_component("tvm_ext.record")]
