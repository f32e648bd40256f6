"""pytest plugin: keep a stable sample of the collected tests.

``SURGE_CORPUS_SAMPLE=N`` keeps the tests whose id hashes (CRC-32, stable across
runs and machines) into the first N of 100 buckets; ``SURGE_CORPUS_SKIP`` lists
test ids (one per line) to deselect: known gaps, each with its reason in the
module that sets it.
"""
import os
import zlib


def keeps(nodeid: str, percent: int) -> bool:
    return zlib.crc32(nodeid.encode()) % 100 < percent


def pytest_collection_modifyitems(config, items):
    percent = int(os.environ.get("SURGE_CORPUS_SAMPLE", "100"))
    skip = {line.strip() for line in os.environ.get("SURGE_CORPUS_SKIP", "").splitlines() if line.strip()}
    kept, dropped = [], []
    for item in items:
        (kept if keeps(item.nodeid, percent) and item.nodeid not in skip else dropped).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
