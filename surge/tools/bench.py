"""``python -m surge bench``: eager, torch.compile and surge side by side, in one process.

For every workload and contender: median time, speedup over eager, first-call
time in this process, first-call compile time in fresh processes on a cold and
a warm on-disk cache, per-call overhead on a tiny input, peak memory, achieved
bandwidth (memory-bound workloads), and for surge the graphs, graph breaks and
kernels it made plus its compile-time breakdown by phase. Every compiled result
is checked against eager on fresh inputs (not the ones it was compiled with).
"""
from __future__ import annotations

import copy
import dataclasses
import fnmatch
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import traceback

import torch

from . import timing, workloads
from .contenders import CONTENDERS, NotAvailable, base_name, make_contender
from .stored_peer import PEER, StoredPeer

# Contenders whose first call is timed again in fresh processes (eager compiles nothing).
COMPILING_CONTENDERS = ("torch.compile", "surge")
PROBE_TIMEOUT_S = 900


@dataclasses.dataclass
class BenchConfig:
    device: str
    scale: str = "full"                  # "full" or "quick"
    only: list[str] | None = None
    surge_backend: str | None = None
    fresh_process_compile: bool = True   # cold/warm first-call timing in subprocesses
    overhead: bool = True                # per-call overhead on a tiny input
    contenders: tuple[str, ...] = CONTENDERS
    budget_s: float = 1.0                # timing budget per (workload, contender)
    suite: str = "default"               # "default" (surge's workloads) or "models" (the model zoo)
    time_limit_s: float | None = None    # start no workload after this many seconds of the run
    stored_peer: str | None = None       # an earlier run's JSON: torch.compile's rows reused (stored_peer.py)


@dataclasses.dataclass
class ContenderResult:
    status: str = "ok"                   # ok | wrong | error | not available | not run
    message: str | None = None
    median_s: float | None = None
    first_call_s: float | None = None    # in this process (compile + one run)
    cold_compile_s: float | None = None  # fresh process, empty caches
    warm_compile_s: float | None = None  # fresh process, caches left by the cold run
    overhead_s: float | None = None      # median minus eager's median, tiny input
    peak_memory_bytes: int | None = None
    max_abs_error: float | None = None
    bandwidth_Bps: float | None = None
    graphs: int | None = None
    graph_breaks: int | None = None
    kernels: int | None = None
    fallbacks: int | None = None         # frames surge ran eagerly instead of compiling them
    speedup_spread: float | None = None  # how much the speedup over eager moved between timing rounds
    compile_phases_s: dict | None = None
    stored_speedup: float | None = None  # a stored row's speedup over eager (not measured in this run)

    def ran_eagerly(self) -> str | None:
        """Why a compiler's row measured (partly) eager code, or None when it compiled everything."""
        if self.graphs == 0:
            return "0 graphs compiled"
        if self.fallbacks:
            return f"{self.fallbacks} frames fell back to eager"
        return None


@dataclasses.dataclass
class WorkloadResult:
    name: str
    description: str
    sizes: dict
    dtype: str
    training: bool
    bytes_moved: int | None
    results: dict[str, ContenderResult]

    def speedup(self, contender: str) -> float | None:
        eager, other = self.results.get("eager"), self.results.get(contender)
        if other is not None and other.status == "ok" and other.stored_speedup is not None:
            return other.stored_speedup
        if not eager or not other or eager.median_s is None or other.median_s is None:
            return None
        if other.status != "ok":
            return None
        return eager.median_s / other.median_s

    def surge_over_torch_compile(self) -> float | None:
        """surge's speedup divided by torch.compile's (above 1: surge is faster)."""
        s, t = self.speedup("surge"), self.speedup("torch.compile")
        return s / t if s and t else None


def short_error(e: BaseException) -> str:
    text = f"{type(e).__name__}: {e}".strip().splitlines()
    return text[0][:200] if text else type(e).__name__


# ---------------------------------------------------------------- checking

def flatten_tensors(value) -> list:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in flatten_tensors(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in flatten_tensors(v)]
    if value is None:
        return []
    raise TypeError(f"cannot compare a result of type {type(value).__name__}")


