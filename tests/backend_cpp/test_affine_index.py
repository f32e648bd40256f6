"""affine_index: an index with divisions becomes the affine form it equals on the loop domain."""
import sympy

from surge.codegen.cpp.affine_index import affine_index
from surge.lowering.sizes import FloorDiv, Mod

x0, x1 = sympy.symbols("x0 x1", integer=True, nonnegative=True)


def values(expr, sizes):
    return [int(expr.subs({x0: a, x1: b})) for a in range(sizes["x0"]) for b in range(sizes["x1"])]


def test_a_view_of_a_transpose_read_back_is_affine():
    flat = 64 * x0 + x1
    expr = 1024 * FloorDiv(flat, 1024) + Mod(flat, 64) + 64 * Mod(FloorDiv(flat, 64), 16)
    sizes = {"x0": 32, "x1": 64}
    assert affine_index(expr, sizes, "x1") == flat


def test_only_the_innermost_variable_is_split_off_where_the_outer_part_is_not_affine():
    expr = 10 * FloorDiv(x0, 3) + Mod(x1, 8)
    sizes = {"x0": 9, "x1": 8}
    out = affine_index(expr, sizes, "x1")
    assert out == 10 * FloorDiv(x0, 3) + x1
    assert values(out, sizes) == values(expr, sizes)


def test_an_index_that_is_not_affine_in_the_innermost_variable_is_kept():
    expr = Mod(7 * x0 + x1, 5)
    assert affine_index(expr, {"x0": 4, "x1": 3}, "x1") == expr
    assert affine_index(expr, {"x0": 4, "x1": 3}, None) == expr
