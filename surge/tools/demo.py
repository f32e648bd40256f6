"""``python -m surge demo``: surge's main job, shown end to end.

Compiles the block ``gelu(x @ w + b) + r``, the bundled small GPT model, and a
function with a data-dependent branch; for each it checks the result against eager on
fresh inputs, and prints what surge made: the captured graphs, the guards, the
graph breaks with their reasons, the ATen graphs and generated kernels
(abbreviated, read back from a debug folder), the compile-time breakdown, and
the speed against eager (medians of interleaved rounds). It closes with what
surge.counters counted (graphs, graph breaks, kernels, fallbacks) and exits with
status 1 when a result differs from eager, 3 when a frame ran eagerly instead of
being compiled (a demo that compiled nothing must not look like a success).
"""
from __future__ import annotations

import dataclasses
import sys
import tempfile

import torch

from . import timing
from .bench import compare, graphs_made
from ..options import Options
from ..observe.debug_dir import read_artifacts
from ..observe.phases import format_breakdown, phase_timer

PREVIEW_LINES = 25
# Artifacts shown per graph, in pipeline order, with the heading each is shown under.
SHOWN_ARTIFACTS = (
    ("aten_forward.py", "ATen forward graph"),
    ("aten_backward.py", "ATen backward graph"),
    ("schedule.txt", "schedule"),
    ("kernels.py", "generated kernels"),
    ("kernels.cpp", "generated kernels"),
    ("wrapper.py", "host wrapper"),
)


LINE_WIDTH = 160


def abbreviate(text: str, lines: int = PREVIEW_LINES) -> str:
    all_lines = [ln if len(ln) <= LINE_WIDTH else ln[:LINE_WIDTH] + " ..." for ln in text.rstrip().splitlines()]
    shown = all_lines[:lines]
    if len(all_lines) > lines:
        shown.append(f"... ({len(all_lines) - lines} more lines)")
    return "\n".join(shown)


def indent(text: str, prefix: str = "    ") -> str:
    return "\n".join(prefix + line for line in text.splitlines())


def seed_block(x, w, b, r):
    return torch.nn.functional.gelu(x @ w + b) + r


def block_with_branch(x):
    y = torch.sin(x) * 2
    # A branch on a tensor's value cannot be decided while capturing: surge breaks
    # the graph here, lets CPython decide, and captures what follows.
    if y.sum() > 0:
        return torch.cos(y) + 1
    return torch.cos(y) - 1


def demo_cases(device: str):
    """(title, target, make_inputs(seed)) of each case the demo shows."""
    from ..models.gpt import GPT, small_config

    def block_inputs(seed):
        gen = torch.Generator(device=device).manual_seed(seed)
        return tuple(torch.randn(s, generator=gen, device=device) for s in ((128, 64), (64, 64), (64,), (128, 64)))

    config = small_config()
    torch.manual_seed(0)
    model = GPT(config).to(device).eval()

    def gpt_inputs(seed):
        gen = torch.Generator(device=device).manual_seed(seed)
        return (torch.randint(0, config.vocab_size, (2, 32), generator=gen, device=device),)

    def branch_inputs(seed):
        gen = torch.Generator(device=device).manual_seed(seed)
        return (torch.randn(16, 16, generator=gen, device=device),)

    return [
        ("the block gelu(x @ w + b) + r", seed_block, block_inputs),
        (f"the bundled GPT model ({config.n_layer} layers, {config.n_embd} wide)", model, gpt_inputs),
        ("a function with a data-dependent branch", block_with_branch, branch_inputs),
    ]


# What the demo counts per case, in the order the summary prints them.
SUMMARY_COUNTERS = (("graphs", "graphs"), ("graph_breaks", "graph breaks"), ("kernels", "kernels"),
                    ("fallbacks", "fallbacks"))


@dataclasses.dataclass
class CaseResult:
    correct: bool
    counts: dict  # surge.counters' change over the case's compile and calls (not surge.explain's)


def show_case(title, target, make_inputs, device, backend, debug_root, out) -> CaseResult:
    import surge

    out(f"\n=== {title} ===")
    records_before = len(phase_timer.records)
    handed_to_backend = []
    counts_before = dict(surge.counters)
    with tempfile.TemporaryDirectory(dir=debug_root) as debug_dir:
        options = Options.from_env().replace(debug_dir=debug_dir)
        compiled = surge.compile(target, backend=recording(backend, handed_to_backend, options),
                                 options={"debug_dir": debug_dir})
        inputs, fresh = make_inputs(0), make_inputs(1)
        with torch.no_grad():
            first_s, _ = timing.timed_once(lambda: compiled(*inputs), device)
            ok, err = compare(compiled(*fresh), target(*fresh), 1e-4, 1e-4)
        delta = {name: surge.counters[name] - counts_before.get(name, 0) for name in surge.counters}
        counts = {name: delta.get(name, 0) for name, _ in SUMMARY_COUNTERS} | {"graphs": graphs_made(delta)}
        out(f"first call (capture + compile): {first_s * 1e3:.1f} ms")
        out(f"correct against eager on fresh inputs: {'yes' if ok else 'NO'} (max abs error {err:.2e})")
        if counts["graphs"] == 0 or counts["fallbacks"]:
            out(f"!! {counts['graphs']} graphs compiled, {counts['fallbacks']} fallbacks: "
                "this case ran (partly) eagerly")
        show_report(target, inputs, out)
        artifacts = read_artifacts(debug_dir)
        if not any(name.startswith("aten_") for files in artifacts.values() for name in files):
            show_aten_graphs(handed_to_backend, out)
        show_artifacts(artifacts, out)
        with torch.no_grad():
            times = timing.interleaved_times({"eager": lambda: target(*inputs), "surge": lambda: compiled(*inputs)},
                                             device, budget_s=0.3)
    records = phase_timer.records[records_before:]
    if records:
        out(f"compile time by phase: {format_breakdown(phase_timer.summary(records))}")
    out(speed_line(timing.speedup(times["eager"], times["surge"])))
    return CaseResult(ok, counts)


