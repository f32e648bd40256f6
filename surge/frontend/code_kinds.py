"""Code objects the cache treats specially, known without importing the capture machinery
(a warm process that runs stored captures never imports it)."""
from __future__ import annotations

import types
import weakref

import torch

# The wrapper torch puts around functions decorated with @torch.no_grad() & co.
DECORATE_CONTEXT_CODE = torch.no_grad()(lambda: None).__code__

# The resume functions that graph breaks made (``resume.py`` adds them).
RESUME_CODES: "weakref.WeakSet[types.CodeType]" = weakref.WeakSet()


def is_resume_code(code: types.CodeType) -> bool:
    """Whether ``code`` is a resume function made here."""
    return code in RESUME_CODES
