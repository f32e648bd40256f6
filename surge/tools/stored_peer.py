"""torch.compile's rows taken from an earlier bench run, so a run need not compile them again.

torch.compile's compiles dominate a model-zoo run (10-90 s per model on a GPU against a
few seconds for surge). Its numbers move only when torch, the device or a model library
does, so ``--stored-peer FILE.json`` (an earlier run's ``--json``) reuses them: a workload
whose stored row has the same name, sizes and dtype, measured on the same device with the
same library versions, keeps torch.compile's stored speedup over eager and its counts, and
torch.compile is not run for it. Everything else is measured as usual; the table marks
stored rows, and the JSON keeps where they came from.
"""
from __future__ import annotations

import json

PEER = "torch.compile"
# What must be equal for a stored row to stand for a fresh one.
_ENVIRONMENT_KEYS = ("device", "device_name", "scale")


def _environment_key(env: dict) -> tuple:
    return tuple(env.get(k) for k in _ENVIRONMENT_KEYS) + tuple(sorted((env.get("versions") or {}).items()))


class StoredPeer:
    """Stored torch.compile rows by workload name, from one file or several (``a.json,b.json``:
    a zoo measured in parts); files whose environment differs from this run's are not used."""

    def __init__(self, paths: str, environment: dict):
        self.rows, self.origin, refused = {}, {}, []
        for path in paths.split(","):
            with open(path) as f:
                stored = json.load(f)
            if _environment_key(stored.get("environment", {})) != _environment_key(environment):
                refused.append(path)
                continue
            started = stored.get("environment", {}).get("started")
            for w in stored.get("workloads", []):
                self.rows[w["name"]] = w
                self.origin[w["name"]] = (started, path)
        self.mismatch = (f"the device or library versions of {', '.join(refused)} differ from this run's"
                         if refused else None)

    def row(self, name: str, sizes: dict, dtype: str) -> dict | None:
        """The stored torch.compile result of this workload (with its speedup), or None."""
        w = self.rows.get(name)
        if w is None or w.get("sizes") != sizes or w.get("dtype") != dtype:
            return None
        result = (w.get("results") or {}).get(PEER)
        speedup = (w.get("speedup_over_eager") or {}).get(PEER)
        if not result or result.get("status") != "ok" or not speedup:
            return None
        started, path = self.origin[name]
        return dict(result, stored_speedup=speedup, message=f"stored: measured {started or 'earlier'} ({path})")
