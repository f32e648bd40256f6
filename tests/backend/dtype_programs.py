"""Small programs where a Python scalar meets a tensor of some dtype: fill values,
constants, bounds, shifts, rounding. Each must give eager's dtype and values exactly
(integers and bools) in both code generators (test_dtype_literals.py here, and
tests/backend_cpp/test_dtype_literals.py)."""
import torch
import torch.nn.functional as F


def _ints(*shape, dtype=torch.int64, low=-9, high=9):
    return torch.randint(low, high, shape, dtype=dtype)


def _bools(*shape):
    return torch.rand(*shape) > 0.5


# name -> (fn, make inputs)
PROGRAMS = {
    # transformers' causal-LM loss: labels padded with -100, then used as indices
    "pad_labels_then_index": (lambda labels, w: w[F.pad(labels, (0, 1), value=-100).clamp(min=0)],
                              lambda: (_ints(2, 5, low=0, high=12), torch.randn(12))),
    "pad_int64_value": (lambda x: F.pad(x, (1, 1), value=-100), lambda: (_ints(2, 5),)),
    "pad_int64_beyond_int32": (lambda x: F.pad(x, (0, 2), value=2**40), lambda: (_ints(2, 5),)),
    "pad_int64_min": (lambda x: F.pad(x, (0, 1), value=-2**63), lambda: (_ints(2, 5),)),
    "pad_uint8_255": (lambda x: F.pad(x, (0, 1), value=255), lambda: (_ints(2, 5, dtype=torch.uint8, low=0),)),
    "pad_bool": (lambda x: F.pad(x, (1, 0), value=1), lambda: (_bools(2, 5),)),
    "pad_half_nan": (lambda x: F.pad(x, (0, 1), value=float("nan")), lambda: (torch.randn(2, 5).half(),)),
    "masked_fill_int_index": (lambda x, m, w: w[x.masked_fill(m, 0)],
                              lambda: (_ints(3, 4, low=0, high=7), _bools(3, 4), torch.randn(7))),
    "masked_fill_bf16_neg_inf": (lambda x, m: x.masked_fill(m, float("-inf")),
                                 lambda: (torch.randn(3, 4).bfloat16(), _bools(3, 4))),
    "where_int8_scalar": (lambda x: torch.where(x > 0, x, -3), lambda: (_ints(3, 4, dtype=torch.int8),)),
    "clamp_int_float_bounds": (lambda x: x.clamp(-2.5, 4.5), lambda: (_ints(3, 4),)),
    "full_int64_index": (lambda w, i: w[i + torch.full((4,), 2, dtype=torch.int64)],
                         lambda: (torch.randn(9), _ints(4, low=0, high=7))),
    "arange_start_step_index": (lambda w: w[torch.arange(1, 9, 3)], lambda: (torch.randn(9),)),
    "compare_int_with_float": (lambda x: (x < 2.5) & (x >= -1.5), lambda: (_ints(3, 4),)),
    "floordiv_remainder_negative": (lambda x: (x // -3, x % -3, torch.div(x, 4, rounding_mode="floor")),
                                    lambda: (_ints(3, 4, dtype=torch.int32),)),
    "shifts_int16": (lambda x: torch.bitwise_right_shift(torch.bitwise_left_shift(x, 3), 1), lambda: (_ints(3, 4, dtype=torch.int16),)),
    "int8_wraps": (lambda x: x * 100 + 100, lambda: (_ints(3, 4, dtype=torch.int8),)),
    "uint8_minus": (lambda x: x - 10, lambda: (_ints(3, 4, dtype=torch.uint8, low=0),)),
    "bool_add_mul": (lambda a, b: (a + b, a * b, a + a), lambda: (_bools(3, 4), _bools(3, 4))),
    "bool_and_constant": (lambda a: (a & True, a | False), lambda: (_bools(3, 4),)),
    "rounding_integers": (lambda x: (torch.floor(x), torch.ceil(x), torch.round(x), torch.trunc(x)),
                          lambda: (_ints(3, 4, dtype=torch.int16),)),
    "round_decimals": (lambda x: (torch.round(x, decimals=2), torch.round(x, decimals=-1)),
                       lambda: (torch.randn(3, 4, dtype=torch.float64) * 100,)),
    # one output: GCC 12 failed with an internal compiler error on std::signbit's loop
    "signbit_bf16": (lambda x: torch.signbit(x), lambda: (torch.randn(400).bfloat16(),)),
    "signbit_negative_zero": (lambda x: torch.signbit(x * 0), lambda: (torch.randn(400),)),
    # a one-element arange: its index is the constant 0, cast to the float it meets
    "arange_of_one_as_float": (lambda x: (x + torch.arange(1, dtype=torch.float32), x + torch.arange(1).half()),
                               lambda: (torch.randn(4, 1),)),
    "relu_keeps_nan": (lambda x: (torch.relu(x), torch.relu(x.half())),
                       lambda: (torch.tensor([float("nan"), -1.0, 2.0, float("-inf")]),)),
    "arange_of_one_arithmetic_as_float": (lambda x: x + (torch.arange(1) * 3 + 1).float(),
                                          lambda: (torch.randn(4, 1),)),
    "scalar_tensor_times_int": (lambda x: x * torch.scalar_tensor(3, dtype=torch.int64), lambda: (_ints(3, 4),)),
}


def assert_exact(actual, expected) -> None:
    actual = actual if isinstance(actual, (tuple, list)) else (actual,)
    expected = expected if isinstance(expected, (tuple, list)) else (expected,)
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        assert a.dtype == e.dtype and a.shape == e.shape, (a.dtype, e.dtype, a.shape, e.shape)
        torch.testing.assert_close(a, e, rtol=0, atol=0, equal_nan=True)
