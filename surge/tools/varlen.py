"""``python -m surge bench --suite varlen``: variable-length serving, compiles included.

A GPT-2-style model (``surge.models.gpt``, random weights) answers N calls whose
sequence lengths are drawn at random, as a server sees them. For each contender
(eager, torch.compile, surge) the whole run is timed, compiles included: a compiler
that recompiles per length pays for it here. Then, at one fixed length, the steady
state per call of the dynamic graph each compiler ended with, and of surge's static
graph at that length (``dynamic=False``): a dynamic graph's goal is to run within 10%
of the static one. Every contender's outputs are checked against eager on the same
calls.

Sizes: CUDA as the anchor (GPT-2 with 6 layers, bf16, batch 4, 40 calls of lengths
16-1024, steady state at 512); CPU small (2 layers, 64 wide, batch 2, 16 calls of
lengths 8-128, steady state at 64); ``--quick`` smaller still.
"""
from __future__ import annotations

import copy
import dataclasses
import json
import random
import statistics
import sys
import time

import torch

from ..models.gpt import GPT, GPTConfig


@dataclasses.dataclass(frozen=True)
class VarlenSizes:
    config: GPTConfig
    dtype: torch.dtype
    batch: int
    calls: int
    shortest: int
    longest: int
    steady_length: int


def sizes_for(device: str, quick: bool) -> VarlenSizes:
    if device.startswith("cuda") and not quick:
        return VarlenSizes(GPTConfig(n_layer=6, n_head=12, n_embd=768, block_size=1024, use_sdpa=True),
                           torch.bfloat16, batch=4, calls=40, shortest=16, longest=1024, steady_length=512)
    if quick:
        return VarlenSizes(GPTConfig(vocab_size=256, block_size=64, n_layer=1, n_head=2, n_embd=32),
                           torch.float32, batch=2, calls=8, shortest=4, longest=64, steady_length=32)
    return VarlenSizes(GPTConfig(vocab_size=512, block_size=128, n_layer=2, n_head=4, n_embd=64),
                       torch.float32, batch=2, calls=16, shortest=8, longest=128, steady_length=64)


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _compilers(names: tuple, backend) -> dict:
    import surge

    out = {"eager": lambda m: m,
           "torch.compile": lambda m: torch.compile(m),
           "surge": lambda m: surge.compile(m, backend=backend),
           "surge static": lambda m: surge.compile(m, backend=backend, dynamic=False)}
    return {n: out[n] for n in names}


def _steady_ms(fn, idx, device: str, repeats: int = 20) -> float:
    for _ in range(3):
        fn(idx)
    times = []
    for _ in range(repeats):
        _sync(device)
        t = time.perf_counter()
        fn(idx)
        _sync(device)
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3


def run_varlen(device: str, quick: bool = False, contenders=("eager", "torch.compile", "surge"),
               backend=None, seed: int = 0) -> dict:
    """The run's results: per contender, total seconds, steady-state ms, graphs and errors."""
    import surge

    sizes = sizes_for(device, quick)
    torch.manual_seed(seed)
    model = GPT(sizes.config).to(device=device, dtype=sizes.dtype).eval()
    rng = random.Random(seed)
    lengths = [rng.randint(sizes.shortest, sizes.longest) for _ in range(sizes.calls)]
    calls = [torch.randint(0, sizes.config.vocab_size, (sizes.batch, t), device=device) for t in lengths]
    steady = torch.randint(0, sizes.config.vocab_size, (sizes.batch, sizes.steady_length), device=device)
    with torch.no_grad():
        expected = [model(idx) for idx in calls]
    tolerance = 5e-2 if sizes.dtype in (torch.bfloat16, torch.float16) else 1e-3
    names = tuple(contenders) + (("surge static",) if "surge" in contenders else ())
    results = {}
    for name, make in _compilers(names, backend).items():
        _reset_torch_compile()
        surge.reset()
        surge.counters.reset()
        target = copy.deepcopy(model)
        row = {}
        with torch.no_grad():
            if name != "surge static":   # the static graph is only timed at the fixed length
                _sync(device)
                start = time.perf_counter()
                compiled = make(target)
                error = 0.0
                for idx, want in zip(calls, expected):
                    got = compiled(idx)
                    error = max(error, (got.float() - want.float()).abs().max().item())
                _sync(device)
                row["total_s"] = time.perf_counter() - start
                row["max_abs_error"] = error
                row["ok"] = error <= tolerance
            else:
                compiled = make(target)
            row["steady_ms"] = _steady_ms(compiled, steady, device)
        if name.startswith("surge"):
            row.update(graphs=surge.counters["graphs"], recompiles=surge.counters["recompiles"],
                       fallbacks=surge.counters["fallbacks"], size_variants=surge.counters["size_variants"],
                       static_fallbacks=surge.counters["static_fallbacks"])
        if name == "torch.compile":
            from torch._dynamo.utils import counters as dynamo_counters

            row["graphs"] = dynamo_counters["stats"]["unique_graphs"]
        results[name] = row
    _reset_torch_compile()
    return {"device": device, "dtype": str(sizes.dtype).replace("torch.", ""), "batch": sizes.batch,
            "calls": sizes.calls, "lengths": lengths, "steady_length": sizes.steady_length,
            "model": dataclasses.asdict(sizes.config), "threads": torch.get_num_threads(), "results": results}


def format_run(run: dict) -> str:
    cfg = run["model"]
    lines = [f"variable-length run on {run['device']} ({run['threads']} threads): GPT {cfg['n_layer']} layers x "
             f"{cfg['n_embd']}, {run['dtype']}, batch {run['batch']}, {run['calls']} calls of lengths "
             f"{min(run['lengths'])}-{max(run['lengths'])}; steady state at length {run['steady_length']}",
             f"{'contender':14s} {'total (s)':>10s} {'steady (ms)':>12s} {'graphs':>7s}  check"]
    eager = run["results"].get("eager", {}).get("total_s")
    for name, row in run["results"].items():
        total = f"{row['total_s']:10.2f}" if "total_s" in row else f"{'-':>10s}"
        graphs = f"{row['graphs']:7d}" if "graphs" in row else f"{'-':>7s}"
        check = ("ok" if row["ok"] else f"WRONG ({row['max_abs_error']:.2e})") if "ok" in row else ""
        ratio = f"  ({row['total_s'] / eager:.2f}x eager's total)" if eager and "total_s" in row else ""
        lines.append(f"{name:14s} {total} {row['steady_ms']:12.3f} {graphs}  {check}{ratio}")
    dyn, static = run["results"].get("surge"), run["results"].get("surge static")
    if dyn and static:
        lines.append(f"surge's dynamic graph at length {run['steady_length']}: "
                     f"{dyn['steady_ms'] / static['steady_ms']:.2f}x its static graph's time per call")
    return "\n".join(lines)


def varlen_main(args, device: str, contenders: tuple) -> int:
    run = run_varlen(device, quick=args.quick, contenders=contenders, backend=args.surge_backend)
    print(format_run(run))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(run, f, indent=2)
    wrong = [n for n, r in run["results"].items() if r.get("ok") is False]
    if wrong:
        print(f"surge bench: results differ from eager: {', '.join(wrong)}", file=sys.stderr)
        return 1
    return 0


def _reset_torch_compile() -> None:
    """Forget torch.compile's compiled code between contenders, without importing Dynamo
    when it has not run (an import would change how surge's own rows start up)."""
    if "torch._dynamo" in sys.modules:
        torch.compiler.reset()
