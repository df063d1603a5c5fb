"""Tuning logs: one JSON record per line, in AutoTVM v0.2's shape.

    {"input": [target, task_name, args, {}],
     "config": {"index": 50881, "code_hash": null, "entity": [["tile_y", "sp", [-1, 8]], ...]},
     "result": [[cost_s, ...], error_no, all_cost_s, timestamp],
     "version": 0.2, "tvm_version": "0.27.0.post1"}

Appends are locked (fcntl) and fsync'ed, and only ever append: a log is never truncated or
rewritten. Reading tolerates an unfinished last line (a run killed mid-write) and fails with the
file and line number on any other corrupt line. Logs written by TVM <= 0.19 AutoTVM for
batch_matmul.x86/.cuda, dense_pack.x86 etc. read the same way (AutoTVM wrote the error message in
place of the costs of a failed measurement; that reads as an error record).
"""
from __future__ import annotations

import contextlib
import fcntl
import functools
import gzip
import json
import logging
import math
import os
import re
import zlib
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Tuple, Union

from .errors import LogError, TvmExtError, WorkloadError
from .result import MeasureResult
from .space import ConfigEntity
from .target import cpu_threads, describe, target_info, target_machine, target_matches
from .workload import Workload

logger = logging.getLogger("tvm_ext")
VERSION = 0.2
# Written after an unfinished last line before appending, so that line (left by a killed writer)
# is known as such, not as corruption, once it is no longer last.
UNFINISHED_MARK = "# tvm_ext: the line above is an unfinished record of an interrupted writer"
TVM_VERSION = "0.27.0.post1"


@dataclass
class Record:
    target: str
    task_name: str
    workload: Workload
    config: ConfigEntity
    result: MeasureResult
    line_no: int = 0
    # The TVM version that wrote the record ("0.27.0.post1" for ours; older for AutoTVM and
    # TopHub logs, None where the record does not say): knob meanings changed across versions.
    tvm_version: Optional[str] = None

    def key(self):
        """Workload identity (not the template): the best record per key is applied."""
        return self.workload.key()


def op_of_task(task_name: str, args=None) -> str:
    """The op a record computes, by its meaning, without loading any template: the template
    name's op ('dense_pack.x86' -> 'dense', 'batch_matmul_tensorcore.cuda' -> 'batch_matmul'),
    else the rank of its first tensor argument (3-D: batch_matmul, 2-D: dense), which is how a
    template defined outside tvm_ext names its workload."""
    base = task_name.split(".")[0]
    if base.startswith("batch_matmul"):
        return "batch_matmul"
    if base.startswith(("dense", "matmul")):
        return "dense"
    try:
        rank = len(args[0][1]) if args[0][0] == "TENSOR" else None
    except (TypeError, IndexError, KeyError):
        rank = None
    if rank in (2, 3):
        return "dense" if rank == 2 else "batch_matmul"
    raise SetAside(task_name, f"{task_name} (no such template)")


class SetAside(ValueError):
    """A well-formed record that cannot be applied: one of an operator tvm_ext has no template
    for (conv2d in a TopHub log), or one whose time is no time (zero, negative, infinite). It
    is set aside and counted by ``load_log`` under ``why``, never fatal, never applied."""

    def __init__(self, task_name: str, why: Optional[str] = None):
        self.task_name = task_name
        self.why = why or task_name
        super().__init__(f"record set aside: {self.why}")


def _workload_of(task_name: str, args) -> Workload:
    """The workload of a record's arguments. Arguments that are no matmul of ours, under a name
    that is not one of our ops on a target we tune (conv1d_transpose_nchw.cuda, whose first
    tensor is 3-D; dense_packed.vta), make the record one of another operator: set aside."""
    op = op_of_task(task_name, args)
    try:
        return Workload.from_args(op, args)
    except WorkloadError:
        base, _, kind = task_name.partition(".")
        if not base.startswith(("batch_matmul", "dense", "matmul")) or \
                kind not in ("cuda", "x86", "llvm", "gpu"):
            raise SetAside(task_name, f"{task_name} (no such template)") from None
        raise


