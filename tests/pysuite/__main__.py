"""``python -m tests.pysuite [MODULE ...]``: CPython's tests under surge, compared with eager.

With no module named, runs ``FULL_MODULES``. Prints each difference as it is found
and the totals; ``--json FILE`` writes every record (one JSON object a line).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time

from . import runner, variants
from .modules import FULL_MODULES


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.pysuite", description=__doc__)
    parser.add_argument("modules", nargs="*", help="test modules, e.g. test_list (default: the full list)")
    parser.add_argument("--variants", default=",".join(variants.VARIANTS),
                        help=f"comma-separated, of {variants.VARIANTS}")
    parser.add_argument("-k", dest="pattern", help="only test methods whose Class.method contains this")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds a compiled test may run")
    parser.add_argument("--json", help="write every record to this file (JSON lines, as they come)")
    parser.add_argument("-v", action="store_true", help="print every record, not only differences")
    args = parser.parse_args(argv)

    names = args.variants.split(",")
    select = None
    if args.pattern:
        select = lambda cls, name: args.pattern in f"{cls.__name__}.{name}"  # noqa: E731
    limits = runner.Limits(compiled_seconds=args.timeout)
    records = []
    sink = open(args.json, "w") if args.json else None

    def progress(record):
        if args.v or record.status in ("differs", "unstable", "timeout", "runner-error"):
            print(record.line(), flush=True)
        if sink:
            sink.write(json.dumps(dataclasses.asdict(record), default=str) + "\n")
            sink.flush()

    start = time.perf_counter()
    for module in args.modules or FULL_MODULES:
        try:
            records += runner.run_module(module, names, limits, select, progress)
        except ImportError as e:  # a module this Python does not ship
            print(f"{module}: not run ({e})", flush=True)
    counts = runner.totals(records)
    print(f"{len(records)} records in {time.perf_counter() - start:.0f} s on Python "
          f"{sys.version.split()[0]}: {counts}")
    if sink:
        sink.close()
    return 1 if counts.get("differs") else 0


if __name__ == "__main__":
    sys.exit(main())
