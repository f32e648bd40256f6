"""Instructions per element of surge's Triton kernels, read from their sm_90 SASS (no GPU needed).

    python bench/triton_sass.py                                  # every workload, fp32 and bf16
    python bench/triton_sass.py --only layer_norm_gelu --dtypes bfloat16 --show
    python bench/triton_sass.py --config '{"XBLOCK": 2, "num_warps": 8}'   # override launch configs

Generates the kernels of bench/triton_kernels.py's workloads at their GPU sizes
(32768x4096 by default) on the meta device with the interpreter off, compiles each
for sm_90 (H100/H200) with its default launch config and prints the SASS
instruction mix per element a thread handles (``surge.tools.sass_mix``).

A throughput model turns the mix into lower bounds: the kernel's elements times its
instructions per element over the GPU's issue rate (132 SMs x 4 schedulers x 32
lanes at 1.98 GHz: ~33 T lane-instructions/s), the busiest unit at its own rate
(per SM and clock: 128 fp32 lanes; 64 integer, compare/select, pack; 16 MUFU and
conversions), and the bytes at the measured copy bandwidth. Not a measurement:
latency that too few warps hide shows up as a measured time's excess over it.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SMS, SCHEDULERS, LANES, CLOCK_HZ = 132, 4, 32, 1.98e9
COPY_BYTES_PER_S = 4.17e12      # measured device-to-device copy on the H200 (bench/NOTES.md)
WORKLOADS = "layer_norm_gelu,softmax,rms_norm,arithmetic_chain,pointwise_chain"


def workload_inputs(name: str, rows: int, cols: int, dtype):
    """Meta tensors shaped as bench/triton_kernels.py's inputs."""
    import torch
    shapes = {"layer_norm_gelu": [(rows, cols), (cols,), (cols,)], "softmax": [(rows, cols)],
              "rms_norm": [(rows, cols), (cols,)]}.get(name, [(rows, cols), (cols,)])
    return [torch.empty(s, dtype=dtype, device="meta") for s in shapes]


def workload_mixes(name: str, rows: int, cols: int, dtype, config: dict) -> list:
    import torch._decomp
    from torch.fx.experimental.proxy_tensor import make_fx

    from surge.tools.sass_mix import graph_mixes
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    from triton_kernels import WORKLOADS as PROGRAMS

    args = workload_inputs(name, rows, cols, dtype)
    gm = make_fx(PROGRAMS[name], decomposition_table=torch._decomp.core_aten_decompositions())(*args)
    return graph_mixes(gm, args, config)


def model_ms(per_element: dict, elements: int, nbytes: int) -> dict:
    """Lower bounds (ms): issue slots, the busiest unit, bytes at copy bandwidth."""
    from surge.tools.sass_mix import GROUPS
    issue = sum(per_element.values()) * elements / (SMS * SCHEDULERS * LANES * CLOCK_HZ) * 1e3
    units = {g: n * elements / (SMS * GROUPS.get(g, ((), 128))[1] * CLOCK_HZ) * 1e3 for g, n in per_element.items()}
    busiest = max(units, key=units.get)
    return dict(issue_ms=issue, busiest_unit=busiest, unit_ms=units[busiest], copy_ms=nbytes / COPY_BYTES_PER_S * 1e3)


def main():
    os.environ["TRITON_INTERPRET"] = "0"
    sys.path.insert(0, ROOT)
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=32768)
    parser.add_argument("--cols", type=int, default=4096)
    parser.add_argument("--only", default=WORKLOADS)
    parser.add_argument("--dtypes", default="float32,bfloat16")
    parser.add_argument("--config", default="{}", help="JSON: launch config entries to override")
    parser.add_argument("--show", action="store_true", help="print each kernel's source and opcode counts")
    parser.add_argument("--json")
    args = parser.parse_args()
    import torch

    rows = []
    for name in args.only.split(","):
        for dtype_name in args.dtypes.split(","):
            dtype = getattr(torch, dtype_name)
            elements = args.rows * args.cols
            nbytes = sum(t.numel() * t.element_size() for t in workload_inputs(name, args.rows, args.cols, dtype))
            nbytes += elements * dtype.itemsize
            for mix in workload_mixes(name, args.rows, args.cols, dtype, json.loads(args.config)):
                row = dict(workload=name, dtype=dtype_name, **mix, **model_ms(mix["per_element"], elements, nbytes))
                source = row.pop("source")
                if args.show:
                    print(source)
                    print(json.dumps(row["opcodes_per_element"]), "\n")
                rows.append(row)
    print(f"{'workload':17} {'dtype':9} {'config':11} {'regs':>4} {'el/thr':>6} {'instr/el':>8} {'issue ms':>8} "
          f"{'unit ms':>12} {'copy ms':>7}  mix per element")
    for r in rows:
        c = r["config"]
        cfg = f"{c['XBLOCK']}x{c.get('RBLOCK', '-')}/{c['num_warps']}w"
        mix = " ".join(f"{g} {v:.1f}" for g, v in r["per_element"].items() if v >= 0.05)
        unit = f"{r['unit_ms']:.3f} {r['busiest_unit'][:5]}"
        print(f"{r['workload']:17} {r['dtype']:9} {cfg:11} {r['registers']:4} {r['elements_per_thread']:6.0f} "
              f"{r['total_per_element']:8.1f} {r['issue_ms']:8.3f} {unit:>12} {r['copy_ms']:7.3f}  {mix}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
