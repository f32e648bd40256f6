"""Log channels selected with ``SURGE_LOGS=graph,guards,...``.

Each channel prints readable artifacts as they are made. ``SURGE_LOGS=all``
turns every channel on; a name with a leading minus removes that channel
(``all,-perf``), and ``-fallbacks`` also silences the fallback warnings that
surge prints by default (``fallbacks.py``). An unknown name gets one warning
that lists the channels. The variable is read at every ``enabled`` call (through
``options.log_channels_setting``) so that tests and users can flip it without
re-importing surge; it is parsed once per value it takes, so a call costs one
environment lookup and a string comparison, and no channel is consulted on the hot
path of a compiled call.
"""
from __future__ import annotations

import logging
import sys

from .options import log_channels_setting

CHANNELS = (
    "graph",         # captured torch-level FX graphs
    "guards",        # guards of each cache entry
    "recompiles",    # which guard failed when a cached code object recompiles
    "graph_breaks",  # every graph break with its reason and user location
    "bytecode",      # generated resume / entry code
    "aot",           # ATen-level forward/backward graphs
    "schedule",      # fused groups and memory plan
    "output_code",   # generated kernels and wrappers
    "perf",          # compile-time breakdown per phase
    "fallbacks",     # frames that ran eagerly, and why
    "dynamic",       # which sizes and numbers became symbolic, why, and the guards on them
    "cudagraphs",    # CUDA graphs recorded and replayed, and why a graph is not recorded
)

_logger = logging.getLogger("surge")


def _parse(raw: str) -> tuple[frozenset, frozenset]:
    """(selected, removed) channels of a ``SURGE_LOGS`` value."""
    names = [part.strip() for part in raw.split(",") if part.strip()]
    removed = {name[1:].strip() for name in names if name.startswith("-")}
    added = {name for name in names if not name.startswith("-")}
    unknown = sorted((added | removed) - set(CHANNELS) - {"all"})
    if unknown:
        warn_once(f"logs:{raw}", f"surge: SURGE_LOGS={raw!r} names unknown channel(s) {unknown}; "
                                 f"known channels: {', '.join(CHANNELS)}, or all (a leading '-' removes one)")
    selected = set(CHANNELS) if "all" in added else added & set(CHANNELS)
    return frozenset(selected - removed), frozenset(removed)


# (the SURGE_LOGS value last parsed, its (selected, removed) channels)
_parsed: tuple[str, tuple[frozenset, frozenset]] = ("", (frozenset(), frozenset()))


def _channels() -> tuple[frozenset, frozenset]:
    global _parsed
    raw = log_channels_setting()
    if raw != _parsed[0]:
        _parsed = (raw, _parse(raw))
    return _parsed[1]


def enabled(channel: str) -> bool:
    assert channel in CHANNELS, f"unknown log channel {channel!r}"
    return channel in _channels()[0]


def removed(channel: str) -> bool:
    """Whether ``SURGE_LOGS`` removes ``channel`` explicitly (``-fallbacks``)."""
    assert channel in CHANNELS, f"unknown log channel {channel!r}"
    return channel in _channels()[1]


def log(channel: str, message: str) -> None:
    """Print ``message`` under ``channel`` if that channel is selected."""
    if enabled(channel):
        print(f"[surge:{channel}] {message}", file=sys.stderr)


_INFO_SEEN: set = set()


def info_once(key: str, message: str) -> None:
    """A line at level INFO of the ``surge`` logger, once per process."""
    if key in _INFO_SEEN:
        return
    _INFO_SEEN.add(key)
    _logger.info(message)


def warn_once(key: str, message: str, _seen: set = set()) -> None:
    """A warning that users see once per process, whatever the channels."""
    if key in _seen:
        return
    _seen.add(key)
    _logger.warning(message)
