"""``surge.explain(fn)(*args, **kwargs)``: what capturing one call produced."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..options import Options
from ..observe.phases import phase_timer
from .cache import private_cache
from .entry import compile_callable


def _op_name(node) -> str:
    if node.op == "call_method":
        return f"Tensor.{node.target}"
    target = node.target
    module = getattr(target, "__module__", None) or ""
    name = getattr(target, "__name__", str(target))
    if module.startswith("torch.nn.functional") or module == "torch._C._nn":
        return f"F.{name}"
    if module in ("_operator", "operator"):
        return f"operator.{name}"
    if module.startswith("torch"):
        return f"torch.{name}"
    return name


@dataclass
class ExplainReport:
    graphs: list = field(default_factory=list)
    guards: list = field(default_factory=list)      # per cache entry, readable text
    break_reasons: list = field(default_factory=list)
    # Splits at the next iteration of a loop a resume function continued inside (breaks.py).
    loop_splits: list = field(default_factory=list)
    ops_per_graph: list = field(default_factory=list)
    fallbacks: list = field(default_factory=list)  # BreakReason of each frame run eagerly
    recompile_reasons: list = field(default_factory=list)  # the failing guard (and value) of each recompile
    compile_times: list = field(default_factory=list)
    compile_records: list = field(default_factory=list)  # phases.CompileRecord made during the call
    out: object = None

    @property
    def graph_count(self) -> int:
        return len(self.graphs)

    @property
    def graph_break_count(self) -> int:
        return len(self.break_reasons)

    def __str__(self) -> str:
        lines = [f"Graph count: {self.graph_count}", f"Graph break count: {self.graph_break_count}",
                 f"Fallbacks (frames run eagerly): {len(self.fallbacks)}"]
        if self.break_reasons:
            lines.append("Break reasons:")
            for i, reason in enumerate(self.break_reasons, 1):
                lines.append(f"  {i}. {reason.reason}")
                if reason.location:
                    lines.append(f"     at {reason.location}")
                if reason.source_line and reason.source_line not in (reason.location or ""):
                    lines.append(f"     {reason.source_line}")
        if self.loop_splits:
            lines.append(f"Loop splits (a loop resumed after a graph break, split at its next iteration): "
                         f"{len(self.loop_splits)}")
            lines.extend(f"  at {split.location}" for split in self.loop_splits)
        for i, (gm, ops) in enumerate(zip(self.graphs, self.ops_per_graph), 1):
            lines.append(f"Graph {i}: {len(ops)} ops: {', '.join(ops)}")
            lines.append("    " + gm.code.strip().replace("\n", "\n    "))
        if self.recompile_reasons:
            lines.append("Recompile reasons:")
            lines.extend(f"  {i}. {reason}" for i, reason in enumerate(self.recompile_reasons, 1))
        for i, text in enumerate(self.guards, 1):
            lines.append(f"Guards of cache entry {i}:")
            lines.extend("  " + line for line in text.splitlines())
        if self.compile_times:
            lines.append("Capture time: " + ", ".join(f"{t * 1000:.1f} ms" for t in self.compile_times))
        if self.compile_records:
            lines.append("Compile time by phase (self time of each phase):")
            lines.extend(f"  {record.format()}" for record in self.compile_records)
        return "\n".join(lines)


def explain(fn_or_module, options: Options):
    def run(*args, **kwargs):
        records: list = []
        compiled = compile_callable(fn_or_module, options, cache_factory=private_cache, records=records)
        # By identity, not position: the record list is capped, so its length stops
        # growing. Holding the old records keeps their ids from being reused.
        records_before = list(phase_timer.records)
        seen = {id(r) for r in records_before}
        out = compiled(*args, **kwargs)
        report = ExplainReport(out=out, compile_records=[r for r in phase_timer.records if id(r) not in seen])
        for entry in records:
            report.guards.append(entry.guards_text)
            report.compile_times.append(entry.compile_seconds)
            if entry.graph_break is not None:
                report.break_reasons.append(entry.graph_break)
            if entry.loop_split is not None:
                report.loop_splits.append(entry.loop_split)
            if entry.recompile_reason is not None:
                report.recompile_reasons.append(entry.recompile_reason)
            if entry.fallback is not None:
                report.fallbacks.append(entry.fallback)
                report.break_reasons.append(entry.fallback)
            if entry.graph is not None:
                report.graphs.append(entry.graph)
                report.ops_per_graph.append([_op_name(n) for n in entry.graph.graph.nodes
                                             if n.op in ("call_function", "call_method")
                                             and n.target is not torch._C._set_grad_enabled])
        return report
    return run
