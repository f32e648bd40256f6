"""GPU diagnosis of the model workloads: where surge's time goes next to torch.compile's.

For each of gpt_bundled, gpt_block and llama_bundled (full size on CUDA): compile
with surge and with torch.compile, check surge against eager, print surge's
fallbacks and counters, the time per call of eager / surge / torch.compile, the
peak memory of one forward, and the top CUDA kernels of each under
torch.profiler. Then misaligned bf16 matmuls (GPT-2's 50257-wide lm head among
them), eager against padded, with the padding decision surge's lowering makes.

    python bench/gpu_diag.py [--scale full|quick] [--workloads gpt_bundled,gpt_block] [--rows 14]
"""
from __future__ import annotations

import argparse
import os

os.environ.setdefault("SURGE_LOGS", "fallbacks")

import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

import surge  # noqa: E402
from surge.tools import workloads  # noqa: E402

WORKLOADS = ("gpt_bundled", "gpt_block", "llama_bundled")


def time_ms(fn, reps: int = 20) -> float:
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / reps


def peak_mb(fn) -> float:
    fn()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    fn()
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - base) / 2 ** 20


def top_kernels(name: str, fn, rows: int) -> None:
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            fn()
        torch.cuda.synchronize()
    print(f"\n== {name}: top CUDA kernels over 5 calls")
    print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=rows, max_name_column_width=80))


def diagnose(name: str, scale: str, rows: int) -> None:
    inst = workloads.build(name, "cuda", scale)
    inputs = inst.make_inputs(0)
    eager = inst.fresh_target()
    ours = inst.fresh_target()
    theirs = inst.fresh_target()
    surge.reset()
    surge.counters.reset()
    compiled = surge.compile(ours)
    peer = torch.compile(theirs)
    runs = {"eager": lambda: inst.run(eager, eager, inputs),
            "surge": lambda: inst.run(compiled, ours, inputs),
            "torch.compile": lambda: inst.run(peer, theirs, inputs)}
    expected, actual = runs["eager"](), runs["surge"]()   # Instance.run: no_grad unless training
    for e, a in zip(expected if isinstance(expected, (list, tuple)) else [expected],
                    actual if isinstance(actual, (list, tuple)) else [actual]):
        err = (e.float() - a.float()).abs().max().item()
        print(f"{name}: max |surge - eager| = {err:.3g}")
    first = lambda out: out[0] if isinstance(out, (list, tuple)) else out  # noqa: E731
    print(f"{name}: output strides: eager {first(expected).stride()}, surge {first(actual).stride()}, "
          f"torch.compile {first(runs['torch.compile']()).stride()}")
    print(f"{name}: sizes {inst.sizes}, counters {dict(surge.counters)}")
    if surge.counters["fallbacks"]:
        print(f"{name}: FALLBACKS: {surge.counters['fallbacks']} (reasons above, SURGE_LOGS=fallbacks)")
    for label, fn in runs.items():
        print(f"{name}: {label:14s} {time_ms(fn):8.3f} ms/call   peak {peak_mb(fn):9.1f} MiB")
    for label in ("surge", "torch.compile"):
        top_kernels(f"{name} / {label}", runs[label], rows)


def matmul_padding_sweep() -> None:
    """Misaligned bf16 matmuls (N or K not a multiple of 8) as eager runs them, against the
    padded form surge's lowering uses (zero-padded operand copies, then the aligned mm), with
    what ``matmul_padding.worth_padding`` decides for each size."""
    from surge.lowering.matmul_padding import _round_up, worth_padding
    print("\n== misaligned bf16 matmuls: eager vs padded (pad copies included)")
    print(f"{'M':>6} {'K':>6} {'N':>6} {'eager ms':>9} {'padded ms':>10} {'pads?':>6}")
    for m, k, n in ((1, 768, 50257), (16, 768, 50257), (128, 768, 50257), (1024, 768, 50257),
                    (8192, 768, 50257), (8192, 50257, 768), (4096, 4093, 4096), (512, 1001, 1001)):
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
        k_pad, n_pad = _round_up(k), _round_up(n)
        x_pad = torch.zeros(m, k_pad, device="cuda", dtype=torch.bfloat16)
        w_pad = torch.zeros(n_pad, k_pad, device="cuda", dtype=torch.bfloat16)

        def padded():
            if k_pad != k:
                x_pad[:, :k].copy_(x)
            w_pad[:n, :k].copy_(w)
            return (x_pad if k_pad != k else x) @ w_pad.t()
        decision = worth_padding(m, k, n, k_pad != k, n_pad != n, 2)
        print(f"{m:6} {k:6} {n:6} {time_ms(lambda: x @ w.t()):9.3f} {time_ms(padded):10.3f} "
              f"{'yes' if decision else 'no':>6}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", default="full", choices=workloads.SCALES)
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--rows", type=int, default=14)
    parser.add_argument("--padding-only", action="store_true", help="only the matmul padding sweep")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("bench/gpu_diag.py needs a CUDA device")
    for name in [] if args.padding_only else filter(None, args.workloads.split(",")):
        diagnose(name, args.scale, args.rows)   # a training workload runs its backward too
    with torch.no_grad():
        matmul_padding_sweep()


if __name__ == "__main__":
    main()