def encode(target: str, task_name: str, workload: Workload, config: ConfigEntity,
           result: MeasureResult, *, tvm_version: Optional[str] = TVM_VERSION) -> str:
    costs = result.costs if result.ok else [result.error_msg or f"error {result.error_no}"]
    return json.dumps({
        "input": [target, task_name, workload.to_args(), {}],
        "config": config.to_json_dict(),
        "result": [costs, int(result.error_no), float(result.all_cost), float(result.timestamp)],
        "version": VERSION, **({"tvm_version": tvm_version} if tvm_version else {})},
        separators=(", ", ": "))


def decode(line: str) -> Record:
    """One log line -> Record; ValueError naming what is wrong."""
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as err:
        raise ValueError(f"not JSON ({err.msg} at column {err.colno})") from None
    if not isinstance(obj, dict) or "input" not in obj or "config" not in obj \
            or "result" not in obj:
        raise ValueError("not a tuning record (needs input, config and result)")
    try:
        target, task_name, args = obj["input"][0], obj["input"][1], obj["input"][2]
        workload = _workload_of(str(task_name), args)
        config = ConfigEntity.from_json_dict(obj["config"])
        costs, error_no, all_cost, timestamp = obj["result"][:4]
    except SetAside:
        raise
    except TvmExtError as err:
        raise ValueError(str(err)) from None
    except (TypeError, ValueError, IndexError, KeyError) as err:
        raise ValueError(f"malformed record ({type(err).__name__}: {err})") from None
    if not isinstance(costs, list) or isinstance(error_no, bool) or \
            not isinstance(error_no, int):
        raise ValueError("malformed record (result needs [costs], error_no, ...)")
    numeric = [c for c in costs if isinstance(c, (int, float)) and not isinstance(c, bool)]
    if error_no == 0 and (not costs or len(numeric) != len(costs)):
        raise ValueError("record without error has non-numeric costs")
    if error_no == 0 and not all(math.isfinite(c) and c > 0 for c in numeric):
        # A zero cost would be an infinitely fast kernel, a negative one a nonsense time: the
        # record cannot rank kernels. It is set aside (the rest of the log stays usable).
        raise SetAside(str(task_name), f"{task_name} with a cost that is not a positive time")
    msg = "" if error_no == 0 else "; ".join(str(c) for c in costs if c not in numeric)
    result = MeasureResult([float(c) for c in numeric] if error_no == 0 else [], int(error_no),
                           float(all_cost), float(timestamp), msg)
    version = obj.get("tvm_version")
    return Record(str(target), str(task_name), workload, config, result,
                  tvm_version=str(version) if version is not None else None)


def load(path: Union[str, os.PathLike]) -> List[Record]:
    """All records of a log (see ``load_log``); records set aside are named in one line."""
    records, set_aside = load_log(path)
    if set_aside:
        logger.info("tvm_ext: %s: %s", path, set_aside_line(set_aside))
    return records


def set_aside_line(set_aside: Counter) -> str:
    counts = ", ".join(f"{why}: {n}" for why, n in sorted(set_aside.items()))
    return f"{sum(set_aside.values())} records set aside, not applied ({counts})"


