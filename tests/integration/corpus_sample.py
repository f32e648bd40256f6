"""pytest plugin for running the capture corpus through a backend.

``SURGE_CORPUS_SAMPLE=N`` keeps the tests whose id hashes (CRC-32, stable across
runs and machines) into the first N of 100 buckets; ``SURGE_CORPUS_SKIP`` lists
test ids (one per line) to deselect: known gaps, each with its reason in the
module that sets it. ``SURGE_CORPUS_FLOAT_TOLERANCE=t`` compares floats with
rtol = atol = t where a check leaves torch's (tight) defaults: generated kernels
fuse and reorder float math, so they match eager to rounding, not bit for bit.
"""
import functools
import os
import zlib

import torch


def keeps(nodeid: str, percent: int) -> bool:
    return zlib.crc32(nodeid.encode()) % 100 < percent


def pytest_configure(config):
    tolerance = os.environ.get("SURGE_CORPUS_FLOAT_TOLERANCE")
    if not tolerance:
        return
    strict = torch.testing.assert_close

    @functools.wraps(strict)
    def assert_close(actual, expected, *args, rtol=None, atol=None, **kwargs):
        if rtol is None and atol is None and isinstance(expected, torch.Tensor) and expected.dtype.is_floating_point:
            rtol = atol = max(float(tolerance), 1e-2 if expected.dtype in (torch.float16, torch.bfloat16) else 0.0)
        return strict(actual, expected, *args, rtol=rtol, atol=atol, **kwargs)
    torch.testing.assert_close = assert_close


def pytest_collection_modifyitems(config, items):
    percent = int(os.environ.get("SURGE_CORPUS_SAMPLE", "100"))
    skip = {line.strip() for line in os.environ.get("SURGE_CORPUS_SKIP", "").splitlines() if line.strip()}
    kept, dropped = [], []
    for item in items:
        (kept if keeps(item.nodeid, percent) and item.nodeid not in skip else dropped).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
