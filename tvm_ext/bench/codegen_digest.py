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
    ("dense_wgmma_ws.cuda", "dense", (1024, 1024, 1024), "float16", "NT", "cuda"),
    ("batch_matmul_wgmma_ws.cuda", "batch_matmul", (16, 256, 512, 128), "float16", "NN", "cuda"),
    ("dense_wgmma_ws.cuda", "dense", (1024, 1024, 1024), "float8_e4m3fn", "NT", "cuda"),
    ("dense_sgemm.cuda", "dense", (1024, 1024, 1024), "float32", "NN", "cuda"),
    ("batch_matmul_sgemm.cuda", "batch_matmul", (24, 2048, 512, 64), "float32", "NT", "cuda"),
    ("dense_gemv.x86", "dense", (1, 4096, 4096), "float32", "NT", "llvm"),
    ("dense_swap.x86", "dense", (128, 3072, 768), "float32", "NT", "llvm"),
    # Shapes that are not multiples of the tiles (padding inside the kernel), and int8.
    ("batch_matmul.x86", "batch_matmul", (3, 50, 70, 56), "float32", "NN", "llvm"),
    ("dense_pack.x86", "dense", (100, 72, 200), "float32", "TN", "llvm"),
    ("dense_swap.x86", "dense", (32, 509, 131), "float32", "TT", "llvm"),
    ("batch_matmul.cuda", "batch_matmul", (3, 50, 70, 56), "float32", "TT", "cuda"),
    ("dense_large_batch.cuda", "dense", (100, 72, 200), "float16", "NT", "cuda"),
    ("dense_tensorcore.cuda", "dense", (100, 72, 200), "float16", "NN", "cuda"),
    ("dense_tensorcore.cuda", "dense", (100, 72, 200), "int8", "TT", "cuda"),
    ("batch_matmul_tensorcore.cuda", "batch_matmul", (3, 50, 70, 56), "float16", "TN", "cuda"),
    ("dense_mma.cuda", "dense", (100, 72, 200), "float16", "TN", "cuda"),
    ("dense_mma.cuda", "dense", (128, 64, 128), "int8", "NT", "cuda"),
    ("batch_matmul_mma.cuda", "batch_matmul", (3, 50, 70, 56), "int8", "NN", "cuda"),
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
    """[digest per config] of one chunk of configs of one case (in a pool process)."""
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
    return out


def _label(case):
    return f"{case[0]} {'x'.join(map(str, case[2]))} {case[3]} {case[4]}"


def main(argv=None):
    import argparse  # noqa: PLC0415
    p = argparse.ArgumentParser(prog="python -m tvm_ext.bench.codegen_digest",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("mode", choices=("write", "check"))
    p.add_argument("path", help="the digest file (JSON)")
    p.add_argument("--n", type=int, default=64, help="sampled configs per case (write)")
    args = p.parse_args(argv)
    if args.mode == "write":
        jobs = []
        for case in CASES:
            task = _task(case)
            picks = task.space.random_valid(np.random.default_rng(7), args.n, max_draws=400000)
            cfgs = [task.fallback_config()] + [task.config(i) for i in picks]
            jobs.append((case, [c.to_json_dict() for c in cfgs]))
    else:
        with open(args.path) as f:
            data = json.load(f)
        jobs = [((d["case"][0], d["case"][1], tuple(d["case"][2]), *d["case"][3:]),
                 d["configs"]) for d in data]
    chunks = [(k, case, ents[i:i + 8]) for k, (case, ents) in enumerate(jobs)
              for i in range(0, len(ents), 8)]
    with ProcessPoolExecutor(2) as ex:
        res = list(ex.map(_digest, [(case, ents) for _, case, ents in chunks]))
    digests = [[] for _ in jobs]
    for (k, _, _), d in zip(chunks, res):
        digests[k].extend(d)
    if args.mode == "write":
        with open(args.path, "w") as f:
            json.dump([{"case": list(case), "configs": ents, "digests": digests[k]}
                       for k, (case, ents) in enumerate(jobs)], f)
        for k, (case, ents) in enumerate(jobs):
            errs = sum(d.startswith("error") for d in digests[k])
            print(f"{_label(case)}: {len(ents)} configs, {errs} errors")
        return 0
    bad = 0
    for k, (case, _) in enumerate(jobs):
        diff = [i for i, (a, b) in enumerate(zip(data[k]["digests"], digests[k])) if a != b]
        bad += len(diff)
        print(f"{_label(case)}: {len(digests[k])} configs, {len(diff)} differ {diff[:5]}")
    print("IDENTICAL" if not bad else f"{bad} DIFFER")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
