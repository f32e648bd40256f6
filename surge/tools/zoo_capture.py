"""Capture of the model zoo, surge against torch.compile: graphs, breaks, recompiles, results.

``python -m surge.tools.zoo_capture`` builds each zoo workload at small sizes, compiles it
with surge and with torch.compile (both on an ``aot_eager``-style backend by default: this
measures capture, not kernels), calls it twice (fresh inputs on the second call: a second
call that compiles again is a recompile) and prints per workload the graphs and graph breaks
each compiler made, the graphs each made on the second call, surge's frames run eagerly,
the break reasons, and whether the compiled results match eager's.

Training rows run forward and loss under ``torch.autocast`` (bfloat16; on the CPU too, where
the bench's own training rows run in float32) and backward, and compare the loss and every
parameter's gradient. Goal: no row where surge makes more graphs, breaks or recompiles than
torch.compile.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
import traceback

import torch

from . import workloads
from .bench import (compare, compare_low_precision, flatten_tensors, float32_reference, relative_error,
                    selected_workloads, short_error)


@dataclasses.dataclass
class Capture:
    """What one compiler made over two calls of one workload."""

    graphs: int | None = None
    breaks: int | None = None
    second_call_graphs: int | None = None   # graphs compiled during the second call: recompiles
    fallbacks: int = 0                      # frames run eagerly (surge only)
    reasons: list = dataclasses.field(default_factory=list)
    matches: bool | None = None
    max_error: float | None = None
    error: str | None = None
    seconds: float | None = None            # compile and both calls, wall time

    @property
    def summary(self) -> str:
        if self.error is not None:
            return "error"
        text = f"{self.graphs}/{self.breaks}"
        if self.second_call_graphs:
            text += f" +{self.second_call_graphs}"
        if self.fallbacks:
            text += f" fb{self.fallbacks}"
        return text


@dataclasses.dataclass
class CaptureRow:
    name: str
    surge: Capture | None = None
    torch_compile: Capture | None = None
    message: str = ""   # why the row did not run

    @property
    def worse_than_torch_compile(self) -> bool:
        """surge made more graphs, breaks or recompiles than torch.compile, fell back, erred or differs."""
        s, t = self.surge, self.torch_compile
        if s is None or t is None or t.error is not None:
            return False
        if s.error is not None or s.fallbacks or s.matches is False:
            return True
        return (s.graphs > t.graphs or s.breaks > t.breaks
                or (s.second_call_graphs or 0) > (t.second_call_graphs or 0))


def with_autocast(instance: workloads.Instance, dtype) -> workloads.Instance:
    """A training instance run under ``torch.autocast(device, dtype)``, judged as a
    low-precision result against float32 (``bench.compare_low_precision``); inference unchanged."""
    if not instance.training or dtype is None:
        return instance
    return dataclasses.replace(instance, autocast=dtype, dtype=dtype)


class SurgeCapture:
    """surge.compile with every cache entry recorded (graphs, breaks, recompiles, fallbacks)."""

    name = "surge"

    def __init__(self, backend: str):
        self.backend = backend

    def compile(self, target):
        import surge
        from surge.api import build_options
        from surge.frontend.cache import private_cache
        from surge.frontend.entry import compile_callable

        surge.reset()
        self.records: list = []
        opts = build_options(backend=self.backend, fullgraph=False, dynamic=None, mode=None, options=None)
        return compile_callable(target, opts, cache_factory=private_cache, records=self.records)

    def mark(self):
        return len(self.records)

    def counts(self, first: int, second: int, capture: Capture) -> None:
        graphs = [e for e in self.records if e.graph is not None]
        capture.graphs = len(graphs)
        capture.second_call_graphs = sum(1 for e in self.records[first:second] if e.graph is not None)
        breaks = [e.graph_break for e in self.records if e.graph_break is not None]
        fallbacks = [e.fallback for e in self.records if e.fallback is not None]
        capture.breaks = len(breaks) + len(fallbacks)
        capture.fallbacks = len(fallbacks)
        capture.reasons = [str(b).replace("\n   ", "") for b in breaks + fallbacks]
        capture.reasons += [f"recompile: {e.recompile_reason}" for e in self.records if e.recompile_reason]


class TorchCompileCapture:
    """torch.compile (the peer) with Dynamo's counters read around the calls."""

    name = "torch.compile"

    def __init__(self, backend: str):
        self.backend = backend

    def compile(self, target):
        import torch._dynamo
        from torch._dynamo.utils import counters

        torch._dynamo.reset()
        counters.clear()
        self.counters = counters
        return torch.compile(target, backend=self.backend)

    def mark(self):
        return self.counters["stats"]["unique_graphs"]

    def counts(self, first: int, second: int, capture: Capture) -> None:
        capture.graphs = self.counters["stats"]["unique_graphs"]
        capture.second_call_graphs = second - first
        breaks = self.counters["graph_break"]
        capture.breaks = sum(breaks.values())
        capture.reasons = [f"{n}x {reason}" for reason, n in breaks.items()]