def compare(actual, expected, rtol: float, atol: float) -> tuple[bool, float]:
    """(every tensor within tolerance, largest absolute difference)."""
    a_list, e_list = flatten_tensors(actual), flatten_tensors(expected)
    if len(a_list) != len(e_list):
        return False, float("inf")
    ok, worst = True, 0.0
    for a, e in zip(a_list, e_list):
        if a.shape != e.shape or a.dtype != e.dtype:
            return False, float("inf")
        a, e = a.detach().double(), e.detach().double()
        diff = (a - e).abs()
        worst = max(worst, float(diff.max()) if diff.numel() else 0.0)
        ok = ok and bool(torch.all(diff <= atol + rtol * e.abs()))
    return ok, worst


def relative_error(value, reference) -> float:
    """||value - reference|| / ||reference|| over the whole tensor (inf when finiteness differs)."""
    v, r = value.detach().double(), reference.detach().double()
    if not torch.equal(torch.isfinite(v), torch.isfinite(r)):
        return float("inf")
    diff = torch.linalg.vector_norm(torch.nan_to_num(v - r))
    return float(diff / torch.linalg.vector_norm(torch.nan_to_num(r)).clamp_min(1e-30))


def compare_low_precision(actual, expected, reference, slack: float = 2.0, floor: float = 1e-3):
    """A bf16/fp16 result is right when it is as close to the float32 ``reference`` as
    eager's own result (``expected``) is, within ``slack`` times eager's error (plus a
    ``floor``): deep low-precision models legitimately differ element by element between
    two correct compilers, wrong code does not come close. Returns (ok, largest absolute
    difference from eager)."""
    a_list, e_list, r_list = flatten_tensors(actual), flatten_tensors(expected), flatten_tensors(reference)
    if not len(a_list) == len(e_list) == len(r_list):
        return False, float("inf")
    ok, worst = True, 0.0
    for a, e, r in zip(a_list, e_list, r_list):
        if a.shape != e.shape or a.dtype != e.dtype or r.shape != e.shape:
            return False, float("inf")
        diff = (a.detach().double() - e.detach().double()).abs()
        worst = max(worst, float(diff.max()) if diff.numel() else 0.0)
        if diff.numel():
            ok = ok and relative_error(a, r) <= slack * relative_error(e, r) + floor
    return ok, worst


def float32_reference(instance, inputs):
    """The workload run in float32 (module weights and floating inputs upcast, autocast off),
    or None for a workload that already runs in float32."""
    if instance.dtype not in (torch.bfloat16, torch.float16):
        return None
    target = instance.fresh_target()
    if isinstance(target, torch.nn.Module):
        target = target.float()
    upcast = tuple(t.float() if isinstance(t, torch.Tensor) and t.is_floating_point() else t for t in inputs)
    return dataclasses.replace(instance, autocast=None).run(target, target, upcast)


# ---------------------------------------------------------------- one workload

def graphs_made(counts: dict) -> int:
    """Graphs surge compiled, from a change of ``surge.counters``: those it captured and
    those it took from the on-disk capture cache (counted apart, as frontend disk hits)."""
    return counts.get("graphs", 0) + counts.get("frontend_disk_hits", 0)


class _SurgeStructure:
    """Graphs, breaks and kernels surge made, and its compile phases, around a first call."""

    def __init__(self):
        from surge import counters
        from ..observe.phases import phase_timer

        self.counters = counters
        self.phase_timer = phase_timer
        self.counts_before = dict(counters)
        self.records_before = len(phase_timer.records)

    def finish(self, result: ContenderResult, instance, target, inputs, backend=None) -> None:
        records = self.phase_timer.records[self.records_before:]
        result.compile_phases_s = self.phase_timer.summary(records)
        after = self.counters
        delta = {k: after[k] - self.counts_before.get(k, 0) for k in after}
        result.graphs = graphs_made(delta)
        result.graph_breaks = delta.get("graph_breaks")
        result.fallbacks = delta.get("fallbacks")
        # Code-generating backends count what they make in surge.counters["kernels"];
        # a backend that does not leaves the count unknown rather than zero.
        if "kernels" in after:
            result.kernels = delta["kernels"]
        if result.graphs == 0:
            return  # nothing compiled: surge.explain's own compile must not make it look otherwise
        explained = explain_counts(instance, target, inputs, backend)
        if explained is not None:
            result.graphs, result.graph_breaks = explained