def load_log(path: Union[str, os.PathLike]) -> Tuple[List[Record], Counter]:
    """(records, {template: count} of the records set aside) of a log.

    A missing or unreadable file, a file whose first line is not a record (not a tuning log:
    a user's JSON file), or a corrupt line that is not the last raises LogError naming the file
    and line; an unfinished last line (a writer killed mid-line) is skipped with one warning;
    records of operators we have no template for (conv2d in a TopHub log) are set aside. A
    gzip-compressed log is read as its text (and never appended to: ``append``)."""
    text, p = _read_text(path)
    lines = text.split("\n")
    unfinished = not text.endswith("\n")
    records: List[Record] = []
    set_aside: Counter = Counter()
    first = True
    for i, line in enumerate(lines, start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if line.lstrip().startswith(FAMILY_PREFIX) and not first:
            continue  # a shape family's library (tvm_ext.family reads it)
        try:
            rec = decode(line)
        except SetAside as err:
            set_aside[err.why] += 1
            first = False
            continue
        except ValueError as err:
            if first and not _looks_like_record(line):
                raise LogError(f"{p} is not a tuning log (line {i} is not a record: {err})") \
                    from None
            if (i == len(lines) and unfinished) or \
                    (i < len(lines) and lines[i].strip() == UNFINISHED_MARK):
                logger.warning("tvm_ext: %s:%d: skipped an unfinished record (%s)", p, i, err)
                continue
            raise LogError(f"{p}:{i}: corrupt record: {err}") from None
        first = False
        rec.line_no = i
        records.append(rec)
    return records, set_aside


# A log line that describes a shape family's library (``tvm_ext.family``), after the records
# of its representative shapes: not a record, skipped by ``load_log``.
FAMILY_PREFIX = '{"family_library"'


def _looks_like_record(line: str) -> bool:
    """Whether a line that does not decode is the start of a record (cut by a killed writer)
    rather than some other text: a record line opens with its "input" key."""
    return line.lstrip().startswith('{"input"')


def _gzipped(head: bytes) -> bool:
    return head[:2] == b"\x1f\x8b"


def _read_text(path) -> Tuple[str, Path]:
    p = Path(path)
    try:
        data = p.read_bytes()
    except FileNotFoundError:
        raise LogError(f"log {p} does not exist") from None
    except IsADirectoryError:
        raise LogError(f"log {p} is a directory, not a file") from None
    except OSError as err:
        raise LogError(f"cannot read log {p}: {err.strerror or err}") from None
    if _gzipped(data):  # a log compressed with gzip (e.g. to ship it): read as its text
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as err:
            raise LogError(f"{p}: corrupt gzip-compressed log ({err})") from None
    try:
        return data.decode("utf-8"), p
    except UnicodeDecodeError as err:
        line = data[:err.start].count(b"\n") + 1
        raise LogError(f"{p}:{line}: corrupt record (not UTF-8 text)") from None


@contextlib.contextmanager
def _locked(path: Path):
    """The log open for appending under an exclusive lock; LogError (one line naming the log)
    where it cannot be opened: a missing folder that cannot be made, a read-only place, a path
    under a regular file."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    except OSError as err:
        raise LogError(f"cannot write log {path}: {err.strerror or err}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield fd
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def check_appendable(path: Union[str, os.PathLike]) -> None:
    """Before anything is measured: the log can be opened for appending (it is created if it
    does not exist), and an existing file is a tuning log (its first line is a record), so a
    user's other file is never appended to. LogError otherwise; the file is left as it was."""
    p = Path(path)
    if p.exists():
        load_log(p)  # not a log, or a corrupt middle line: LogError before any write
        with open(p, "rb") as f:
            if _gzipped(f.read(2)):
                raise LogError(f"log {p} is gzip-compressed: it is read, not appended to "
                               "(name a plain log to write)")
    with _locked(p):
        pass


def append(path: Union[str, os.PathLike], lines: Iterable[str]) -> None:
    """Append encoded records under an exclusive lock, then fsync. If the file ends with an
    unfinished line (a killed writer), that line is closed and marked first (never removed).
    Everything is written or nothing: a short write (a full disk) is undone back to the old
    end of the file and raises LogError naming the log."""
    p = Path(path)
    payload = "".join(line.rstrip("\n") + "\n" for line in lines)
    if not payload:
        return
    with _locked(p) as fd:
        size = os.fstat(fd).st_size
        if size:
            with open(p, "rb") as f:
                if _gzipped(f.read(2)):
                    raise LogError(f"log {p} is gzip-compressed: it is read, not appended to")
                f.seek(size - 1)
                if f.read(1) != b"\n":
                    payload = "\n" + UNFINISHED_MARK + "\n" + payload
        data = payload.encode()
        try:
            written = 0
            while written < len(data):  # os.write may write less than asked
                n = os.write(fd, data[written:])
                if n <= 0:
                    raise OSError(28, "no space left on device")
                written += n
            os.fsync(fd)
        except OSError as err:
            try:
                os.ftruncate(fd, size)  # our own partial line goes; the old bytes stay
            except OSError:
                pass
            raise LogError(f"cannot append to log {p}: {err.strerror or err} "
                           f"({len(lines_of(payload))} records not written)") from None


def lines_of(payload: str) -> List[str]:
    return [ln for ln in payload.split("\n") if ln and ln != UNFINISHED_MARK]


class LogWriter:
    """Tuning callback that appends each measured batch to a log. Lines that could not be
    written stay in ``pending`` (and are tried again with the next batch); the LogError then
    ends tuning with one line naming the log."""

    def __init__(self, path):
        self.path = Path(path)
        self.pending: List[str] = []
        check_appendable(self.path)  # before anything is measured

    def __call__(self, task, configs, results):
        self.pending += [encode(task.target_str, task.name, task.workload, c, r)
                         for c, r in zip(configs, results)]
        append(self.path, self.pending)
        self.pending = []


def for_target(records: Sequence[Record], target) -> List[Record]:
    return [r for r in records if target_matches(r.target, target)]


def _fastest(records: Iterable[Record], target, key) -> Dict[tuple, Record]:
    """The fastest record per ``key`` of the valid records (those of ``target``), each config
    at its latest measurement (``latest_measurements``)."""
    best: Dict[tuple, Record] = {}
    valid = [r for r in records
             if r.result.ok and (target is None or target_matches(r.target, target))]
    for r in latest_measurements(valid):
        k = key(r)
        if k not in best or r.result.mean < best[k].result.mean:
            best[k] = r
    return best


def pick_best(records: Iterable[Record], target=None) -> Dict[tuple, Record]:
    """Fastest valid record per workload (across templates), optionally only those that apply
    to ``target``."""
    return _fastest(records, target, Record.key)


def best_per_target(records: Iterable[Record], target=None) -> Dict[tuple, Record]:
    """Fastest valid record per (target as described, GPU model included; workload),
    optionally only those that apply to ``target``: an H100's and an H200's best both stay."""
    return _fastest(records, target, lambda r: (describe(r.target),) + r.key())


def merge(paths: Sequence[Union[str, os.PathLike]], out: Union[str, os.PathLike], *,
          best_only: bool = False, latest_only: bool = False) -> int:
    """Append the records of ``paths`` (or only the best per workload and target) to ``out``;
    returns how many were written. ``out`` is appended to, never rewritten. ``latest_only``:
    without the measurements that a later one of the same config supersedes
    (``latest_measurements``: no build applies them), e.g. to compact a shipped log after a
    ``rerank`` into a new file."""
    records = [r for p in paths for r in load(p)]
    check_appendable(out)
    if latest_only:
        records = latest_measurements(records)
    if best_only:
        records = list(best_per_target(records).values())
    # Each record keeps the TVM version that wrote it: a knob's meaning depends on it.
    append(out, (encode(r.target, r.task_name, r.workload, r.config, r.result,
                        tvm_version=r.tvm_version) for r in records))
    return len(records)


def check_target(records: Sequence[Record], target, path) -> None:
    """LogError when a non-empty log has no record that applies to ``target``."""
    if records and not for_target(records, target):
        found = sorted({describe(r.target) for r in records})
        raise LogError(f"log {path} has no records for target {describe(target)} "
                       f"(it holds records for: {', '.join(found)})")


def best_table(records: Sequence[Record], target=None) -> List[str]:
    """One line per workload: template, best time and config."""
    lines = []
    for _, r in sorted(best_per_target(records, target).items(), key=lambda kv: str(kv[0])):
        gf = r.workload.flop / r.result.mean / 1e9
        cfg = " ".join(f"{k}={v!r}" for k, v in r.config.items())
        lines.append(f"{r.workload}  [{describe(r.target)}]  {r.task_name}  "
                     f"{r.result.mean * 1e3:.4f} ms  {gf:.1f} GFLOP/s  {cfg}")
    return lines


def best_for(records: Sequence[Record], workload: Workload, target) -> Optional[Record]:
    """The first of ``ranked_for``: the fastest valid record of ``workload`` that applies to
    ``target``, among those tuned on the target's own machine when there are any."""
    ranked = ranked_for(records, workload, target)
    return ranked[0] if ranked else None


@functools.lru_cache(maxsize=None)
def _plain_defaults(template: str) -> Dict[str, object]:
    """The space file's plain knob defaults of a template ({} for one without a file)."""
    from .space.spec import knob_defaults, load_space_spec  # noqa: PLC0415
    try:
        return knob_defaults(load_space_spec(template))
    except TvmExtError:
        return {}


def _canonical_target(target: str) -> str:
    """A record's target string with its JSON keys in one order (writers differ in order), and
    without the triple of an llvm target that names its CPU (``mcpu``): the host's target
    carries the triple of the LLVM that TVM was built with (``x86_64-conda-linux-gnu``), a
    shipped or hand-written one for the same CPU none or another vendor's, and both build the
    same code for that CPU, so a measurement under one supersedes the other's."""
    try:
        d = json.loads(target)
    except ValueError:
        return re.sub(r"\s-mtriple=\S+", "", target) if " -mcpu=" in target else target
    if isinstance(d, dict) and d.get("mcpu"):
        d.pop("mtriple", None)
    return json.dumps(d, sort_keys=True)


def config_identity(task_name: str, values: Dict[str, object]) -> tuple:
    """A hashable identity of one config of one template ({knob: plain value})."""
    return (task_name, tuple(sorted((k, str(v)) for k, v in values.items())))


def latest_measurements(records: Sequence[Record]) -> List[Record]:
    """``records`` less those superseded: where one config of one template was measured more
    than once for one workload on one target, only its latest measurement (by timestamp; on a
    tie, the later line) stands (the same config of another workload is another kernel). Its
    earlier times measured the template's code of then, on that machine's state of then (a
    GPU's clock moves between a cool and a hot card), and a config compared with the others by
    its fastest stale time wins on luck. Re-measuring the contenders of a workload together
    (``python -m tvm_ext.rerank``) re-ranks them (docs/BENCHMARKS.md)."""
    latest = {}
    for r in records:
        # a knob added to a template after the record was written: its space-file default
        # is what the record measured (the new knob's default keeps the old kernel)
        values = {**_plain_defaults(r.task_name), **r.config.values_dict()}
        key = (_canonical_target(r.target), r.key()) + config_identity(r.task_name, values)
        if key not in latest or r.result.timestamp >= latest[key].result.timestamp:
            latest[key] = r
    kept = {id(r) for r in latest.values()}
    return [r for r in records if id(r) in kept]


def ranked_for(records: Sequence[Record], workload: Workload, target) -> List[Record]:
    """The valid records of ``workload`` that apply to ``target``, best first: those measured
    on the target's own machine (its GPU model, or its CPU and thread count) fastest first, then
    the others (a time measured on another machine does not rank kernels for this one): on the
    CPU those of the target's own CPU first, then those of the nearest thread count
    (``_farness``), each group fastest first; on a GPU the others fastest first."""
    machine = target_machine(target)
    info = target_info(target)
    if info["kind"] == "llvm" and not info["num_cores"]:
        info["num_cores"] = cpu_threads()  # what its kernels run on (codegen.use_host_cores)
    mine = latest_measurements([r for r in for_target(records, target)
                                if r.key() == workload.key() and r.result.ok])
    return sorted(mine, key=lambda r: (machine is None or target_machine(r.target) != machine,)
                  + _farness(target_info(r.target), info) + (r.result.mean,))


def _farness(measured_on: Dict[str, object], target: Dict[str, object]) -> tuple:
    """How far the machine a CPU record was measured on is from the target's: another CPU
    (``mcpu``) than the target names, then how many doublings apart the thread counts are (2
    and 4: 1; 2 and 16: 3; 0 for a record that does not say). () for a GPU. A time of 16
    threads is shorter than one of 2 on any CPU: ranked by time alone, other machines' records
    gave every host the configs of the most cores tuned for (their parallel split, their
    tiles)."""
    if target["kind"] != "llvm":
        return ()
    cores = measured_on["num_cores"]
    return (bool(target["mcpu"]) and measured_on["mcpu"] != target["mcpu"],
            abs(math.log2(cores / target["num_cores"])) if cores else 0.0)