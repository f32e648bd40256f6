"""``python -m tests.fuzz --seed S --count N``: generate programs S:0 .. S:N-1, run each
compiled and eagerly, and print every difference with its minimised program.

``--default-every K`` runs every K-th program with surge's default backend (generated
C++ kernels on the CPU) instead of ``eager``; ``--save DIR`` writes each minimised
program there as a corpus file; ``--show I`` prints program I's source and exits.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

from . import checker, generator
from .minimise import minimise


def backend_for(index: int, default_every: int) -> str:
    return "default" if default_every and index % default_every == default_every - 1 else "eager"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.fuzz", description=__doc__)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--count", type=int, default=200)
    parser.add_argument("--start", type=int, default=0, help="first program index")
    parser.add_argument("--default-every", type=int, default=20)
    parser.add_argument("--no-minimise", action="store_true")
    parser.add_argument("--save", help="folder for the minimised programs (corpus files)")
    parser.add_argument("--show", type=int, help="print this program's source and exit")
    parser.add_argument("--include-known", action="store_true",
                        help="also generate the constructs of open bugs that have a corpus program")
    parser.add_argument("--classes", action="store_true",
                        help="class-heavy programs: super() chains, class attributes, dunders the mutations add")
    args = parser.parse_args(argv)

    if args.show is not None:
        print(generator.generate(args.seed, args.show, backend_for(args.show, args.default_every),
                                 args.include_known, args.classes).source())
        return 0
    start, found = time.perf_counter(), 0
    for index in range(args.start, args.start + args.count):
        program = generator.generate(args.seed, index, backend_for(index, args.default_every), args.include_known,
                                     args.classes)
        difference = checker.check_source(program.source())
        if difference is None:
            continue
        found += 1
        print(f"--- program {args.seed}:{index} [{program.backend}]: {difference}", flush=True)
        if args.no_minimise:
            continue
        aspect = difference.aspect

        def still_differs(candidate):
            again = checker.check_source(candidate.source())
            return again is not None and again.aspect == aspect

        small = minimise(program, still_differs)
        final = checker.check_source(small.source())
        print(f"minimised: {final}\n{small.source()}", flush=True)
        if args.save:
            os.makedirs(args.save, exist_ok=True)
            path = os.path.join(args.save, f"seed{args.seed}_{index}.py")
            with open(path, "w") as f:
                f.write(f'"""Found by python -m tests.fuzz --seed {args.seed} --start {index} --count 1.\n'
                        f'{final}"""\n' + small.source())
    print(f"{args.count} programs (seed {args.seed}) in {time.perf_counter() - start:.0f} s "
          f"on Python {sys.version.split()[0]}: {found} differences")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
