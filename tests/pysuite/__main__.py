"""``python -m tests.pysuite [MODULE ...]``: CPython's tests under surge, compared with eager.

With no module named, runs ``FULL_MODULES``. Several modules run one child process
each (a module whose compiled run crashes the interpreter is reported as a crash,
and the others still run). Prints each difference as it is found and the totals;
``--json FILE`` writes every record (one JSON object a line).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import time

from . import runner, variants
from .modules import FULL_MODULES


def parse(argv):
    parser = argparse.ArgumentParser(prog="python -m tests.pysuite", description=__doc__)
    parser.add_argument("modules", nargs="*", help="test modules, e.g. test_list (default: the full list)")
    parser.add_argument("--variants", default=",".join(variants.VARIANTS),
                        help=f"comma-separated, of {variants.VARIANTS}")
    parser.add_argument("-k", dest="pattern", help="only test methods whose Class.method contains this")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds a compiled test may run")
    parser.add_argument("--json", help="write every record to this file (JSON lines, as they come)")
    parser.add_argument("-v", action="store_true", help="print every record, not only differences")
    return parser.parse_args(argv)


def run_in_children(args, argv) -> int:
    """Each module in a child process with the same options; JSON lines are appended."""
    start, crashed, status = time.perf_counter(), [], 0
    if args.json:
        open(args.json, "w").close()
    passed_on = [a for a in argv if a not in args.modules]
    for module in args.modules or FULL_MODULES:
        part = f"{args.json}.{module}" if args.json else None
        command = [sys.executable, "-m", "tests.pysuite", module, *passed_on]
        if part:
            command += ["--json", part]
        code = subprocess.run(command).returncode
        if part and os.path.exists(part):
            with open(part) as src, open(args.json, "a") as dst:
                dst.write(src.read())
            os.remove(part)
        if code < 0:
            crashed.append(f"{module} (signal {-code})")
            print(f"{module}: CRASHED (signal {-code}): python -X faulthandler -m tests.pysuite {module} -v "
                  "names the last test", flush=True)
        status = status or code
    print(f"all modules in {time.perf_counter() - start:.0f} s; crashed: {crashed or 'none'}")
    return 1 if status else 0


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse(argv)
    if len(args.modules) != 1:
        return run_in_children(args, [a for a in argv if not a.startswith("--json") and a != args.json])

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
    try:
        records += runner.run_module(args.modules[0], args.variants.split(","), limits, select, progress)
    except ImportError as e:  # a module this Python does not ship
        print(f"{args.modules[0]}: not run ({e})", flush=True)
    if sink:
        sink.close()
    counts = runner.totals(records)
    print(f"{args.modules[0]}: {len(records)} records in {time.perf_counter() - start:.0f} s on Python "
          f"{sys.version.split()[0]}: {counts}", flush=True)
    return 1 if counts.get("differs") else 0


if __name__ == "__main__":
    sys.exit(main())
