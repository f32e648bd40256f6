"""list.count, ``in`` and ``==`` of lists compared objects with a Python __eq__ by
identity (found by test_list.ListTest.test_count with ALWAYS_EQ, and
test_equal_operator_modifying_operand)."""
import torch


class AlwaysEqual:
    def __eq__(self, other):
        return True


class Deferring:
    def __eq__(self, other):
        return NotImplemented


ANY = AlwaysEqual()


def f(x, n):
    items = [n, 1, 2] * 2
    made = AlwaysEqual()
    return (items.count(ANY), [made] == [n], [n] == [made], Deferring() in [1, 2],
            [Deferring()] == [ANY], ANY in [n], x * items.count(n))


MUTATIONS = []
N_VALUES = [1, 3]
