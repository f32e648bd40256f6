"""The ``surge`` command: ``python -m surge demo`` and ``python -m surge bench``."""
from __future__ import annotations

import argparse
import json
import sys
import time


def add_bench_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", default=None, help="cuda or cpu (default: cuda when present, else cpu)")
    p.add_argument("--quick", action="store_true", help="small sizes: a fast run (what CI runs)")
    p.add_argument("--suite", choices=("default", "models", "overhead", "varlen"), default="default",
                   help="default: surge's workloads; models: the model zoo (timm, torchvision, transformers); "
                        "overhead: launch-bound workloads for mode='reduce-overhead' (CUDA graphs); "
                        "varlen: a variable-length run with compiles included (tools/varlen.py)")
    p.add_argument("--time-limit", type=float, default=None, metavar="S",
                   help="start no workload after S seconds; the rest are listed as not run")
    p.add_argument("--only", action="append", metavar="NAME",
                   help="run only this workload (repeat or comma-separate for several; "
                        "patterns such as 'hf.*.infer' select from the suite)")
    p.add_argument("--list", action="store_true", help="list the workloads and exit")
    p.add_argument("--json", metavar="FILE", help="write machine-readable results here")
    p.add_argument("--plot", metavar="FILE.png", help="bar chart of speedups over eager (needs matplotlib)")
    p.add_argument("--surge-backend", default=None, help="surge backend name (default: surge's default)")
    p.add_argument("--contenders", default="eager,torch.compile,surge",
                   help="comma-separated subset of eager,torch.compile,surge,torch.compile:reduce-overhead,"
                        "surge:reduce-overhead (the last two record CUDA graphs)")
    p.add_argument("--fresh-process-compile", action=argparse.BooleanOptionalAction, default=None,
                   help="time first calls in fresh processes on a cold and a warm cache "
                        "(default: on, off with --quick)")
    p.add_argument("--overhead", action=argparse.BooleanOptionalAction, default=None,
                   help="measure per-call overhead on a tiny input (default: on, off with --quick)")
    p.add_argument("--budget", type=float, default=None,
                   help="seconds of timed calls per workload and contender (default 1, 0.2 with --quick)")
    p.add_argument("--threads", type=int, default=None,
                   help="torch CPU threads (default: torch's); 1 steadies timings on a busy machine")
    p.add_argument("--stored-peer", metavar="FILE.json[,FILE.json]", default=None,
                   help="reuse torch.compile's rows from earlier runs' --json where the workload, "
                        "sizes, device and library versions match (torch.compile is not run for them)")
    # Internal: the body of a fresh process timing one first call (prints JSON).
    p.add_argument("--probe", metavar="CONTENDER", help=argparse.SUPPRESS)


def default_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def bench_main(args) -> int:
    from .tools import bench, bench_report, workloads
    from .tools.contenders import CONTENDERS

    if args.list:
        for name in workloads.names(args.suite):
            print(f"{name:26s} {workloads.DESCRIPTIONS[name]}")
        return 0
    device = args.device or default_device()
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    only = [n for item in (args.only or []) for n in item.split(",") if n]
    contenders = tuple(c for c in args.contenders.split(",") if c)
    unknown = [c for c in contenders if c not in CONTENDERS]
    if unknown or "eager" not in contenders:
        print(f"surge bench: --contenders must include eager and be among {CONTENDERS}", file=sys.stderr)
        return 2
    if args.suite == "varlen":   # one run of variable lengths, compiles included (tools/varlen.py)
        from .tools.varlen import varlen_main

        return varlen_main(args, device, contenders)
    # The model zoo's compiles take minutes: no fresh-process or tiny-input runs unless asked for.
    light = args.quick or args.suite == "models"
    cfg = bench.BenchConfig(
        device=device,
        scale="quick" if args.quick else "full",
        only=only or None,
        surge_backend=args.surge_backend,
        fresh_process_compile=(not light) if args.fresh_process_compile is None else args.fresh_process_compile,
        overhead=(not light) if args.overhead is None else args.overhead,
        contenders=contenders,
        budget_s=args.budget if args.budget is not None else (0.2 if light else 1.0),
        suite=args.suite,
        time_limit_s=args.time_limit,
        stored_peer=args.stored_peer,
    )
    if args.probe:
        if len(only) != 1:
            print("surge bench --probe needs exactly one --only workload", file=sys.stderr)
            return 2
        print(json.dumps({"first_call_s": bench.probe_first_call(cfg, only[0], args.probe)}))
        return 0
    try:
        names = bench.selected_workloads(cfg.only, cfg.suite)
    except ValueError as e:
        print(f"surge bench: {e}", file=sys.stderr)
        return 2

    started = time.perf_counter()
    done = [0]

    def on_result(wr, env):
        done[0] += 1
        print(f"[{done[0]}/{len(names)}] {wr.name} done ({time.perf_counter() - started:.0f}s)",
              file=sys.stderr, flush=True)

    run = bench.run_bench(cfg, on_result=on_result)
    env = run["environment"]
    rows = [row for wr in run["workloads"] for row in bench_report.table_rows(wr, env)]
    print(bench_report.format_header(env))
    print()
    print(bench_report.format_table(rows))
    footer = bench_report.format_footer(run["workloads"])
    if footer:
        print()
        print(footer)
    if args.json:
        bench_report.write_json(run, args.json)
        print(f"results written to {args.json}")
    if args.plot:
        print(bench_report.write_plot(run, args.plot))
    wrong = [f"{wr.name}/{c}" for wr in run["workloads"] for c, r in wr.results.items() if r.status == "wrong"]
    if wrong:
        print(f"surge bench: results differ from eager: {', '.join(wrong)}", file=sys.stderr)
        return 1
    return 0


def demo_main(args) -> int:
    from .tools.demo import run_demo

    return run_demo(device=args.device or default_device(), backend=args.surge_backend)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="surge", description="surge: a JIT compiler for PyTorch programs")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="compile a bundled GPT model and a block, show what surge captured")
    demo.add_argument("--device", default=None, help="cuda or cpu (default: cuda when present, else cpu)")
    demo.add_argument("--surge-backend", default=None, help="surge backend name (default: surge's default)")
    bench = sub.add_parser("bench", help="eager vs torch.compile vs surge, side by side")
    add_bench_arguments(bench)
    args = parser.parse_args(argv)
    if args.command == "demo":
        return demo_main(args)
    return bench_main(args)


if __name__ == "__main__":
    sys.exit(main())
