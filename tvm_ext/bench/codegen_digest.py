"""Digests of the generated code of every template, to show that a change of the code around
the templates (a refactor) leaves every kernel byte-identical.

    python -m tvm_ext.bench.codegen_digest write before.json [--n 64]   # on the old tree
    python -m tvm_ext.bench.codegen_digest check before.json            # on the new tree

``write`` draws ``--n`` valid configs of each template (plus its fallback) with a fixed seed,
builds each and stores the configs (by knob name) with the sha256 of the generated source: CUDA
source for the CUDA templates (sm_90), LLVM IR for the CPU ones (znver3). ``check`` rebuilds the
stored configs with the current tree and compares. LLVM IR names TVM's alias-analysis types
after buffer addresses, which differ in every process; they are renumbered before hashing.
"""
import hashlib
import json
import sys
from concurrent.futures import ProcessPoolExecutor

import numpy as np

# (template, op, shape, dtype, layout, target): one workload per template, every template
CASES = [
    ("batch_matmul.x86", "batch_matmul", (4, 256, 256, 256), "float32", "NT", "llvm"),
    ("dense_pack.x86", "dense", (128, 3072, 768), "float32", "NT", "llvm"),
    ("batch_matmul.cuda", "batch_matmul", (24, 2048, 512, 64), "float32", "NT", "cuda"),
    ("dense_large_batch.cuda", "dense", (1024, 1024, 1024), "float32", "NN", "cuda"),
    ("dense_small_batch.cuda", "dense", (16, 4096, 4096), "float16", "NT", "cuda"),
    ("dense_tensorcore.cuda", "dense", (512, 512, 512), "float16", "NT", "cuda"),
    ("batch_matmul_tensorcore.cuda", "batch_matmul", (8, 256, 256, 128), "int8", "NT", "cuda"),
    ("dense_mma.cuda", "dense", (1024, 1024, 1024), "float16", "NN", "cuda"),
    ("batch_matmul_mma.cuda", "batch_matmul", (8, 256, 256, 128), "float16", "TN", "cuda"),
    ("dense_wgmma.cuda", "dense", (1024, 1024, 1024), "float16", "NT", "cuda"),
    ("batch_matmul_wgmma.cuda", "batch_matmul", (16, 256, 512, 128), "float16", "NN", "cuda"),
]


def _task(case):
    from ..target import parse_target  # noqa: PLC0415
    from ..task import Task  # noqa: PLC0415
    from ..workload import Workload  # noqa: PLC0415
    name, op, shape, dtype, layout, tgt = case
    wl = Workload.create(op, shape, dtype, None, layout)
    target = parse_target("llvm -mcpu=znver3" if tgt == "llvm" else
                          {"kind": "cuda", "arch": "sm_90"})
    return Task(wl, target, template=name)


def _source(task, cfg):
    ex = task.build(cfg)
    mod = ex.mod
    if task.target.kind.name == "cuda":
        return mod.imports[0].inspect_source()
    return _stable(mod.inspect_source("ll"))


def _stable(ll):
    """LLVM IR with TVM's TBAA type names (buffer addresses, different in every process)
    renumbered in order of first use."""
    import re  # noqa: PLC0415
    ids = {}
    return re.sub(r"0x[0-9a-f]{6,}", lambda m: ids.setdefault(m.group(0), f"buf{len(ids)}"), ll)


def _digest(args):
    """(template, [digest per config]) of one chunk of configs (in a pool process)."""
    case, entities = args
    from ..space import ConfigEntity  # noqa: PLC0415
    task = _task(case)
    out = []
    for ent in entities:
        cfg = ConfigEntity.from_json_dict(ent)
        try:
            src = _source(task, cfg)
            out.append(hashlib.sha256(src.encode()).hexdigest())
        except Exception as err:  # noqa: BLE001  (a config that fails is a digest too)
            out.append("error: " + str(err).strip().splitlines()[-1][:200])
    return case[0], out


def main(argv=None):
    import argparse  # noqa: PLC0415
    p = argparse.ArgumentParser(prog="python -m tvm_ext.bench.codegen_digest",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("mode", choices=("write", "check"))
    p.add_argument("path", help="the digest file (JSON)")
    p.add_argument("--n", type=int, default=64, help="sampled configs per template (write)")
    args = p.parse_args(argv)
    mode, path, n = args.mode, args.path, args.n
    if mode == "write":
        jobs = []
        for case in CASES:
            task = _task(case)
            picks = task.space.random_valid(np.random.default_rng(7), n, max_draws=400000)
            cfgs = [task.fallback_config()] + [task.config(i) for i in picks]
            jobs.append((case, [c.to_json_dict() for c in cfgs]))
    else:
        data = json.load(open(path))
        jobs = [(tuple(d["case"][:2]) + (tuple(d["case"][2]),) + tuple(d["case"][3:]),
                 d["configs"]) for d in data]
    chunks = []
    for case, ents in jobs:
        for i in range(0, len(ents), 8):
            chunks.append((case, ents[i:i + 8]))
    with ProcessPoolExecutor(2) as ex:
        res = list(ex.map(_digest, chunks))
    digests = {}
    for (case, _), (name, d) in zip(chunks, res):
        digests.setdefault(name, []).extend(d)
    if mode == "write":
        json.dump([{"case": list(case), "configs": ents, "digests": digests[case[0]]}
                   for case, ents in jobs], open(path, "w"))
        for case, ents in jobs:
            errs = sum(d.startswith("error") for d in digests[case[0]])
            print(f"{case[0]}: {len(ents)} configs, {errs} errors")
    else:
        bad = 0
        for d in data:
            new = digests[d["case"][0]]
            diff = [i for i, (a, b) in enumerate(zip(d["digests"], new)) if a != b]
            bad += len(diff)
            print(f"{d['case'][0]}: {len(new)} configs, {len(diff)} differ {diff[:5]}")
        print("IDENTICAL" if not bad else f"{bad} DIFFER")
        sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
