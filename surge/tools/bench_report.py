"""What the bench prints and writes: the table, the JSON file and the speedup plot."""
from __future__ import annotations

import dataclasses
import datetime
import importlib.util
import json
import math
import os
import platform

import torch

from .contenders import surge_backend_label
from ..observe.phases import format_breakdown
from .timing import MAX_RATIO_SPREAD


def environment(cfg) -> dict:
    device = cfg.device
    if device.startswith("cuda"):
        device_name = torch.cuda.get_device_name(device)
    else:
        device_name = platform.processor() or platform.machine()
    versions = {"python": platform.python_version(), "torch": torch.__version__}
    for module in ("triton", "transformers") + (("timm", "torchvision") if cfg.suite == "models" else ()):
        if importlib.util.find_spec(module) is not None:
            try:
                versions[module] = getattr(__import__(module), "__version__", "?")
            except Exception as e:  # installed but broken here (torchvision built for another torch)
                versions[module] = f"not importable ({type(e).__name__})"
    import surge

    versions["surge"] = surge.__version__
    return {
        "device": device,
        "device_name": device_name,
        "cpu_threads": torch.get_num_threads(),
        "versions": versions,
        "scale": cfg.scale,
        "surge_backend": surge_backend_label(cfg.surge_backend),
        "started": datetime.datetime.now().isoformat(timespec="seconds"),
    }


# ---------------------------------------------------------------- formatting

def fmt_time(seconds) -> str:
    if seconds is None:
        return "-"
    if abs(seconds) >= 1:
        return f"{seconds:.2f}s"
    if abs(seconds) >= 1e-3:
        return f"{seconds * 1e3:.2f}ms"
    return f"{seconds * 1e6:.1f}us"


def fmt_ratio(x) -> str:
    return "-" if x is None else f"{x:.2f}x"


def fmt_bytes(n) -> str:
    if n is None:
        return "n/a"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f}{unit}" if unit == "B" else f"{n:.1f}{unit}"
        n /= 1024
    return str(n)


def fmt_speedup(wr, contender) -> str:
    """The speedup over eager, marked ``?`` when the timing rounds disagreed on it."""
    text = fmt_ratio(wr.speedup(contender))
    spread = wr.results[contender].speedup_spread
    return text + "?" if text != "-" and spread is not None and spread > MAX_RATIO_SPREAD else text


def fmt_count(n) -> str:
    return "?" if n is None else str(n)


COLUMNS = ("workload", "contender", "median", "speedup", "surge/tc", "1st call", "cold", "warm",
           "overhead", "peak mem", "bandwidth", "g/b/k", "check")


def table_rows(wr, env) -> list[list[str]]:
    rows = []
    copy_bw = env.get("copy_bandwidth_Bps")
    reasons = {(r.status, r.message) for r in wr.results.values()}
    if len(reasons) == 1 and next(iter(reasons))[0] in ("not available", "not run"):
        (status, message), = reasons  # the workload itself did not run: one line says why
        return [[wr.name, "all", f"{status}: {message or ''}"]]
    for i, (contender, r) in enumerate(wr.results.items()):
        if r.status == "not available":
            rows.append([wr.name if i == 0 else "", contender, "not available: " + (r.message or "")])
            continue
        if r.status in ("error", "not run"):
            rows.append([wr.name if i == 0 else "", contender, f"{r.status}: " + (r.message or "")])
            continue
        bandwidth = "-"
        if r.bandwidth_Bps is not None:
            bandwidth = f"{r.bandwidth_Bps / 1e9:.1f}GB/s"
            if copy_bw:
                bandwidth += f" ({100 * r.bandwidth_Bps / copy_bw:.0f}%)"
        counts = "-"
        if contender == "surge":
            counts = f"{fmt_count(r.graphs)}/{fmt_count(r.graph_breaks)}/{fmt_count(r.kernels)}"
        elif r.graphs is not None:  # torch.compile's graphs and breaks (its kernels are not counted)
            counts = f"{r.graphs}/{fmt_count(r.graph_breaks)}/-"
        check = "ref" if contender == "eager" else ("ok" if r.status == "ok" else "WRONG")
        if r.stored_speedup is not None:
            check = "stored"   # this row is an earlier run's (--stored-peer)
        if contender != "eager" and r.ran_eagerly():
            check = ("EAGER" if r.graphs == 0 else "FELL BACK") + (" + WRONG" if r.status == "wrong" else "")
        if r.max_abs_error is not None and contender != "eager":
            check += f" ({r.max_abs_error:.1e})"
        rows.append([
            wr.name if i == 0 else "", contender, fmt_time(r.median_s), fmt_speedup(wr, contender),
            fmt_ratio(wr.surge_over_torch_compile()) if contender == "surge" else "",
            fmt_time(r.first_call_s) if contender != "eager" else "-",
            fmt_time(r.cold_compile_s), fmt_time(r.warm_compile_s),
            fmt_time(r.overhead_s) if contender != "eager" else "-",
            fmt_bytes(r.peak_memory_bytes), bandwidth, counts, check,
        ])
    return rows