class _TorchCompileStructure:
    """Graphs and graph breaks torch.compile made around a first call, from Dynamo's own
    counters (the bench measures the peer; the library never imports Dynamo)."""

    def __init__(self):
        import torch._dynamo
        from torch._dynamo.utils import counters

        torch._dynamo.reset()  # as surge.reset() for surge: an earlier workload's capture must not hide this one's
        self.counters = counters
        self.graphs_before = counters["stats"]["unique_graphs"]
        self.breaks_before = sum(counters["graph_break"].values())

    def finish(self, result: ContenderResult, *unused) -> None:
        result.graphs = self.counters["stats"]["unique_graphs"] - self.graphs_before
        result.graph_breaks = sum(self.counters["graph_break"].values()) - self.breaks_before


# What counts a compiler's graphs, breaks (and kernels) around its first call.
STRUCTURE_PROBES = {"surge": _SurgeStructure, "torch.compile": _TorchCompileStructure}


def explain_counts(instance, target, inputs, backend=None):
    """(graph count, graph-break count) from surge.explain, or None when it is missing."""
    import surge

    explain = getattr(surge, "explain", None)
    if explain is None:
        return None
    with torch.set_grad_enabled(instance.training), instance.autocast_context(inputs):
        report = explain(target, backend=backend)(*instance.call_args(inputs))
    return report.graph_count, report.graph_break_count


def prepare_contender(cfg: BenchConfig, instance, name: str, expected, inputs, check_inputs,
                      reference=None) -> tuple[ContenderResult, object]:
    """Compile ``name``'s copy of the workload, time its first call, check it against eager;
    returns the result so far and the step to time (None when it failed)."""
    result = ContenderResult()
    try:
        contender = make_contender(name, cfg.surge_backend)
    except NotAvailable as e:
        return ContenderResult(status="not available", message=str(e)), None
    try:
        target = instance.fresh_target()
        if base_name(name) == "surge":
            # Capture afresh (the disk caches stay): a capture an earlier workload of this
            # process left in memory would hide whether this one compiles or falls back.
            import surge

            surge.reset()
        # The tiny-size run only measures overhead: no need to explain it again.
        probe = STRUCTURE_PROBES.get(base_name(name))
        structure = probe() if cfg.scale != "tiny" and probe is not None else None
        compiled = contender.compile(target)
        step = lambda: instance.run(compiled, target, inputs)  # noqa: E731
        result.first_call_s, _ = timing.timed_once(step, cfg.device)
        if structure is not None:
            structure.finish(result, instance, target, inputs, cfg.surge_backend)
        if instance.stateful and name != "eager":
            # a call's result depends on the calls before it: the reference is one eager call
            # from the state this contender's calls left
            twin = copy.deepcopy(target)
            expected = instance.run(twin, twin, check_inputs)
        if expected is not None:
            actual = instance.run(compiled, target, check_inputs)
            if reference is not None:
                ok, result.max_abs_error = compare_low_precision(actual, expected, reference)
            else:
                ok, result.max_abs_error = compare(actual, expected, *instance.tolerance)
            if not ok:
                result.status = "wrong"
                result.message = f"differs from eager: max abs error {result.max_abs_error:.3g}"
        return result, step
    except Exception as e:  # one contender failing must not stop the bench
        _failed(result, e)
        return result, None


def _failed(result: ContenderResult, e: BaseException) -> None:
    if os.environ.get("SURGE_BENCH_TRACEBACK"):
        traceback.print_exc()
    result.status = "error"
    result.message = short_error(e)


