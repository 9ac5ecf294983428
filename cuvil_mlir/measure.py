"""Measuring, for the comparison harness and ``cuvil bench``: latency samples and output errors.

A leaf module (numpy; torch and ml_dtypes only when a caller hands them over), so the same
timing and error code runs where cuvil-mlir cannot compile (a GPU machine with only torch).

Latency: each sample is one synchronous call. The calls rotate over several input sets, so
a cache that remembers the last input cannot flatter; garbage collection is off while
timing. IREE calls take host arrays and return host arrays, so their samples include the
copies to and from the device and the wait for it. A torch call on a GPU is timed with CUDA
events and synchronized after each call (its inputs are already on the GPU).

Errors: ``max_rel_err`` is max |got - ref| / max |ref| over an output (the max-norm relative
error the project's e2e tests use); an output passes when it is at most the tolerance of its
dtype (``DEFAULT_RTOL``; integers and booleans must be exact).
"""

from __future__ import annotations

import gc
import math
import statistics
import time
from dataclasses import asdict, dataclass, field
from typing import Callable, Sequence

import numpy as np

# dtype (numpy name) -> the largest max-norm relative error that passes. Chosen a little
# above what correct lowerings give here (fp32: 1e-7 .. 5e-7 on the e2e models; fp16 on
# lavapipe ~1e-3): a wrong rewrite is orders of magnitude above these.
DEFAULT_RTOL: dict[str, float] = {
    "float64": 1e-7,
    "float32": 1e-4,
    "float16": 1e-2,
    "bfloat16": 2e-2,
    "float8_e4m3fn": 1.25e-1,
    "float8_e5m2": 2.5e-1,
}
EXACT_KINDS = "iub"  # numpy dtype kinds compared exactly: signed, unsigned, bool


def rtol_for(dtype: str, tolerances: dict[str, float] | None = None) -> float:
    """The tolerance of ``dtype``: ``tolerances`` first, then DEFAULT_RTOL; 0 (exact) for
    integers and booleans; 1e-4 for any other float."""
    table = {**DEFAULT_RTOL, **(tolerances or {})}
    if dtype in table:
        return float(table[dtype])
    try:
        if np.dtype(dtype).kind in EXACT_KINDS:
            return 0.0
    except TypeError:
        pass
    return table["float32"]


# ---------------------------------------------------------------------------------------
# Output errors.


@dataclass
class OutputError:
    """How one output differs from the reference (the worst over all input sets)."""

    index: int
    dtype: str
    shape: list[int]
    max_abs_err: float
    max_rel_err: float
    rtol: float
    passed: bool
    worst_at: list[int] | None = None  # where |got - ref| is largest
    got: float | None = None  # the values there
    expected: float | None = None
    problem: str | None = None  # shape/dtype mismatch, NaN where the reference has none


def output_errors(got: Sequence[np.ndarray], ref: Sequence[np.ndarray], tolerances=None, *, check_dtype=True) -> list[OutputError]:
    """Compare each output with its reference. A count, shape or (``check_dtype``) dtype
    mismatch fails that output with ``problem`` set and infinite errors."""
    if len(got) != len(ref):
        return [OutputError(0, "-", [], math.inf, math.inf, 0.0, False,
                            problem=f"{len(got)} output(s), the reference has {len(ref)}")]
    return [_one_output(i, g, r, tolerances, check_dtype) for i, (g, r) in enumerate(zip(got, ref))]