def speed_line(measured: timing.Speedup) -> str:
    """The demo's speed line: medians of interleaved rounds, and a ratio only when the
    rounds agree on it."""
    line = (f"speed: eager {measured.baseline_s * 1e6:.1f} us, surge {measured.candidate_s * 1e6:.1f} us "
            f"per call (medians of {measured.rounds} interleaved rounds)")
    if not measured.reliable:
        return (line + f"; the rounds disagree by {measured.spread:.0%} (a busy machine?): "
                "no speed ratio given, rerun on a quiet machine")
    return line + f": {measured.ratio:.2f}x eager"


def summary_lines(results: list[CaseResult], backend_label: str) -> tuple[list[str], int]:
    """The closing lines and the exit status: 0 when every case compiled and matched
    eager; 1 when a result differs; 3 when something ran eagerly instead of compiling."""
    totals = {name: sum(r.counts[name] for r in results) for name, _ in SUMMARY_COUNTERS}
    lines = ["summary: " + ", ".join(f"{label} {totals[name]}" for name, label in SUMMARY_COUNTERS)]
    status = 0
    if totals["graphs"] == 0:
        lines.append(f"0 graphs compiled: every call ran eagerly (backend {backend_label}); "
                     "see SURGE_LOGS=fallbacks python -m surge demo for why")
        status = 3
    elif totals["fallbacks"]:
        lines.append(f"{totals['fallbacks']} frames fell back to eager instead of compiling; "
                     "see SURGE_LOGS=fallbacks python -m surge demo for why")
        status = 3
    if not all(r.correct for r in results):
        lines.append("SOME RESULTS DIFFER FROM EAGER")
        status = 1
    elif status == 0:
        lines.append("all results match eager")
    else:
        lines.append("the results match eager, but surge did not compile them all")
    return lines, status


def recording(backend, handed_to_backend: list, options=None):
    """``backend`` (a name or None, run with ``options``) as a callable that also
    keeps what it was given."""
    from ..backends import lookup_backend

    real_backend = lookup_backend(backend, options)

    def recording_backend(gm, example_inputs):
        handed_to_backend.append((gm, list(example_inputs)))
        return real_backend(gm, example_inputs)

    return recording_backend


def show_aten_graphs(handed_to_backend, out) -> None:
    """The ATen graph of each captured graph, traced by surge's aot layer."""
    try:
        from ..aot import trace_aten
    except ImportError:
        return
    for i, (gm, example_inputs) in enumerate(handed_to_backend):
        out(f"--- ATen graph of captured graph {i} (surge.aot.trace_aten) ---")
        try:
            with torch.no_grad():
                aten_gm = trace_aten(gm, example_inputs)
            out(indent(abbreviate(aten_gm.code.strip())))
        except Exception as e:  # the demo shows what works and says what does not
            out(f"    aot could not trace it: {type(e).__name__}: {e}")


def show_report(target, inputs, out) -> None:
    import surge

    explain = getattr(surge, "explain", None)
    if explain is None:
        out("(surge.explain is not available yet)")
        return
    with torch.no_grad():
        report = explain(target)(*inputs)
    out(f"graphs: {report.graph_count}, graph breaks: {report.graph_break_count}")
    for reason in report.break_reasons:
        out(f"  break: {reason}")
    for i, gm in enumerate(report.graphs):
        out(f"--- captured graph {i} ---")
        out(indent(abbreviate(gm.code.strip())))
    for i, guards in enumerate(report.guards):
        out(f"--- guards of cache entry {i} ---")
        out(indent(abbreviate(str(guards))))


def show_artifacts(artifacts: dict, out) -> None:
    for folder, files in artifacts.items():
        for file_name, heading in SHOWN_ARTIFACTS:
            if file_name in files:
                out(f"--- {heading} ({folder}/{file_name}) ---")
                out(indent(abbreviate(files[file_name])))


def run_demo(device: str = "cpu", backend: str | None = None, out=print) -> int:
    try:
        import surge
        from surge.frontend import entry  # noqa: F401
    except ImportError as e:
        print(f"surge demo: surge.compile is not available yet ({e})", file=sys.stderr)
        return 2
    from .contenders import surge_backend_label

    out(f"surge {surge.__version__} demo on {device}, backend {surge_backend_label(backend)}")
    surge.counters.reset()
    results = []
    with tempfile.TemporaryDirectory(prefix="surge-demo-") as debug_root:
        for title, target, make_inputs in demo_cases(device):
            results.append(show_case(title, target, make_inputs, device, backend, debug_root, out))
    lines, status = summary_lines(results, surge_backend_label(backend))
    out("")
    for line in lines:
        out(line)
    return status