def run_contenders(cfg: BenchConfig, instance, expected, inputs, check_inputs,
                   reference=None) -> dict[str, ContenderResult]:
    """Every contender compiled and checked, then timed in interleaved rounds
    (``timing.interleaved_medians``), then its peak memory measured alone."""
    results, steps = {}, {}
    for name in cfg.contenders:
        results[name], step = prepare_contender(
            cfg, instance, name, None if name == "eager" else expected, inputs, check_inputs, reference)
        if step is not None:
            steps[name] = step
    times = {}
    try:
        times = timing.interleaved_times(steps, cfg.device, budget_s=cfg.budget_s)
        medians = {name: statistics.median(t) for name, t in times.items()}
    except Exception:   # a step that ran once and then failed: time each alone to tell which
        medians = {}
        for name, step in list(steps.items()):
            try:
                medians[name] = timing.median_time(step, cfg.device, budget_s=cfg.budget_s)
            except Exception as error:
                _failed(results[name], error)
                del steps[name]
    for name, step in steps.items():
        result = results[name]
        result.median_s = medians.get(name)
        if name != "eager" and name in times and "eager" in times:
            result.speedup_spread = timing.speedup(times["eager"], times[name]).spread
        try:
            result.peak_memory_bytes = timing.peak_memory(step, cfg.device)
        except Exception as e:
            _failed(result, e)
        if instance.bytes_moved and result.median_s:
            result.bandwidth_Bps = instance.bytes_moved / result.median_s
    steps.clear()
    gc.collect()
    if cfg.device.startswith("cuda"):
        torch.cuda.empty_cache()
    return results


def not_run(cfg: BenchConfig, name: str, status: str, why: str) -> WorkloadResult:
    """The row of a workload that did not run: every contender says why."""
    return WorkloadResult(name, workloads.DESCRIPTIONS[name], {}, "-", name.endswith(".train"), None,
                          {c: ContenderResult(status=status, message=why) for c in cfg.contenders})


def run_workload(cfg: BenchConfig, name: str, peer=None) -> WorkloadResult:
    """One workload's row; ``peer`` (a ``StoredPeer``) supplies torch.compile's where it can."""
    try:
        instance = workloads.build(name, cfg.device, cfg.scale)
        inputs, check_inputs = instance.make_inputs(0), instance.make_inputs(1)
        eager_target = instance.fresh_target()
        expected = None if instance.stateful else instance.run(eager_target, eager_target, check_inputs)
        reference = None if instance.stateful else float32_reference(instance, check_inputs)
    except workloads.Unavailable as e:
        return not_run(cfg, name, "not available", str(e))
    except Exception as e:  # a model that its library cannot build or run here: the others still run
        if os.environ.get("SURGE_BENCH_TRACEBACK"):
            traceback.print_exc()
        return not_run(cfg, name, "error", "building or running it in eager failed: " + short_error(e))
    dtype = str(instance.dtype).replace("torch.", "")
    stored = None
    if peer is not None and PEER in cfg.contenders:
        stored = peer.row(name, json.loads(json.dumps(instance.sizes, default=str)), dtype)
    run_cfg = dataclasses.replace(cfg, contenders=tuple(c for c in cfg.contenders if c != PEER)) if stored else cfg
    measured = run_contenders(run_cfg, instance, expected, inputs, check_inputs, reference)
    results = {c: ContenderResult(**stored) if stored and c == PEER else measured[c]
               for c in cfg.contenders if c in measured or (stored and c == PEER)}
    wr = WorkloadResult(
        name, workloads.DESCRIPTIONS[name], instance.sizes, dtype,
        instance.training, instance.bytes_moved, results,
    )
    if cfg.overhead:
        measure_overhead(cfg, name, wr)
    if cfg.fresh_process_compile:
        for contender in COMPILING_CONTENDERS:
            if (contender in results and results[contender].status in ("ok", "wrong")
                    and results[contender].stored_speedup is None):
                measure_fresh_process_compile(cfg, name, contender, results[contender])
    return wr


def measure_overhead(cfg: BenchConfig, name: str, wr: WorkloadResult) -> None:
    """Per-call time over eager's on the workload at its tiny size (a separate compile)."""
    tiny_cfg = dataclasses.replace(cfg, scale="tiny", budget_s=min(cfg.budget_s, 0.5))
    instance = workloads.build(name, cfg.device, "tiny")
    inputs = instance.make_inputs(0)
    tiny = run_contenders(tiny_cfg, instance, None, inputs, inputs)
    eager = tiny.get("eager")
    for contender, result in wr.results.items():
        measured = tiny.get(contender)
        if contender == "eager" or not eager or not measured or measured.median_s is None:
            continue
        result.overhead_s = measured.median_s - eager.median_s


