"""How a kernel is timed.

"evaluator": TVM's ``time_evaluator``: ``number`` back-to-back calls between two device events,
``number`` raised until a repeat lasts ``min_repeat_ms``. Every call is a CPU launch, so a
kernel shorter than the launch path (about 2-5 us through TVM's FFI on an H100 host) is timed at
the launch rate, not its own speed, and configs under that floor all look alike to a tuner.

"graph": ``n`` calls captured in one CUDA graph (through torch, whose capture stream TVM joins via
``tvm_ffi.use_torch_stream``: TVM launches on the FFI environment's current stream); each sample
is one replay between two CUDA events, divided by ``n``. That is the kernel's own time plus the
graph's small gap between kernels, and it times cuBLAS (in the benchmark) the same way.

"auto" (the default): "graph" for a CUDA device when torch with CUDA is importable, else
"evaluator". Records do not say which method timed them; for kernels of 20 us and more the two
agree within a few percent.
"""
from __future__ import annotations

import functools
import time
from typing import Callable, Dict, Hashable, List, Mapping, Optional

from ..errors import TvmExtError

METHODS = ("auto", "graph", "evaluator")


@functools.lru_cache(maxsize=None)
def _torch_cuda() -> bool:
    try:
        import torch  # noqa: PLC0415
        return bool(torch.cuda.is_available())
    except Exception:  # noqa: BLE001  (no torch, or a broken install: time without it)
        return False


def resolve(timing: str, dev) -> str:
    """The method that ``timing`` means on device ``dev``."""
    if timing not in METHODS:
        raise TvmExtError(f"unknown timing '{timing}' (known: {', '.join(METHODS)})")
    if timing == "evaluator":
        return timing
    cuda = dev.dlpack_device_type() == 2  # kDLCUDA
    if cuda and _torch_cuda():
        return "graph"
    if timing == "graph":
        raise TvmExtError("graph timing needs a CUDA device and torch with CUDA "
                          f"(device {dev}); use --timing evaluator")
    return "evaluator"


def _event_seconds(run: Callable[[], object]) -> float:
    """Seconds that ``run`` takes on the current stream, between two CUDA events."""
    import torch  # noqa: PLC0415
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    run()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1e3


def _calls(launch: Callable[[], object], n: int) -> Callable[[], None]:
    def run():
        for _ in range(n):
            launch()
    return run


class GraphSampler:
    """A kernel captured ``n`` times into one CUDA graph; ``sample()`` replays it once and
    returns seconds per call. ``launch`` launches on the FFI / torch current stream; ``n`` is
    chosen so that a replay lasts about ``replay_ms``. Several samplers can be alive at once,
    so that kernels are sampled in turn (the same clock and temperature for each)."""

    def __init__(self, launch: Callable[[], object], replay_ms: float = 5.0, max_n: int = 1000):
        import torch  # noqa: PLC0415
        import tvm_ffi  # noqa: PLC0415
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with tvm_ffi.use_torch_stream(torch.cuda.stream(side)):
            _calls(launch, 3)()  # warm-up: module load, cuBLAS handle and workspace
            eager = _event_seconds(_calls(launch, 10)) * 1e3 / 10  # ms; an upper bound
        self.n = int(min(max(replay_ms / max(eager, 1e-4), 10), max_n))
        self.graph = torch.cuda.CUDAGraph()
        with tvm_ffi.use_torch_stream(torch.cuda.graph(self.graph)):
            _calls(launch, self.n)()
        self.graph.replay()
        torch.cuda.synchronize()

    def sample(self) -> float:
        return _event_seconds(self.graph.replay) / self.n


class EagerSampler:
    """``sample()``: seconds per call of ``number`` eager calls between two CUDA events
    (launch overhead included: torch's Python dispatch or TVM's FFI call)."""

    def __init__(self, launch: Callable[[], object], number: int = 10):
        import tvm_ffi  # noqa: PLC0415
        self.launch, self.number = launch, number
        with tvm_ffi.use_torch_stream():
            _calls(launch, 3)()

    def sample(self) -> float:
        import tvm_ffi  # noqa: PLC0415
        with tvm_ffi.use_torch_stream():
            return _event_seconds(_calls(self.launch, self.number)) / self.number


#: Seconds a CPU sample taken after idle time first runs its call untimed. The CPU benches
#: and the tuning summary pause 0.3 s before each sample (OpenBLAS's workers spin for up to
#: 0.1 s after a numpy call and slow a kernel run beside them), and cores that were idle meet
#: the next calls slowly: on a 2-core Zen 3 the README job's summary timed the tuner's best of
#: 0.82 ms at 1.18 ms without it, and within 1.5% of the time in turn without a pause with it
#: (docs/BENCHMARKS.md, "tuning runs end with a comparison in turn").
WARM_S = 0.025


class WallSampler:
    """``sample()``: wall-clock seconds per call of ``fn`` (a CPU call that returns when its
    work is done), over enough back-to-back calls to last ``min_s`` (counted once, at the
    start: a sub-millisecond call is not lost in the timer's resolution), after calls of
    ``WARM_S`` untimed (the CPU benches and the tuning summary sample after idle time)."""

    def __init__(self, fn: Callable[[], object], min_s: float = 0.05):
        self.fn = fn
        fn()  # the thread pools start, the pages are touched
        t0 = time.perf_counter()
        fn()
        once = max(time.perf_counter() - t0, 1e-7)
        self.number = max(1, int(min_s / once))
        self.warm = max(1, int(WARM_S / once))

    def sample(self) -> float:
        for _ in range(self.warm):
            self.fn()
        t0 = time.perf_counter()
        for _ in range(self.number):
            self.fn()
        return (time.perf_counter() - t0) / self.number


def in_turn(samplers: Mapping[Hashable, Callable[[], float]], rounds: int,
            pause: Optional[Callable[[Hashable], object]] = None) -> Dict[Hashable, List[float]]:
    """{key: ``rounds`` samples} of each sampler (a call that returns one time), sampled in
    turn: one sample of each a round, so that a clock, temperature or load drift falls on all
    of them alike; ``pause(key)`` is called before each sample (CPU idle time)."""
    samples: Dict[Hashable, List[float]] = {k: [] for k in samplers}
    for _ in range(rounds):
        for k, sample in samplers.items():
            if pause is not None:
                pause(k)
            samples[k].append(sample())
    return samples


def graph_times(launch: Callable[[], object], repeat: int, replay_ms: float = 5.0,
                max_n: int = 1000) -> List[float]:
    """Seconds per call of ``launch``, ``repeat`` samples of a ``GraphSampler``."""
    sampler = GraphSampler(launch, replay_ms, max_n)
    return [sampler.sample() for _ in range(repeat)]


def time_module(mod, dev, args, *, timing: str, number: int, repeat: int,
                min_repeat_ms: int, cache_flush: bool = False) -> List[float]:
    """``repeat`` costs (seconds per call) of ``mod["main"](*args)`` by ``timing``."""
    if resolve(timing, dev) == "graph":
        func = mod["main"]
        return graph_times(lambda: func(*args), repeat, replay_ms=max(min_repeat_ms, 1) / 10)
    kwargs = {"f_preproc": "cache_flush_cpu_non_first_arg"} if cache_flush else {}
    timer = mod.time_evaluator("main", dev, number=number, repeat=repeat,
                               min_repeat_ms=min_repeat_ms, **kwargs)
    return list(timer(*args).results)