def judged(actual, expected, reference) -> tuple[list, list, list]:
    """The tensors of a low-precision result worth comparing: those eager itself gets
    right to some digits. A gradient that is zero in float32 (a bias before a batch norm)
    is rounding noise in bfloat16, eager's and any compiler's alike."""
    lists = flatten_tensors(actual), flatten_tensors(expected), flatten_tensors(reference)
    if len(set(map(len, lists))) != 1:
        return lists  # compare_low_precision says they differ
    # A tensor whose float32 norm is ~0 next to the result's largest (levit's attention biases:
    # 1e-6 of it) has only rounding noise to judge relatively; it is left out while surge's
    # absolute difference from float32 is negligible at the result's scale, judged otherwise.
    scale = max((float(torch.linalg.vector_norm(r.detach().double())) for r in lists[2]), default=0.0)
    kept = ([], [], [])
    for a, e, r in zip(*lists):
        r64 = r.detach().double()
        negligible = (float(torch.linalg.vector_norm(r64)) < 1e-4 * scale
                      and float(torch.linalg.vector_norm(a.detach().double() - r64)) < 1e-3 * scale)
        if relative_error(e, r) < 1.0 and not negligible:
            for out, t in zip(kept, (a, e, r)):
                out.append(t)
    return kept


def capture_one(compiler, instance, expected, reference, inputs, check_inputs) -> Capture:
    capture = Capture()
    start = time.perf_counter()
    try:
        target = instance.fresh_target()
        compiled = compiler.compile(target)
        instance.run(compiled, target, inputs)
        first = compiler.mark()
        actual = instance.run(compiled, target, check_inputs)
        compiler.counts(first, compiler.mark(), capture)
        if reference is not None:
            capture.matches, capture.max_error = compare_low_precision(*judged(actual, expected, reference))
        else:
            capture.matches, capture.max_error = compare(actual, expected, *instance.tolerance)
    except Exception as e:  # one model failing must not stop the table
        if os.environ.get("SURGE_BENCH_TRACEBACK"):
            traceback.print_exc()
        capture.error = short_error(e)
    capture.seconds = time.perf_counter() - start
    return capture


def in_low_precision(instance: workloads.Instance, dtype) -> workloads.Instance:
    """An inference instance with its weights and floating inputs in ``dtype`` (as the
    zoo runs inference on CUDA), judged against float32; training unchanged."""
    if instance.training or dtype is None or instance.dtype == dtype:
        return instance
    make_inputs = instance.make_inputs

    def cast_inputs(seed):
        return tuple(t.to(dtype) if isinstance(t, torch.Tensor) and t.is_floating_point() else t
                     for t in make_inputs(seed))

    return dataclasses.replace(instance, target=instance.target.to(dtype), make_inputs=cast_inputs, dtype=dtype)


def capture_workload(name: str, *, device: str = "cpu", scale: str = "quick", autocast=torch.bfloat16,
                     inference_dtype=None, backend: str = "aot_eager",
                     contenders=("surge", "torch.compile")) -> CaptureRow:
    return capture_instance(name, lambda: in_low_precision(workloads.build(name, device, scale), inference_dtype),
                            autocast=autocast, backend=backend, contenders=contenders)


