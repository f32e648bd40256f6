"""Guard cost of a dynamic entry vs a static one, and compile time, on the CPU.

1. Per-call time on a cache hit of ``f(a, b, c, d) = a + b`` (four small tensors,
   backend "eager"), compiled static and compiled with every size symbolic
   (``dynamic=True``): the difference is what checking symbolic sizes costs.
2. The same for a 2-d input with a stride that depends on the symbol.
3. First call (capture + guards + backend) of a small transformer block, static
   vs dynamic, with the eager and aot_eager backends.

Run: python bench/dynamic_guards.py [--repeats 9]
"""
from __future__ import annotations

import argparse
import time
import timeit
import types

import torch
import torch.nn.functional as F

import surge


def fresh(fn, tag: str):
    """A copy of ``fn`` with its own code object, so that it gets its own cache entries."""
    code = fn.__code__.replace(co_name=f"{fn.__name__}_{tag}")
    return types.FunctionType(code, fn.__globals__, code.co_name)


def per_call_us(fns, args, repeats: int) -> list:
    """Per-call time of each of ``fns`` on ``args``: the best of ``repeats`` rounds, the
    functions measured in turn within each round (the machine's load hits all alike)."""
    number = 20000
    best = [float("inf")] * len(fns)
    for fn in fns:
        for _ in range(1000):
            fn(*args)
    for _ in range(repeats):
        for i, fn in enumerate(fns):
            t = timeit.timeit(lambda: fn(*args), number=number) / number * 1e6
            best[i] = min(best[i], t)
    return best


def add(a, b, c, d):
    return a + b


def rows(x, w):
    return x @ w


def block(x, w):
    b, t, c = x.shape
    q, k, v = (x @ w).split(c, dim=2)
    q, k, v = (z.view(b, t, 4, c // 4).transpose(1, 2) for z in (q, k, v))
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return F.layer_norm(y.transpose(1, 2).reshape(b, t, c) + x, (c,))


def first_call_s(fn, args, **kw) -> float:
    surge.reset()
    compiled = surge.compile(fn, options={"frontend_cache": False}, **kw)
    start = time.perf_counter()
    compiled(*args)
    return time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    small = [torch.randn(4) for _ in range(4)]
    x2, w2 = torch.randn(6, 8), torch.randn(8, 8)
    print("| measure | static | dynamic | difference |")
    print("| --- | --- | --- | --- |")
    for name, fn, inputs in (("per call, a + b of 4 tensors", add, small),
                             ("per call, x @ w (symbolic rows, stride)", rows, (x2, w2))):
        static, dynamic, eager = per_call_us(
            [surge.compile(fresh(fn, "static"), backend="eager", dynamic=False),
             surge.compile(fresh(fn, "dynamic"), backend="eager", dynamic=True), fn], inputs, args.repeats)
        print(f"| {name} (eager {eager:.2f} us) | {static:.2f} us | {dynamic:.2f} us | {dynamic - static:+.2f} us |")
    xb, wb = torch.randn(2, 16, 32), torch.randn(32, 96)
    with torch.no_grad():
        for backend in ("eager", "aot_eager"):
            first_call_s(block, (xb, wb), backend=backend)  # warm torch's own first-use costs
            static = min(first_call_s(block, (xb, wb), backend=backend, dynamic=False) for _ in range(3))
            dynamic = min(first_call_s(block, (xb, wb), backend=backend, dynamic=True) for _ in range(3))
            print(f"| first call of an attention block, {backend} | {static * 1e3:.1f} ms | "
                  f"{dynamic * 1e3:.1f} ms | x{dynamic / static:.2f} |")


if __name__ == "__main__":
    main()