def _one_output(index: int, got: np.ndarray, ref: np.ndarray, tolerances, check_dtype: bool) -> OutputError:
    got, ref = np.asarray(got), np.asarray(ref)
    dtype, shape = str(got.dtype), list(got.shape)
    rtol = rtol_for(dtype, tolerances)

    def failed(problem: str) -> OutputError:
        return OutputError(index, dtype, shape, math.inf, math.inf, rtol, False, problem=problem)

    if got.shape != ref.shape:
        return failed(f"shape {shape}, the reference's is {list(ref.shape)}")
    if check_dtype and got.dtype != ref.dtype:
        return failed(f"dtype {dtype}, the reference's is {ref.dtype}")
    g, r = got.astype(np.float64), ref.astype(np.float64)
    if got.size == 0:
        return OutputError(index, dtype, shape, 0.0, 0.0, rtol, True)
    diff = np.abs(g - r)
    same = (g == r) | (np.isnan(g) & np.isnan(r))  # equal infinities and NaN where the reference has NaN
    diff[same] = 0.0
    diff[np.isnan(diff)] = math.inf  # NaN against a number
    worst = np.unravel_index(int(np.argmax(diff)), diff.shape)
    max_abs = float(diff[worst])
    finite_ref = np.abs(r[np.isfinite(r)])
    scale = float(finite_ref.max()) if finite_ref.size else 0.0
    max_rel = max_abs / scale if scale > 0 else (0.0 if max_abs == 0 else math.inf)
    problem = "NaN or infinity where the reference has a number" if math.isinf(max_abs) else None
    return OutputError(index, dtype, shape, max_abs, max_rel, rtol, max_rel <= rtol, [int(i) for i in worst],
                       float(g[worst]), float(r[worst]), problem)


def worst_of(runs: Sequence[list[OutputError]]) -> list[OutputError]:
    """Per output, the worst error over several input sets."""
    return [max(per_output, key=lambda e: (not e.passed, e.max_rel_err)) for per_output in zip(*runs)]


# ---------------------------------------------------------------------------------------
# Latency.


@dataclass(frozen=True)
class TimingSettings:
    """How long to time. Timing stops once both ``repetitions`` calls and ``min_time``
    seconds are reached, or after ``max_time`` seconds whatever the count (the result is
    then marked ``capped``). ``repetitions=0`` turns timing off."""

    repetitions: int = 50  # timed calls, at least
    warmup: int = 5  # untimed calls first (at least one per input set)
    min_time: float = 0.5  # timed seconds, at least (more samples for fast models)
    max_time: float = 10.0  # timed seconds, at most
    rounds: int = 3  # the harness interleaves entries over this many rounds
    input_sets: int = 3  # different inputs rotated through the calls

    def __post_init__(self):
        checks = [(self.repetitions >= 0, "repetitions must be >= 0"), (self.warmup >= 0, "warmup must be >= 0"),
                  (self.min_time >= 0, "min_time must be >= 0"), (self.max_time > 0, "max_time must be > 0"),
                  (self.rounds >= 1, "rounds must be >= 1"), (self.input_sets >= 1, "input_sets must be >= 1")]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)

    def to_json(self) -> dict:
        return asdict(self)


@dataclass
class Latency:
    """Summary of the timed samples of one entry, in milliseconds."""

    median_ms: float
    p10_ms: float
    p90_ms: float
    mean_ms: float
    min_ms: float
    max_ms: float
    repetitions: int  # timed calls
    warmup_calls: int
    timed_seconds: float
    capped: bool  # max_time stopped it before `repetitions` calls
    timer: str  # "perf_counter" (wall clock of a synchronous call) or "cuda-events"

    @classmethod
    def of(cls, samples_ms: Sequence[float], *, warmup_calls: int, capped: bool, timer: str) -> "Latency":
        p10, p50, p90 = (float(v) for v in np.percentile(samples_ms, [10, 50, 90]))
        return cls(p50, p10, p90, statistics.fmean(samples_ms), float(min(samples_ms)), float(max(samples_ms)),
                   len(samples_ms), warmup_calls, round(sum(samples_ms) / 1e3, 4), capped, timer)

    def to_json(self) -> dict:
        return asdict(self)


Sample = Callable[[tuple], float]  # one call on one input set -> its time in ms


def wall_clock(call: Callable) -> Sample:
    """A sample of a synchronous call (an IREE call returns host arrays; eager CPU torch)."""

    def sample(inputs: tuple) -> float:
        start = time.perf_counter_ns()
        call(*inputs)
        return (time.perf_counter_ns() - start) / 1e6

    sample.timer = "perf_counter"
    return sample


