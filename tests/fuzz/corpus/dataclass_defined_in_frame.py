"""A @dataclass class defined in the frame: capture breaks at the class statement,
then inside dataclasses' own code, a resume function falls back (its break code
cannot be assembled: "co_varnames is too small") and runs with its locals shifted,
so a local of the user's function holds the builtin __build_class__ (found by
test_dataclasses.TestCase.test_init_var_inheritance and test_grammar's
test_var_annot_custom_maps / test_plain_integers: "'builtin_function_or_method'
object has no attribute 'assertEqual'")."""
from dataclasses import dataclass

import torch

XFAIL = "the eager run of a resume function whose break code failed to assemble gets shifted locals"


def f(x, n):
    @dataclass
    class Point:
        x: int

    p = Point(n)
    return x.add(n), vars(p)


MUTATIONS = []
N_VALUES = [1]
