"""Activation memory of a training step: eager vs surge's partitioned aot graphs.

The workload is a 12-layer MLP, each layer Linear -> LayerNorm -> GELU, and one
forward+backward step. Two numbers per contender:

- saved bytes: the tensors autograd keeps from the forward for the backward
  (counted with ``torch.autograd.graph.saved_tensors_hooks``, each storage once,
  parameters and the input excluded: they are alive anyway);
- peak bytes: the peak memory the step allocates above what was allocated
  before it (``torch.cuda.max_memory_allocated`` on CUDA; on CPU the running sum
  of the allocator's alloc/free events that ``torch.profiler`` records).

    python bench/aot_memory.py                 # batch 512, width 1024
    python bench/aot_memory.py --batch 64 --width 128 --json out.json
    python bench/aot_memory.py --peer          # also torch.compile(backend="aot_eager")
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import torch
import torch.fx
import torch.nn as nn

LAYERS = 12


def make_mlp(width: int) -> nn.Module:
    layers = []
    for _ in range(LAYERS):
        layers += [nn.Linear(width, width), nn.LayerNorm(width), nn.GELU()]
    return nn.Sequential(*layers)


def saved_activation_bytes(step, model: nn.Module, x: torch.Tensor) -> int:
    """Bytes autograd saves during ``step``'s forward, excluding parameters and input."""
    excluded = {p.untyped_storage().data_ptr() for p in model.parameters()}
    excluded.add(x.untyped_storage().data_ptr())
    seen: dict[int, int] = {}

    def pack(t):
        ptr = t.untyped_storage().data_ptr()
        if ptr not in excluded:
            seen[ptr] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = step(x).sum()
    loss.backward()
    model.zero_grad(set_to_none=True)
    return sum(seen.values())


def peak_step_bytes(step, model: nn.Module, x: torch.Tensor) -> int:
    def run():
        step(x).sum().backward()
        model.zero_grad(set_to_none=True)

    if x.is_cuda:
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        run()
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - base
    # On CPU: replay the allocator's alloc/free events recorded by the profiler.
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        run()
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    live = peak = 0
    for e in sorted(events, key=lambda e: e.start_ns()):
        live += e.nbytes()
        peak = max(peak, live)
    return peak


def surge_step(model: nn.Module, x: torch.Tensor):
    from surge.aot import aot_compile
    from surge.aot.backend import run_graph

    gm = torch.fx.symbolic_trace(model)
    return gm, aot_compile(gm, [x], fw_compiler=run_graph, bw_compiler=run_graph)


def measure(batch: int, width: int, device: str, peer: bool) -> dict:
    torch.manual_seed(0)
    model = make_mlp(width).to(device)
    x = torch.randn(batch, width, device=device)
    gm, compiled = surge_step(model, x)
    contenders = {"eager": (model, model), "surge": (gm, compiled)}
    if peer:
        contenders["torch.compile aot_eager"] = (model, torch.compile(model, backend="aot_eager"))
    results = {}
    for name, (owner, step) in contenders.items():
        step(x).sum().backward()  # warm up: compile, allocator caches
        owner.zero_grad(set_to_none=True)
        results[name] = {
            "saved_bytes": saved_activation_bytes(step, owner, x),
            "peak_bytes": peak_step_bytes(step, owner, x),
        }
    return {"layers": LAYERS, "batch": batch, "width": width, "device": device, "results": results}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--peer", action="store_true", help="also measure torch.compile(backend='aot_eager')")
    parser.add_argument("--json", help="write the results to this file")
    args = parser.parse_args(argv)
    report = measure(args.batch, args.width, args.device, args.peer)
    eager_saved = report["results"]["eager"]["saved_bytes"]
    print(f"{LAYERS}-layer MLP (Linear+LayerNorm+GELU), batch {args.batch}, width {args.width}, {args.device}")
    print(f"{'contender':<26}{'saved MiB':>12}{'vs eager':>10}{'peak MiB':>12}")
    for name, r in report["results"].items():
        print(f"{name:<26}{r['saved_bytes'] / 2**20:12.1f}{r['saved_bytes'] / eager_saved:10.2f}"
              f"{r['peak_bytes'] / 2**20:12.1f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
    return 0 if report["results"]["surge"]["saved_bytes"] <= eager_saved else 1


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    sys.exit(main())
