"""A @dataclass class defined in the frame, then a method call on an argument: the
argument held the builtin __build_class__ (AttributeError in the user's program).
dataclasses' code calls exec, which makes every local of its frames live at a
break, and the resume functions' own stack parameters were passed on as live
locals, colliding with the next resume function's parameters of the same name
(found by test_dataclasses.TestCase.test_init_var_inheritance)."""
from dataclasses import dataclass

import torch


def f(x, n):
    @dataclass
    class Point:
        x: int

    p = Point(n)
    return x.add(n), vars(p)


MUTATIONS = []
N_VALUES = [1]