def format_table(rows: list[list[str]]) -> str:
    full = [r for r in rows if len(r) == len(COLUMNS)]
    # A column nothing was measured for in this run (cold/warm without fresh processes, ...) is left out.
    shown = [i for i in range(len(COLUMNS)) if i < 2 or not full or any(r[i] not in ("-", "") for r in full)]
    columns = [COLUMNS[i] for i in shown]
    full = [[r[i] for i in shown] for r in full]
    widths = [max(len(c), *(len(r[i]) for r in full)) if full else len(c) for i, c in enumerate(columns)]
    widths[0] = max([widths[0]] + [len(r[0]) for r in rows])  # names on rows that span the table too
    out = ["  ".join(c.ljust(w) for c, w in zip(columns, widths))]
    out.append("  ".join("-" * w for w in widths))
    for r in rows:
        if len(r) == len(COLUMNS):
            out.append("  ".join(r[i].ljust(w) for i, w in zip(shown, widths)).rstrip())
        else:  # a contender that did not run: its reason spans the row
            out.append("  ".join([r[0].ljust(widths[0]), r[1].ljust(widths[1]), r[2]]))
    return "\n".join(out)


def format_header(env: dict) -> str:
    v = env["versions"]
    bw = env.get("copy_bandwidth_Bps")
    lines = [
        f"surge bench on {env['device']} ({env['device_name']}, {env['cpu_threads']} threads), "
        f"scale {env['scale']}, surge backend {env['surge_backend']}",
        "versions: " + ", ".join(f"{k} {val}" for k, val in v.items()),
    ]
    if bw:
        lines.append(f"measured copy bandwidth: {bw / 1e9:.1f} GB/s")
    return "\n".join(lines)


def format_footer(results: list) -> str:
    lines = []
    phases = [(wr.name, wr.results["surge"].compile_phases_s) for wr in results
              if "surge" in wr.results and wr.results["surge"].compile_phases_s]
    if phases:
        lines.append("surge compile time by phase (first call, this process):")
        lines += [f"  {name}: {format_breakdown(p)}" for name, p in phases]
    for contender in ("torch.compile", "surge"):
        # A row that ran eagerly measures eager again: it would pull the mean towards 1x.
        speedups = [wr.speedup(contender) for wr in results
                    if contender in wr.results and not wr.results[contender].ran_eagerly()]
        speedups = [s for s in speedups if s]
        if speedups:
            gmean = math.exp(sum(math.log(s) for s in speedups) / len(speedups))
            lines.append(f"geometric mean speedup over eager, {contender}: {gmean:.2f}x over {len(speedups)} workloads")
    if any(wr.results[c].speedup_spread is not None and wr.results[c].speedup_spread > MAX_RATIO_SPREAD
           for wr in results for c in wr.results):
        lines.append(f"?: the timing rounds disagreed on this speedup by more than {MAX_RATIO_SPREAD:.0%} "
                     "(a busy machine?); do not trust it")
    lines += eager_run_lines(results)
    return "\n".join(lines)


def eager_run_lines(results: list) -> list[str]:
    """A loud line for every compiler row that did not compile all of its workload."""
    ran_eagerly = [(wr.name, c, r.ran_eagerly()) for wr in results for c, r in wr.results.items()
                   if c != "eager" and r.status in ("ok", "wrong") and r.ran_eagerly()]
    if not ran_eagerly:
        return []
    lines = [f"!! {len(ran_eagerly)} rows ran (partly) eagerly: their speed is not the compiler's "
             "(SURGE_LOGS=fallbacks shows why)"]
    lines += [f"!!   {name}/{contender}: {why}" for name, contender, why in ran_eagerly]
    return lines


# ---------------------------------------------------------------- files

def to_json(run: dict) -> dict:
    out = []
    for wr in run["workloads"]:
        d = {k: v for k, v in dataclasses.asdict(wr).items() if k != "results"}
        d["results"] = {c: dataclasses.asdict(r) for c, r in wr.results.items()}
        d["speedup_over_eager"] = {c: wr.speedup(c) for c in wr.results if c != "eager"}
        d["surge_over_torch_compile"] = wr.surge_over_torch_compile()
        out.append(d)
    return {"environment": run["environment"], "workloads": out}


def write_json(run: dict, path: str) -> None:
    with open(path, "w") as f:
        json.dump(to_json(run), f, indent=2, default=str)
        f.write("\n")


def write_plot(run: dict, path: str) -> str:
    """A bar chart of speedups over eager per workload; returns a message for the user."""
    if importlib.util.find_spec("matplotlib") is None:
        return f"--plot {path}: matplotlib is not installed (pip install matplotlib); no plot written"
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [wr.name for wr in run["workloads"]]
    contenders = ("torch.compile", "surge")
    width = 0.38
    fig, ax = plt.subplots(figsize=(max(6, 0.9 * len(names) + 2), 4.5))
    for i, contender in enumerate(contenders):
        values = [wr.speedup(contender) or 0.0 for wr in run["workloads"]]
        xs = [j + (i - 0.5) * width for j in range(len(names))]
        ax.bar(xs, values, width, label=contender)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names, rotation=30, ha="right")
    ax.set_ylabel("speedup over eager")
    env = run["environment"]
    ax.set_title(f"surge bench: {env['device_name']} ({env['device']}), surge backend {env['surge_backend']}")
    ax.legend()
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return f"plot written to {path}"

