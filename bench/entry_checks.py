"""What a cache hit's checks cost on models nobody here wrote (timm, transformers).

For each model: capture its forward once (backend "eager", inference), then time the
entry's checks alone: the compiled graph is replaced by a function that raises, so the
time is the guards and the reads of the graph inputs, nothing after them. Timed in CPU
time of this thread (``time.thread_time``), best of ``--batches`` batches of 20 calls,
median of ``--rounds`` such bests: on a shared machine, wall-clock time of a long loop
counts other processes' time slices too.

Run: python bench/entry_checks.py [resnet18 resnet50 convnext_tiny hf:gpt2 hf:bert]
(timm models need timm; ``hf:`` models need transformers; a model missing is skipped).
"""
from __future__ import annotations

import argparse
import re
import statistics
import time

import torch

import surge

DEFAULT_MODELS = ["resnet18", "resnet50", "convnext_tiny", "hf:gpt2", "hf:bert"]


class _GraphReached(Exception):
    pass


def _graph_reached(*_args):
    raise _GraphReached


def build(name: str):
    """(model in eval mode, its example inputs)."""
    if name.startswith("hf:"):
        import transformers

        if name == "hf:gpt2":
            model = transformers.GPT2Model(transformers.GPT2Config(n_layer=12, n_embd=768, n_head=12))
        elif name == "hf:bert":
            model = transformers.BertModel(transformers.BertConfig())
        else:
            raise ValueError(f"unknown transformers model {name}")
        return model.eval(), (torch.randint(0, 1000, (1, 16)),)
    import timm

    try:   # a ViT checks its input size: build it for the small image
        model = timm.create_model(name, img_size=32)
    except TypeError:   # a convnet takes any size
        model = timm.create_model(name)
    return model.eval(), (torch.randn(1, 3, 32, 32),)


def measure(name: str, rounds: int, batches: int) -> dict:
    model, inputs = build(name)
    compiled = surge.compile(model, backend="eager")
    with torch.no_grad():
        compiled(*inputs)
    fn, args = type(model).forward, (model, *inputs)
    for entry in compiled._compiled_forward.func._surge_cache.entries:
        entry.run.__globals__["compiled"] = _graph_reached

    def passes(entry) -> bool:
        try:
            entry.run(fn, args, {})
        except _GraphReached:
            return True
        return False

    with torch.no_grad():
        found = [e for e in compiled._compiled_forward.func._surge_cache.entries if passes(e)]
    assert found, f"{name}: no entry's checks pass on the call they were made for"
    entry = found[0]

    def hit() -> bool:
        return passes(entry)

    with torch.no_grad():
        assert hit(), f"{name}: the entry's checks do not pass on the call they were made for"
        bests = []
        for _ in range(rounds):
            best = float("inf")
            for _ in range(batches):
                start = time.thread_time()
                for _ in range(20):
                    hit()
                best = min(best, (time.thread_time() - start) / 20)
            bests.append(best * 1e6)
    source = entry.source
    return {"model": name, "us": statistics.median(bests), "spread": (min(bests), max(bests)),
            "lines": len(source.splitlines()), "checks": source.count("return MISS"),
            "tensors": source.count(".requires_grad is ")
            + sum(int(n) for n in re.findall(r"# (\d+) tensors: ", source))}   # checked one by one, or in C++


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("models", nargs="*", default=DEFAULT_MODELS)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--batches", type=int, default=30)
    options = parser.parse_args()
    print(f"{'model':16s} {'check us':>9s} {'(min..max)':>15s} {'lines':>6s} {'checks':>7s} {'tensors':>8s}")
    for name in options.models:
        try:
            row = measure(name, options.rounds, options.batches)
        except ImportError as why:
            print(f"{name:16s} skipped ({why})")
            continue
        low, high = row["spread"]
        print(f"{name:16s} {row['us']:9.1f} {f'({low:.0f}..{high:.0f})':>15s} {row['lines']:6d} "
              f"{row['checks']:7d} {row['tensors']:8d}")


if __name__ == "__main__":
    main()
