"""Index simplification with loop ranges (lowering/sizes.py): exact on the whole domain."""
import itertools
import random

import sympy

from surge.lowering.sizes import FloorDiv, Mod, index_below, index_symbol, simplify_with_ranges

X = [index_symbol("x", k) for k in range(4)]


def _values(expr, bounds):
    out = []
    for point in itertools.product(*(range(bounds[s]) for s in X[:len(bounds)])):
        out.append(int(expr.subs(dict(zip(X, point)))))
    return out


def test_divisible_terms_leave_a_floor_division():
    bounds = {X[0]: 2, X[1]: 4, X[2]: 128, X[3]: 64}
    flat = 32768 * X[0] + 8192 * X[1] + 64 * X[2] + X[3]
    # a rotary interleave's pair index: the position within the pair of a flattened index
    assert simplify_with_ranges(Mod(FloorDiv(flat, 2), 32), bounds) == FloorDiv(X[3], 2)
    assert simplify_with_ranges(FloorDiv(flat, 2), bounds) == 16384 * X[0] + 4096 * X[1] + 32 * X[2] + FloorDiv(X[3], 2)


def test_simplified_indices_equal_the_originals_everywhere():
    rng = random.Random(0)
    for _ in range(60):
        bounds = {s: rng.choice([1, 2, 3, 5, 8]) for s in X[:3]}
        coeffs = [rng.choice([1, 2, 3, 4, 6, 8, 12, 16, 24]) for _ in range(3)]
        inner = sum(c * s for c, s in zip(coeffs, X)) + rng.choice([0, 1, 3])
        d, m = rng.choice([2, 3, 4, 8]), rng.choice([2, 3, 4, 6])
        for expr in (FloorDiv(inner, d), Mod(inner, d), Mod(FloorDiv(inner, d), m), FloorDiv(Mod(inner, m * d), d),
                     d * FloorDiv(inner, d) + Mod(inner, d)):
            simple = simplify_with_ranges(expr, bounds)
            assert _values(simple, bounds) == _values(expr, bounds), (expr, simple, bounds)


def test_index_below_proves_bounds_of_non_negative_sums_only():
    bounds = {X[0]: 4, X[1]: 8}
    assert index_below(8 * X[0] + X[1], bounds, 32)
    assert not index_below(8 * X[0] + X[1], bounds, 31)
    assert not index_below(8 * X[0] + X[1] - 8, bounds, 32)   # negative where x0 == 0
    assert index_below(2 * FloorDiv(X[1], 2) + 1, bounds, 8)