def cuda_events(call: Callable, before: Callable | None = None) -> Sample:
    """A sample of an asynchronous torch call on the current CUDA device: CUDA events around
    it, then wait for the end event (the stream is idle before each call). ``before`` runs
    untimed first (e.g. ``torch.compiler.cudagraph_mark_step_begin``)."""
    import torch

    def sample(inputs: tuple) -> float:
        if before is not None:
            before()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        call(*inputs)
        end.record()
        end.synchronize()
        return float(start.elapsed_time(end))

    sample.timer = "cuda-events"
    return sample


@dataclass
class Timer:
    """Samples of one entry, collected over interleaved rounds (``warm_up`` once, then
    ``run_round`` per round), summarized by ``latency``."""

    sample: Sample
    inputs: Sequence[tuple]
    settings: TimingSettings
    samples_ms: list[float] = field(default_factory=list)
    warmup_calls: int = 0
    capped: bool = False
    _next: int = 0  # the input set of the next call

    def warm_up(self) -> None:
        for _ in range(max(self.settings.warmup, len(self.inputs))):
            self._call()

    def run_round(self, on_sample: Callable[[], None] | None = None) -> None:
        """One round's share of the calls and seconds (a round of ``rounds``)."""
        s = self.settings
        calls = -(-s.repetitions // s.rounds)
        min_seconds, max_seconds = s.min_time / s.rounds, s.max_time / s.rounds
        done = 0
        gc.collect()
        gc.disable()  # a collection in the middle of a call is noise, not the backend's cost
        try:
            begin = time.perf_counter()
            while True:
                elapsed = time.perf_counter() - begin
                if done >= calls and elapsed >= min_seconds:
                    break
                if elapsed >= max_seconds and done >= 1:
                    self.capped = self.capped or done < calls
                    break
                self.samples_ms.append(self.sample(self._take()))
                done += 1
                if on_sample is not None:
                    on_sample()
        finally:
            gc.enable()

    def latency(self) -> Latency | None:
        if not self.samples_ms:
            return None
        return Latency.of(self.samples_ms, warmup_calls=self.warmup_calls, capped=self.capped,
                          timer=getattr(self.sample, "timer", "perf_counter"))

    def _take(self) -> tuple:
        inputs = self.inputs[self._next % len(self.inputs)]
        self._next += 1
        return inputs

    def _call(self) -> None:
        self.sample(self._take())
        self.warmup_calls += 1


# ---------------------------------------------------------------------------------------
# Inputs: numpy arrays (bfloat16 through ml_dtypes) <-> torch tensors.


def to_numpy(x) -> np.ndarray:
    """A torch tensor (any device; bfloat16 too) or array -> a contiguous numpy array."""
    if isinstance(x, np.ndarray):
        return np.require(x, requirements="C")  # not np.ascontiguousarray: it makes 0-d arrays 1-d
    import torch

    t = x.detach().cpu()
    if t.dtype == torch.bfloat16:
        import ml_dtypes

        return np.require(t.view(torch.int16).numpy().view(ml_dtypes.bfloat16), requirements="C")
    return np.require(t.numpy(), requirements="C")


def to_torch(a: np.ndarray):
    import torch

    if str(a.dtype) == "bfloat16":
        return torch.from_numpy(np.require(a, requirements="C").view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(np.require(a, requirements="C"))


def random_array(shape: Sequence[int], dtype: str, rng: np.random.Generator, *, high: int | None = None) -> np.ndarray:
    """Floats ~ N(0, 1); integers uniform in [0, high) (``high`` default 2, so an index or a
    token id stays in range); booleans uniform."""
    if any(d < 0 for d in shape):
        raise ValueError(f"cannot generate an input of dynamic shape {list(shape)}; give the input")
    if dtype == "bool":
        return rng.integers(0, 2, size=shape).astype(bool)
    if dtype == "bfloat16":
        import ml_dtypes

        return rng.standard_normal(shape).astype(ml_dtypes.bfloat16)
    kind = np.dtype(dtype).kind
    if kind in "iu":
        return rng.integers(0, high or 2, size=shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def permuted(a: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """The elements of ``a`` in a random order: the same shape, dtype and values (token ids
    stay in range, masks keep their values), other positions."""
    flat = a.reshape(-1).copy()
    rng.shuffle(flat)
    return flat.reshape(a.shape)
