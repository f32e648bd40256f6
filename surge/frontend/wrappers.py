"""Recognizing the wrappers ``surge.compile`` makes (``entry.py``) on any object."""
from __future__ import annotations


def compiled_original(obj):
    """The callable a ``surge.compile`` wrapper wraps, or None when ``obj`` is not one.

    Read from the instance ``__dict__`` only: probing with ``getattr`` would run a
    user class's ``__getattr__``, which may raise anything (or do work)."""
    try:
        attributes = object.__getattribute__(obj, "__dict__")
    except AttributeError:  # no instance dict (__slots__, builtins)
        return None
    return attributes.get("_surge_original") if isinstance(attributes, dict) else None
