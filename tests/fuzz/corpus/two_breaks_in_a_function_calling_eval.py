"""Two graph breaks in a function that calls eval (or exec, locals, vars): after the
second, an argument held the first eval's result. Such a function keeps every
local live, and a resume function's stack parameter (__surge_stack_0) was passed
to the next resume function as a live local, shifting its parameters (found by
test_opcodes.OpcodeTest.test_compare_function_objects, test_fstring, test_super,
test_types' SimpleNamespaceTests, test_grammar and test_dict.test_bad_key:
"'int' object has no attribute 'assertNotEqual'")."""
import torch


class Checker:
    def differ(self, a, b):
        return a != b


CHECKER = Checker()


def f(x, n):
    first = eval("n + 1")
    second = eval("n * 2")
    return x.add(first + second), CHECKER.differ(first, second)


MUTATIONS = []
N_VALUES = [1, 3]
