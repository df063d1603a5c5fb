"""The CLI as a user runs it: tune, resume, best, list-space, dry-run, and bad input."""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def cli(*args, cwd):
    env = dict(os.environ, PYTHONPATH=ROOT, TVM_EXT_NO_GPU="1")
    return subprocess.run([sys.executable, "-m", "tvm_ext.tune", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def _records(path):
    return [json.loads(line) for line in open(path) if line.strip() and line[0] == "{"]


def test_tune_resume_best(tmp_path):
    args = ["--op", "batch_matmul", "--target", "llvm", "--shape", "2x32x64x32", "--trials",
            "6", "--batch-size", "3", "--log", "bmm.json", "--number", "1", "--repeat", "1"]
    r = cli(*args, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "best:" in r.stdout and "bmm.json" in r.stdout
    first = _records(tmp_path / "bmm.json")
    assert len(first) >= 6 and all(rec["result"][1] == 0 for rec in first)
    # --confirm (3 by default): the 3 best again, and the fallback where it is not among them
    # (a second comparison with those left out whose tuner's times beat the new ones)
    assert "confirmed: " in r.stdout and r.stdout.count("the fallback)") == 1
    again = {rec["config"]["index"] for rec in first[6:]}
    top3 = sorted(first[:6], key=lambda rec: rec["result"][0][0])[:3]
    assert len(first) >= 9 and {rec["config"]["index"] for rec in top3} <= again
    configs = len({rec["config"]["index"] for rec in first})  # the fallback's too
    assert configs in (6, 7)
    r = cli(*args, "--resume", "--confirm", "0", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert f"resume: {configs} configs" in r.stdout and "confirmed" not in r.stdout
    recs = _records(tmp_path / "bmm.json")
    assert recs[:len(first)] == first and len(recs) == len(first) + 6
    assert len({rec["config"]["index"] for rec in recs}) == configs + 6
    r = cli("--best", "bmm.json", cwd=tmp_path)
    assert r.returncode == 0 and "batch_matmul 2x32x64x32 float32 NT" in r.stdout


def test_list_space_and_dry_run(tmp_path):
    r = cli("--op", "dense", "--target", "llvm", "--shape", "64x128x64", "--list-space",
            cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "tile_inner" in r.stdout and "valid configs:" in r.stdout
    r = cli("--op", "dense", "--target", "llvm", "--shape", "64x128x64", "--dry-run",
            cwd=tmp_path)
    assert r.returncode == 0 and "would measure 32 configs" in r.stdout
    assert not (tmp_path / "tvm_ext_logs").exists()


BAD = [
    (["--op", "conv2d"], "unknown op 'conv2d'"),
    (["--shape", "4x64"], "malformed shape '4x64'"),
    (["--shape", "ax2x3x4"], "malformed shape 'ax2x3x4'"),
    (["--shape", "-1x2x3x4"], "malformed shape '-1x2x3x4'"),
    (["--dtype", "float16", "--target", "llvm"], "dtype float16"),
    (["--dtype", "complex64"], "unsupported dtype 'complex64'"),
    (["--best", "missing.json"], "missing.json does not exist"),
    (["--tuner", "anneal", "--target", "llvm"], "unknown tuner 'anneal'"),
    (["--target", "tpu"], "unknown target 'tpu'"),
    (["--layout", "XY"], "unknown layout 'XY'"),
    (["--space", "nope.json", "--target", "llvm"], "cannot read space file"),
    (["--timing", "graph", "--target", "llvm"], "graph timing needs a CUDA device"),
    (["--target", "llvm", "--op", "batch_matmul", "--set", "nope=1"],
     "batch_matmul.x86 has no knob 'nope'"),
    (["--target", "llvm", "--op", "batch_matmul", "--set", "tile_k=3"],
     "split 'tile_k' of 256 (verbose, 2 outputs): filter 'size[-1] in [3]' leaves none"),
    (["--target", "llvm", "--op", "batch_matmul", "--set", "yt=3"],
     "3 is not a value of knob 'yt'"),
    (["--target", "llvm", "--set", "yt"], "expected KNOB=V1,V2"),
    (["--target", "llvm", "--confirm", "-1"], "--confirm -1: must be >= 0"),
    (["--target", "llvm", "--confirm", "2", "--model", "m.py"], "--confirm is for one shape"),
    (["--target", "llvm", "--op", "batch_matmul", "--set", "yt=-1/2"],
     "[-1, 2] is not a value of knob 'yt'"),
    (["--target", "llvm", "--op", "dense", "--shape", "1x256x256", "--set", "yt=1"],
     "give --template"),
]


def _one_line(r, msg):
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tvm_ext.tune: error:") and msg in lines[0]


@pytest.mark.parametrize("args,msg", BAD)
def test_bad_input_one_line_exit_2(tune_here, args, msg):
    _one_line(tune_here(*args), msg)


@pytest.mark.parametrize("args,msg", [BAD[0], BAD[13]])
def test_bad_input_in_a_fresh_process_is_one_line_too(tmp_path, args, msg):
    """As a user runs it: nothing else on stderr (an import's warnings, a space's build)."""
    _one_line(cli(*args, cwd=tmp_path), msg)


def test_set_tunes_only_the_values_given(tmp_path):
    """``--set KNOB=V1,V2``: the shipped space with those knobs kept to those values (a split:
    its innermost factor; the rules unchanged); every measured config has them, in the
    workers too (a config's index is of the narrowed space), and the space line counts the
    narrowed space."""
    base = ["--op", "batch_matmul", "--target", "llvm", "--shape", "2x32x64x32",
            "--template", "batch_matmul.x86", "--number", "1", "--repeat", "1"]
    full = cli(*base, "--list-space", cwd=tmp_path)
    narrow = cli(*base, "--list-space", "--set", "yt=2", "unroll_k=0", cwd=tmp_path)
    split = cli(*base, "--list-space", "--set", "tile_x=16", cwd=tmp_path)
    assert full.returncode == 0 and narrow.returncode == 0, (full.stderr, narrow.stderr)

    def size(out):
        return int(out.split("; space ")[1].split(" configs")[0])
    assert size(full.stdout) == 8 * size(narrow.stdout)  # yt: 1 of 4 values, unroll_k: 1 of 2
    assert split.returncode == 0 and "tile_x" in split.stdout, split.stderr
    # a split keeps the factorisations whose innermost factor is given
    assert 0 < size(split.stdout) < size(full.stdout)
    r = cli(*base, "--trials", "4", "--batch-size", "2", "--tuner", "random", "--confirm", "0",
            "--set", "yt=2", "unroll_k=0", "tile_x=16", "--log", "n.json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    recs = _records(tmp_path / "n.json")
    assert len(recs) == 4 and all(rec["result"][1] == 0 for rec in recs)
    for rec in recs:
        entity = {k: v for k, _, v in rec["config"]["entity"]}
        assert entity["yt"] == 2 and entity["unroll_k"] == 0 and entity["tile_x"][-1] == 16, \
            entity


def test_set_takes_a_splits_whole_sizes(tmp_path):
    """``--set tile_y=-1/4/4``: a split kept to those sizes (the outermost, -1, what is left of
    the axis), beside innermost factors of another knob; only such configs are measured."""
    base = ["--op", "dense", "--target", "llvm", "--shape", "32x64x32", "--layout", "NT",
            "--template", "dense_pack.x86", "--number", "1", "--repeat", "1"]
    r = cli(*base, "--trials", "3", "--tuner", "grid", "--set", "tile_y=-1/4/4,-1/2/8",
            "tile_x=16", "--confirm", "0", "--log", "w.json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    recs = _records(tmp_path / "w.json")
    assert len(recs) == 3 and all(rec["result"][1] == 0 for rec in recs)
    for rec in recs:
        entity = {k: v for k, _, v in rec["config"]["entity"]}
        assert entity["tile_y"] in ([-1, 4, 4], [-1, 2, 8]) and entity["tile_x"][-1] == 16, \
            entity


def _valid_line(target):
    return json.dumps({"input": [target, "batch_matmul.x86",
                                 [["TENSOR", [2, 32, 32], "float32"],
                                  ["TENSOR", [2, 64, 32], "float32"], [2, 32, 64], "float32",
                                  False, True], {}],
                       "config": {"index": 0, "code_hash": None,
                                  "entity": [["tile_y", "sp", [-1, 1]],
                                             ["tile_x", "sp", [-1, 16]],
                                             ["tile_k", "sp", [-1, 1]]]},
                       "result": [[1e-5], 0, 0.1, 1.0], "version": 0.2})


@pytest.mark.parametrize("case", ["corrupt_middle", "other_target"])
def test_bad_logs_are_never_rewritten(tmp_path, case):
    log = tmp_path / "log.json"
    if case == "corrupt_middle":
        log.write_text(_valid_line("llvm") + "\n{oops\n" + _valid_line("llvm") + "\n")
        msg = "log.json:2: corrupt record"
    else:
        log.write_text(_valid_line('{"kind": "cuda", "arch": "sm_90"}') + "\n")
        msg = "no records for target llvm"
    before = log.read_bytes()
    for extra in ([], ["--resume"]):
        r = cli("--op", "batch_matmul", "--target", "llvm", "--shape", "2x32x64x32",
                "--trials", "2", "--log", str(log), *extra, cwd=tmp_path)
        assert r.returncode == 2 and msg in r.stderr and len(r.stderr.strip().splitlines()) == 1
        assert log.read_bytes() == before
    r = cli("--best", str(log), "--target", "llvm", cwd=tmp_path)
    assert r.returncode == 2 and msg in r.stderr
    assert log.read_bytes() == before


def test_unreadable_log(tmp_path):
    log = tmp_path / "dir.json"
    log.mkdir()
    r = cli("--op", "batch_matmul", "--target", "llvm", "--log", str(log), cwd=tmp_path)
    assert r.returncode == 2 and "is a directory" in r.stderr