def capture_instance(name: str, build, *, autocast=torch.bfloat16, backend: str = "aot_eager",
                     contenders=("surge", "torch.compile")) -> CaptureRow:
    """The row of the instance ``build()`` makes (a workload, or a model of a test)."""
    row = CaptureRow(name)
    try:
        instance = with_autocast(build(), autocast)
        inputs, check_inputs = instance.make_inputs(0), instance.make_inputs(1)
        eager_target = instance.fresh_target()
        expected = instance.run(eager_target, eager_target, check_inputs)
        low_precision = instance.autocast is not None or instance.dtype in (torch.bfloat16, torch.float16)
        reference = float32_reference(instance, check_inputs) if low_precision else None
    except workloads.Unavailable as e:
        row.message = f"not available: {e}"
        return row
    except Exception as e:
        row.message = f"eager failed: {short_error(e)}"
        return row
    compilers = {"surge": SurgeCapture, "torch.compile": TorchCompileCapture}
    for contender in contenders:
        capture = capture_one(compilers[contender](backend), instance, expected, reference, inputs, check_inputs)
        setattr(row, "surge" if contender == "surge" else "torch_compile", capture)
    return row


def format_rows(rows: list[CaptureRow], reasons: bool = True) -> str:
    """A table: graphs/breaks (+graphs on the 2nd call, fbN frames run eagerly) of each compiler."""
    def match(c: Capture | None) -> str:
        if c is None:
            return "-"
        if c.error is not None:
            return f"error: {c.error[:60]}"
        return ("ok" if c.matches else "DIFFERS") + (f" ({c.max_error:.1e})" if c.max_error is not None else "")

    def seconds(c: Capture | None) -> str:
        return f"{c.seconds:.1f}" if c is not None and c.seconds is not None else "-"

    header = ("workload", "surge g/b", "tc g/b", "surge result", "tc result", "s / tc s", "")
    lines = [header]
    for row in rows:
        if row.surge is None and row.torch_compile is None:
            lines.append((row.name, "-", "-", row.message[:70], "", "", ""))
            continue
        s, t = row.surge, row.torch_compile
        lines.append((row.name, s.summary if s else "-", t.summary if t else "-", match(s), match(t),
                      f"{seconds(s)} / {seconds(t)}", "<< worse" if row.worse_than_torch_compile else ""))
    widths = [max(len(str(line[i])) for line in lines) for i in range(len(header))]
    text = ["  ".join(str(v).ljust(w) for v, w in zip(line, widths)).rstrip() for line in lines]
    if reasons:
        for row in rows:
            for who, c in (("surge", row.surge), ("torch.compile", row.torch_compile)):
                for reason in (c.reasons if c else []):
                    text.append(f"  {row.name} [{who}] {reason[:300]}")
    return "\n".join(text)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m surge.tools.zoo_capture", description=__doc__.split("\n\n")[0])
    p.add_argument("--only", action="append", metavar="PATTERN", help="workloads ('hf.*', 'timm.resnet18.*')")
    p.add_argument("--device", default="cpu")
    p.add_argument("--scale", default="quick", choices=workloads.SCALES)
    p.add_argument("--backend", default="aot_eager", help="the backend of both compilers (default aot_eager)")
    p.add_argument("--no-autocast", action="store_true", help="training rows in float32, without autocast")
    p.add_argument("--bf16-inference", action="store_true",
                   help="inference rows in bfloat16 (weights and inputs), as the zoo runs them on CUDA")
    p.add_argument("--contenders", default="surge,torch.compile")
    p.add_argument("--json", metavar="FILE")
    args = p.parse_args(argv)
    only = [n for item in (args.only or []) for n in item.split(",") if n]
    names = selected_workloads(only or None, "models")
    rows = []
    for name in names:
        start = time.perf_counter()
        row = capture_workload(name, device=args.device, scale=args.scale, backend=args.backend,
                               autocast=None if args.no_autocast else torch.bfloat16,
                               inference_dtype=torch.bfloat16 if args.bf16_inference else None,
                               contenders=tuple(c for c in args.contenders.split(",") if c))
        rows.append(row)
        print(format_rows([row], reasons=False).splitlines()[-1], f"  [{time.perf_counter() - start:.0f}s]",
              flush=True)
    print()
    print(format_rows(rows))
    if args.json:
        with open(args.json, "w") as f:
            json.dump([dataclasses.asdict(r) for r in rows], f, indent=1, default=str)
    return 1 if any(r.worse_than_torch_compile for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
