"""The KeyError of a missing dict key carries the key as its argument; under surge
its argument is the key's repr, so str(e) and e.args differ ("'\\'b\\''"). Every
raise_in_user_code(KeyError, repr(key)) site makes it (found while reducing
test_ordered_dict's test_delitem)."""
import torch

def f(x, n):
    table = {"a": n}
    try:
        table["b"]
    except KeyError as e:
        message, args = str(e), e.args
    return x + n, message, args


MUTATIONS = []
N_VALUES = [1]
