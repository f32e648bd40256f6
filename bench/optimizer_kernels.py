"""Kernels and time of one optimizer step: surge against torch.compile (Inductor).

Adam, AdamW or SGD with momentum over N parameters of assorted sizes, or over GPT-2
small's parameter list (``--gpt2``), fp32, gradients fixed. Prints per compiler the
graphs, graph breaks and generated kernels (surge: ``surge.counters``; Inductor: its
``generated_kernel_count`` metric), and the median time of a step, with eager's.

    python bench/optimizer_kernels.py                       # Adam over 10 parameters
    python bench/optimizer_kernels.py --opt adamw --gpt2 --device cuda
    python bench/optimizer_kernels.py --foreach false --params 50
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch


def make_params(args, device):
    if args.gpt2:
        from surge.tools.optimizer_workloads import gpt2_parameter_shapes

        shapes = gpt2_parameter_shapes(12, 768, 50257, 1024)
    else:
        shapes = [(64 * (i + 1), 256) for i in range(args.params)]
    gen = torch.Generator(device=device).manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(s, generator=gen, device=device)) for s in shapes]
    for p in params:
        p.grad = torch.randn(p.shape, generator=gen, device=device)
    return params


def make_optimizer(args, params):
    foreach = {"default": None, "true": True, "false": False}[args.foreach]
    if args.opt == "sgd":
        return torch.optim.SGD(params, lr=0.01, momentum=0.9, foreach=foreach)
    cls = torch.optim.AdamW if args.opt == "adamw" else torch.optim.Adam
    return cls(params, lr=1e-3, foreach=foreach)


def median_time(step, device, repeats=20) -> float:
    times = []
    for _ in range(repeats):
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        step()
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def run_surge(args, device):
    import surge

    opt = make_optimizer(args, make_params(args, device))
    compiled = surge.compile(lambda: opt.step())
    for _ in range(3):
        compiled()
    counts = dict(surge.counters)
    return counts.get("graphs", 0), counts.get("graph_breaks", 0), counts.get("kernels"), median_time(compiled, device)


def run_inductor(args, device):
    import torch._dynamo
    from torch._dynamo.utils import counters
    from torch._inductor import metrics

    opt = make_optimizer(args, make_params(args, device))
    metrics.reset()
    compiled = torch.compile(lambda: opt.step())
    for _ in range(3):
        compiled()
    return (counters["stats"]["unique_graphs"], sum(counters["graph_break"].values()),
            metrics.generated_kernel_count, median_time(compiled, device))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--opt", choices=["adam", "adamw", "sgd"], default="adam")
    parser.add_argument("--foreach", choices=["default", "true", "false"], default="default")
    parser.add_argument("--params", type=int, default=10)
    parser.add_argument("--gpt2", action="store_true", help="GPT-2 small's 148 parameters (124M values)")
    args = parser.parse_args()
    eager_opt = make_optimizer(args, make_params(args, args.device))
    print(f"{args.opt} (foreach {args.foreach}) on {args.device}: eager {1e3 * median_time(eager_opt.step, args.device):.3f} ms")
    for name, run in (("surge", run_surge), ("torch.compile", run_inductor)):
        graphs, breaks, kernels, seconds = run(args, args.device)
        print(f"{name:14s} graphs {graphs}  breaks {breaks}  kernels {kernels}  step {1e3 * seconds:.3f} ms")


if __name__ == "__main__":
    main()