# ---------------------------------------------------------------- fresh processes

def measure_fresh_process_compile(cfg: BenchConfig, name: str, contender: str, result: ContenderResult) -> None:
    """First-call time in a new process: once with empty caches, then again with them filled."""
    with tempfile.TemporaryDirectory(prefix="surge-bench-cache-") as cache_root:
        env = dict(os.environ)
        # The child must import this same surge, installed or not.
        package_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
        for var in ("SURGE_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR"):
            env[var] = os.path.join(cache_root, var.lower())
        try:
            result.cold_compile_s = probe_in_subprocess(cfg, name, contender, env)
            result.warm_compile_s = probe_in_subprocess(cfg, name, contender, env)
        except RuntimeError as e:
            result.message = (result.message + "; " if result.message else "") + str(e)


def probe_in_subprocess(cfg: BenchConfig, name: str, contender: str, env: dict) -> float:
    cmd = [sys.executable, "-m", "surge", "bench", "--probe", contender, "--only", name,
           "--device", cfg.device]
    if cfg.scale == "quick":
        cmd.append("--quick")
    cmd += ["--suite", cfg.suite]
    if cfg.surge_backend is not None:
        cmd += ["--surge-backend", cfg.surge_backend]
    if not cfg.device.startswith("cuda"):
        cmd += ["--threads", str(torch.get_num_threads())]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"fresh-process compile of {contender} failed: {tail[:200]}")
    return json.loads(lines[-1])["first_call_s"]


def probe_first_call(cfg: BenchConfig, name: str, contender: str) -> float:
    """The body of a fresh process: one first call of ``contender`` on ``name``.

    The timed span starts before the contender is made and its ``compile(target)``
    is called: whatever either one imports or prepares there (torch.compile imports
    Dynamo in that call, surge its frontend) counts, as it does for a user."""
    instance = workloads.build(name, cfg.device, cfg.scale)
    inputs = instance.make_inputs(0)
    target = instance.fresh_target()

    def compile_and_call():
        compiled = make_contender(contender, cfg.surge_backend).compile(target)
        return instance.run(compiled, target, inputs)
    seconds, _ = timing.timed_once(compile_and_call, cfg.device)
    return seconds


# ---------------------------------------------------------------- the whole run

def selected_workloads(only: list[str] | None, suite: str = "default") -> list[str]:
    """The suite's workloads, or those ``only`` names (a name, or a pattern such as ``hf.*.infer``)."""
    known = workloads.names(suite)
    if not only:
        return known
    selected, unknown = [], []
    for pattern in only:
        matches = fnmatch.filter(known, pattern) if any(c in pattern for c in "*?[") else \
            [pattern] if pattern in known else []
        selected += [n for n in matches if n not in selected]
        if not matches:
            unknown.append(pattern)
    if unknown:
        raise ValueError(f"unknown workload(s) {unknown} in suite {suite!r}; known: {', '.join(known)}")
    return selected


def run_bench(cfg: BenchConfig, on_result=None) -> dict:
    """Run every selected workload; returns the JSON-ready results."""
    from .bench_report import environment

    names = selected_workloads(cfg.only, cfg.suite)
    copy_bytes = (1 << 30) if cfg.device.startswith("cuda") else (64 << 20 if cfg.scale != "full" else 256 << 20)
    env = environment(cfg)
    env["copy_bandwidth_Bps"] = timing.copy_bandwidth(cfg.device, copy_bytes)
    peer = None
    if cfg.stored_peer:
        peer = StoredPeer(cfg.stored_peer, env)
        if peer.mismatch:
            print(f"surge bench: not reusing stored rows: {peer.mismatch}; torch.compile runs for them",
                  file=sys.stderr)
    results = []
    started = time.perf_counter()
    for name in names:
        elapsed = time.perf_counter() - started
        if cfg.time_limit_s is not None and elapsed > cfg.time_limit_s:
            wr = not_run(cfg, name, "not run", f"the run's time limit of {cfg.time_limit_s:.0f}s was reached")
        else:
            wr = run_workload(cfg, name, peer)
        results.append(wr)
        if on_result is not None:
            on_result(wr, env)
    return {"environment": env, "workloads": results}
