"""Opcode handlers, registered per opcode with the Python versions they apply to."""
from __future__ import annotations

from ..bytecode import PY_VERSION

HANDLERS: dict = {}


def opcode(*names: str, versions=None):
    """Register a handler ``fn(frame, inst)`` for ``names``.

    ``versions`` is one ``(major, minor)`` pair or a tuple of them; ``None`` means
    every supported version. Handlers for other versions are not registered, so
    one opcode name can have a different handler per version.
    """
    if versions is not None and isinstance(versions[0], int):
        versions = (versions,)

    def register(fn):
        if versions is None or PY_VERSION in versions:
            for name in names:
                if name in HANDLERS:
                    raise RuntimeError(f"two handlers for opcode {name} on Python {PY_VERSION}")
                HANDLERS[name] = fn
        return fn
    return register
