"""GPU diagnosis of the model workloads: where surge's time goes next to torch.compile's.

For each of gpt_bundled, gpt_block and llama_bundled (full size on CUDA): compile
with surge and with torch.compile, check surge against eager, print surge's
fallbacks and counters, the time per call of eager / surge / torch.compile, the
peak memory of one forward, and the top CUDA kernels of each under
torch.profiler. Then the lm-head matmul of GPT-2 in bf16 with contiguous and
with 16-byte aligned logit rows.

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
    expected, actual = runs["eager"](), runs["surge"]()
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


def lm_head_alignment(tokens: int = 8192, width: int = 768, vocab: int = 50257) -> None:
    """GPT-2's tied lm head in bf16: the vocabulary (50257) leaves the logits' rows unaligned.
    Times eager's matmul into contiguous logits against the same matmul into logits whose
    rows are padded to 16 bytes (``mm.out``), and the copy back to contiguous."""
    x = torch.randn(tokens, width, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(vocab, width, device="cuda", dtype=torch.bfloat16)
    padded_vocab = (vocab + 7) // 8 * 8
    padded = torch.empty_strided((tokens, vocab), (padded_vocab, 1), device="cuda", dtype=torch.bfloat16)
    dense = torch.empty(tokens, vocab, device="cuda", dtype=torch.bfloat16)
    print(f"\n== lm head {tokens}x{width} @ {width}x{vocab} (bf16)")
    print(f"  x @ w.t() (contiguous logits):      {time_ms(lambda: x @ w.t()):8.3f} ms")
    print(f"  mm.out into rows padded to {padded_vocab}: "
          f"{time_ms(lambda: torch.ops.aten.mm.out(x, w.t(), out=padded)):8.3f} ms")
    print(f"  copy padded -> contiguous:          {time_ms(lambda: dense.copy_(padded)):8.3f} ms")
    w_padded = torch.zeros(padded_vocab, width, device="cuda", dtype=torch.bfloat16)
    w_padded[:vocab] = w
    print(f"  padded weight, padded logits:       {time_ms(lambda: x @ w_padded.t()):8.3f} ms "
          f"(+ padding the weight: {time_ms(lambda: w_padded[:vocab].copy_(w)):.3f} ms)")
    aligned = vocab // 8 * 8
    print(f"  aligned columns into contiguous logits + tail: "
          f"{time_ms(lambda: (torch.ops.aten.mm.out(x, w[:aligned].t(), out=dense[:, :aligned]), torch.ops.aten.mm.out(x, w[aligned:].t(), out=dense[:, aligned:]))):8.3f} ms")
    transposed = torch.empty(vocab, tokens, device="cuda", dtype=torch.bfloat16)
    print(f"  transposed logits (w @ x.t()):      {time_ms(lambda: torch.ops.aten.mm.out(w, x.t(), out=transposed)):8.3f} ms")
    top_kernels("lm head, padded weight", lambda: x @ w_padded.t(), 4)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", default="full", choices=workloads.SCALES)
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--rows", type=int, default=14)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("bench/gpu_diag.py needs a CUDA device")
    with torch.no_grad():
        for name in filter(None, args.workloads.split(",")):
            diagnose(name, args.scale, args.rows)
        lm_head_alignment()


if __name__ == "__main__":
    main()
