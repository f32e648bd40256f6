"""Lines of surge's and torch.compile's generated code around a pattern, side by side.

    python bench/generated_code.py hf_gpt2_train --grep efficient_attention [--context 3]

Runs one call of the workload under each compiler with empty caches in a fresh
temporary folder, then prints every line of the generated Python (surge's host
modules, Inductor's output code) that matches the regular expression, with
``--context`` lines before it. Both compilers write the layout they hand a
library call into that line or the lines above it (``as_strided`` /
``reinterpret_tensor``), so this shows, for instance, which strides each passes
to an attention kernel: what a profile shows as the same kernel taking longer.
"""
from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def matching_lines(folder: str, pattern: re.Pattern, context: int) -> list[str]:
    found = []
    for root, _, files in os.walk(folder):
        for name in sorted(files):
            if not name.endswith(".py"):
                continue
            path = os.path.join(root, name)
            with open(path, errors="replace") as f:
                lines = f.read().splitlines()
            for i, line in enumerate(lines):
                if pattern.search(line):
                    block = [ln.strip() for ln in lines[max(0, i - context):i + 1]]
                    found.append(f"{os.path.relpath(path, folder)}:{i + 1}\n    " + "\n    ".join(block))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workload")
    parser.add_argument("--grep", required=True, help="regular expression")
    parser.add_argument("--context", type=int, default=3)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--scale", default="full")
    parser.add_argument("--limit", type=int, default=12, help="matches shown per compiler")
    args = parser.parse_args()
    root = tempfile.mkdtemp(prefix="generated-code-")
    folders = {"surge": os.path.join(root, "surge"), "torch.compile": os.path.join(root, "inductor")}
    os.environ["SURGE_CACHE_DIR"] = folders["surge"]
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = folders["torch.compile"]
    os.environ["TRITON_CACHE_DIR"] = os.path.join(root, "triton")

    import torch

    import surge
    from surge.tools import workloads
    from surge.tools.contenders import make_contender

    instance = workloads.build(args.workload, args.device, args.scale)
    inputs = instance.make_inputs(0)
    for contender in folders:
        target = instance.fresh_target()
        compiled = make_contender(contender, None).compile(target)
        instance.run(compiled, target, inputs)
    if args.device == "cuda":
        torch.cuda.synchronize()
    surge.reset()
    pattern = re.compile(args.grep)
    for contender, folder in folders.items():
        found = matching_lines(folder, pattern, args.context)
        print(f"== {contender}: {len(found)} lines match {args.grep!r}")
        for block in found[:args.limit]:
            print(block)


if __name__ == "__main__":
    main()
