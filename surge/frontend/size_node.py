"""``SizeNode``: surge's implementation of torch's SymNode protocol, and the helpers that
read symbolic values (their expression, hint and shape environment).

A ``torch.SymInt`` / ``SymFloat`` / ``SymBool`` made by the ``ShapeEnv`` (shape_env.py)
holds a ``SizeNode``; torch calls its methods by name for every operation on the value
(arithmetic, comparisons, the contiguity questions a meta kernel asks) and for every
decision (``guard_bool``, ``guard_int``), which the node hands to its environment.
"""
from __future__ import annotations

import builtins
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from .symbolic import MATH_FUNCTIONS, Expr, Rel, apply_fn
from .symbolic_layout import channels_last_strides, contiguous_in_order, non_overlapping_and_dense

if TYPE_CHECKING:
    from .shape_env import ShapeEnv

builtins_round = builtins.round



def expr_of(value) -> Expr:
    """The expression of a SymInt / SymFloat / SizeNode / number."""
    if isinstance(value, SizeNode):
        return value.expr
    if isinstance(value, (torch.SymInt, torch.SymFloat)):
        return value.node.expr
    return Expr.const(value)


def is_symbolic(value) -> bool:
    return isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)) and isinstance(value.node, SizeNode)


def hint_of(value):
    """The example value of a size (a SymInt's hint, a number itself): never a guard."""
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return value.node.hint
    if isinstance(value, (tuple, list, torch.Size)):
        return type(value)(hint_of(v) for v in value) if not isinstance(value, torch.Size) \
            else tuple(hint_of(v) for v in value)
    return value


def env_of(value):
    """The ShapeEnv of a symbolic value (or of the first one in a nested structure), else None."""
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)) and isinstance(value.node, SizeNode):
        return value.node.env
    if isinstance(value, (tuple, list, torch.Size)):
        for v in value:
            found = env_of(v)
            if found is not None:
                return found
    if isinstance(value, torch.Tensor):
        return env_of(tuple(value.shape)) or env_of(tuple(value.stride()))
    return None


class SizeNode:
    """One symbolic int, float or bool: an expression (or a ``Rel`` / bool combination)
    and its hint. torch.SymInt(node) calls these methods by name."""

    def __init__(self, env: ShapeEnv, expr, pytype, hint):
        self.env = env
        self.expr = expr
        self.pytype = pytype
        self._hint = hint
        self._int_generation = -1   # the env's generation the kept ``maybe_as_int`` answer is of
        self._int_value = None

    # torch's Python helpers read this; they take the "no shape env" path (guard_bool).
    shape_env = None

    @property
    def hint(self):
        return self._hint

    def has_hint(self):
        return self._hint is not None

    def is_int(self):
        return self.pytype is int

    def is_float(self):
        return self.pytype is float

    def is_bool(self):
        return self.pytype is bool

    def is_symbolic(self):
        return True

    def is_nested_int(self):
        return False

    def nested_int(self):
        return None

    def is_constant(self):
        return False

    def clone(self):
        return self

    def str(self):
        return repr(self.expr)

    __str__ = str

    def _graph_repr(self):
        return self.str()

    def __repr__(self):
        return f"SizeNode({self.expr!r}, hint={self._hint!r})"

    # ---- constants ------------------------------------------------------------
    def _const(self, value):
        key = (type(value), value)
        found = self.env._const_nodes.get(key)
        if found is not None:
            return found
        if isinstance(value, bool):
            node = SizeNode(self.env, BoolConst(value), bool, value)
        else:
            node = SizeNode(self.env, Expr.const(value), type(value), value)
        if value == value:   # not NaN: a NaN key never matches itself
            self.env._const_nodes[key] = node
        return node

    wrap_int = _const
    wrap_float = _const
    wrap_bool = _const

    def maybe_as_int(self):
        # torch asks this of every size and stride of every tensor it makes (dozens of
        # times per meta tensor); the answer changes only with the facts
        if self.pytype is not int:
            return None
        env = self.env
        if self._int_generation != env.generation:
            c = env.simplify(self.expr).constant()
            self._int_value = int(c) if c is not None else None
            self._int_generation = env.generation
        return self._int_value

    def maybe_as_float(self):
        if self.pytype is not float:
            return None
        c = self.env.simplify(self.expr).constant()
        return float(c) if c is not None else None

    def maybe_as_bool(self):
        if self.pytype is not bool:
            return None
        return static_bool(self.env, self.expr)

    # ---- arithmetic -------------------------------------------------------------
    def _arith(self, other, op, build, hint_fn, pytype=None):
        """``self op other`` as a node, one per operation and operands' expressions (its
        hint follows from theirs: the symbols' hints never change)."""
        o_expr = expr_of(other)
        if pytype is None:
            pytype = float if (self.pytype is float or (isinstance(other, SizeNode) and other.pytype is float)
                               or isinstance(other, float)) else int
        key = (op, self.expr, o_expr, pytype)
        found = self.env.arith_nodes.get(key)
        if found is not None:
            return found
        o_hint = other._hint if isinstance(other, SizeNode) else other
        hint = None if self._hint is None or o_hint is None else hint_fn(self._hint, o_hint)
        node = self.env.arith_nodes[key] = SizeNode(self.env, build(self.expr, o_expr), pytype, hint)
        return node

    def add(self, o):
        return self._arith(o, "add", lambda a, b: a + b, lambda a, b: a + b)

    def sub(self, o):
        return self._arith(o, "sub", lambda a, b: a - b, lambda a, b: a - b)

    def mul(self, o):
        return self._arith(o, "mul", lambda a, b: a * b, lambda a, b: a * b)

    def floordiv(self, o):
        return self._arith(o, "floordiv", lambda a, b: apply_fn("floordiv", a, b), lambda a, b: a // b)

    int_floordiv = floordiv

    def mod(self, o):
        return self._arith(o, "mod", lambda a, b: apply_fn("mod", a, b), lambda a, b: a % b)

    def truediv(self, o):
        return self._arith(o, "truediv", lambda a, b: apply_fn("truediv", a, b), lambda a, b: a / b, float)

    int_truediv = truediv
    float_truediv = truediv

    def pow(self, o):
        n = expr_of(o).constant()
        if isinstance(n, int) and not isinstance(n, bool) and n >= 0:
            return self._arith(o, "pow", lambda a, b: a.pow(n), lambda a, b: a ** b)
        # A symbolic or fractional exponent (``0.95 ** step``, ``step ** 0.5``): an opaque
        # power. An int to an int power is an int when the exponent is not negative.
        floats = self.pytype is float or isinstance(o, float) or (isinstance(o, SizeNode) and o.pytype is float)
        pytype = float
        if not floats:
            exponent = expr_of(o)
            if n is not None or self.env.assume(Rel("<=", -exponent), "an int power's exponent is not negative"):
                pytype = int if (n is None or n >= 0) else float
        return self._arith(o, "fn_pow", lambda a, b: apply_fn("pow", a, b), lambda a, b: a ** b, pytype)

    pow_by_natural = pow
    float_pow = pow

    def lshift(self, o):
        k = expr_of(o).constant()
        if isinstance(k, int) and k >= 0:
            return self.mul(2 ** k)
        return self._bitwise(o, lambda a, b: a << b)

    def rshift(self, o):
        k = expr_of(o).constant()
        if isinstance(k, int) and k >= 0:
            return self.floordiv(2 ** k)   # Python's >> floors, as // does
        return self._bitwise(o, lambda a, b: a >> b)

    def _bitwise(self, o, fn):
        """Bitwise operators have no expression form: the operands are specialized."""
        a = self.guard_value()
        b = o.guard_value() if isinstance(o, SizeNode) else o
        return self._const(fn(a, b))

    def bitwise_and(self, o):
        return self._bitwise(o, lambda a, b: a & b)

    def bitwise_or(self, o):
        return self._bitwise(o, lambda a, b: a | b)

    def bitwise_xor(self, o):
        return self._bitwise(o, lambda a, b: a ^ b)

    def neg(self):
        return SizeNode(self.env, -self.expr, self.pytype, None if self._hint is None else -self._hint)

    def pos(self):
        return self

    def abs(self):
        if self.env.assume(Rel("<=", -self.expr), "abs() of a size"):
            return self
        return self.neg()

    def sym_max(self, o):
        return self._arith(o, "max", lambda a, b: apply_fn("max", a, b), max)

    def sym_min(self, o):
        return self._arith(o, "min", lambda a, b: apply_fn("min", a, b), min)

    def sym_sum(self, args):
        total = self._const(0)   # the receiver only names the environment
        for a in args:
            total = total.add(a)
        return total

    def sym_float(self):
        return SizeNode(self.env, self.expr, float, None if self._hint is None else float(self._hint))

    def _rounding(name):  # noqa: N805  (builds this class's floor, ceil, trunc)
        def method(self):
            if self.pytype is int:
                return self
            hint = None if self._hint is None else getattr(math, name)(self._hint)
            return SizeNode(self.env, apply_fn(name, self.expr), int, hint)
        return method

    floor = _rounding("floor")
    ceil = _rounding("ceil")
    trunc = _rounding("trunc")
    sym_int = trunc   # int() of a float truncates

    def round(self, ndigits=None):
        value = builtins_round(self.guard_value()) if ndigits is None else builtins_round(self.guard_value(), ndigits)
        return self._const(value)

    # ---- comparisons --------------------------------------------------------------
    def _compare(self, other, op):
        rel = Rel.compare(op, self.expr, expr_of(other))
        return SizeNode(self.env, rel, bool, self.env.rel_hint(rel))

    def eq(self, o):
        return self._compare(o, "==")

    def ne(self, o):
        return self._compare(o, "!=")

    def lt(self, o):
        return self._compare(o, "<")

    def le(self, o):
        return self._compare(o, "<=")

    def gt(self, o):
        return self._compare(o, ">")

    def ge(self, o):
        return self._compare(o, ">=")

    # ---- booleans ------------------------------------------------------------------
    def _bool_op(self, other, op):
        o_expr = other.expr if isinstance(other, SizeNode) else BoolConst(bool(other))
        o_hint = other._hint if isinstance(other, SizeNode) else bool(other)
        if self._hint is None or o_hint is None:
            hint = None
        else:
            hint = (self._hint and o_hint) if op == "and" else (self._hint or o_hint)
        return SizeNode(self.env, BoolOp(op, (self.expr, o_expr)), bool, hint)

    def sym_and(self, o):
        return self._bool_op(o, "and")

    def sym_or(self, o):
        return self._bool_op(o, "or")

    and_ = sym_and
    or_ = sym_or

    def sym_not(self):
        return SizeNode(self.env, BoolOp("not", (self.expr,)), bool, None if self._hint is None else not self._hint)

    def sym_ite(self, then, otherwise):
        return then if self.guard_bool("", 0) else otherwise

    # ---- turning symbolic values into Python values (guards) ---------------------
    def guard_bool(self, file="", line=0):
        expr = self.expr if self.pytype is bool else Rel("!=", self.expr)  # bool(n): n != 0
        # Most conditions meta kernels ask are decided statically: the text saying why a
        # guard is needed is only made for the others.
        known = static_bool(self.env, expr)
        if known is not None:
            return known
        return guard_bool_expr(self.env, expr, f"a condition on sizes{_where(file, line)}")

    bool_ = guard_bool
    def expect_true(self, file="", line=0):
        """A check torch's kernel makes again when it runs (``TORCH_SYM_CHECK``): on a
        data-dependent value it is assumed, not guarded (the kernel raises as eager does)."""
        if isinstance(self.expr, Rel) and self.env.data_dependent(self.expr):
            known = self.env.static_value(self.expr)
            if known is None:
                self.env.assume_at_run_time(self.expr)
                return True
            return known
        return self.guard_bool(file, line)

    guard_size_oblivious = guard_bool
    guard_or_false = guard_bool
    guard_or_true = guard_bool

    def statically_known_true(self, file="", line=0):
        return static_bool(self.env, self.expr) is True

    def guard_value(self, file="", line=0):
        if self.pytype is bool:
            return self.guard_bool(file, line)
        where = _where(file, line) or _where(*self.env.user_location())
        value = self.env.specialize(self.expr, f"its value was needed as a Python number{where}")
        return self.pytype(value)

    def guard_int(self, file="", line=0):
        return int(self.guard_value(file, line))

    def guard_float(self, file="", line=0):
        return float(self.guard_value(file, line))

    int_ = guard_int

    def expect_size(self, file="", line=0):
        rel = Rel("<=", -self.expr)
        if self.env.data_dependent(rel) and self.env.static_value(rel) is None:
            self.env.assume_at_run_time(rel)   # a value read back and used as a size
        else:
            self.env.assume(rel, "a size is not negative")
        return True

    def evaluate(self):
        return self.guard_value()

    def is_integer(self):
        return self._const(True)

    # ---- layout predicates (C++ asks them of symbolic tensors) --------------------
    def _layout(self, name: str, predicate, sizes, strides):
        """A layout predicate's answer (a Python bool or int), memoized in the environment by
        the sizes' and strides' expressions: C++ asks each of them of every tensor it makes,
        and a model makes tensors of the same few layouts over and over. An answer stays
        true: the facts it recorded hold from then on. Size-oblivious answers (data-dependent
        sizes taken as at least 2, shape_env.py) are kept apart."""
        key = (name, self.env.oblivious, tuple(expr_of(v) for v in sizes), tuple(expr_of(v) for v in strides))
        answers = self.env.layout_answers
        found = answers.get(key)
        if found is None:
            found = answers[key] = predicate(self.env, sizes, strides)
        return self._const(found)

    def is_contiguous(self, sizes, strides):
        return self._layout("contiguous", _contiguous, sizes, strides)

    def is_channels_last_contiguous_2d(self, sizes, strides):
        return self._layout("cl2d", lambda env, si, st: len(si) == 4 and contiguous_in_order(env, si, st, (1, 3, 2, 0)),
                            sizes, strides)

    def is_channels_last_contiguous_3d(self, sizes, strides):
        return self._layout("cl3d", lambda env, si, st: len(si) == 5 and contiguous_in_order(env, si, st, (1, 4, 3, 2, 0)),
                            sizes, strides)

    def is_channels_last_strides_2d(self, sizes, strides):
        return self._layout("cls2d", lambda env, si, st: len(si) == 4 and channels_last_strides(env, si, st, (1, 3, 2, 0)),
                            sizes, strides)

    def is_channels_last_strides_3d(self, sizes, strides):
        return self._layout("cls3d",
                            lambda env, si, st: len(si) == 5 and channels_last_strides(env, si, st, (1, 4, 3, 2, 0)),
                            sizes, strides)

    def is_non_overlapping_and_dense(self, sizes, strides):
        return self._layout("dense", non_overlapping_and_dense, sizes, strides)

    def is_non_overlapping_and_dense_indicator(self, sizes, strides):
        return self._layout("dense_int", lambda env, si, st: int(non_overlapping_and_dense(env, si, st)),
                            sizes, strides)


def _contiguous(env, sizes, strides) -> bool:
    return contiguous_in_order(env, sizes, strides, range(len(sizes) - 1, -1, -1))


def _math_method(name):
    """``SizeNode.sym_sqrt`` and the like: ``math.sqrt`` of a symbolic number stays symbolic."""
    def method(self):
        hint = None if self._hint is None else getattr(math, name)(self._hint)
        return SizeNode(self.env, apply_fn(name, self.expr), float, hint)
    method.__name__ = f"sym_{name}"
    return method


for _name in MATH_FUNCTIONS:
    setattr(SizeNode, f"sym_{_name}", _math_method(_name))


def _where(file, line) -> str:
    return f" at {file}:{line}" if file else ""


@dataclass(frozen=True)
class BoolConst:
    value: bool


@dataclass(frozen=True)
class BoolOp:
    op: str        # and, or, not
    parts: tuple


def static_bool(env: ShapeEnv, expr):
    if isinstance(expr, BoolConst):
        return expr.value
    if isinstance(expr, Rel):
        return env.static_value(expr)
    values = [static_bool(env, p) for p in expr.parts]
    if expr.op == "not":
        return None if values[0] is None else not values[0]
    if expr.op == "and":
        return False if False in values else True if all(v is True for v in values) else None
    return True if True in values else False if all(v is False for v in values) else None


def hint_bool(env: ShapeEnv, expr) -> bool:
    if isinstance(expr, BoolConst):
        return expr.value
    if isinstance(expr, Rel):
        if env.data_dependent(expr):
            env.refuse_data_dependent(expr, "a condition")
        return expr.evaluate(env.hint)
    values = [hint_bool(env, p) for p in expr.parts]
    return (not values[0]) if expr.op == "not" else all(values) if expr.op == "and" else any(values)


def guard_bool_expr(env: ShapeEnv, expr, why: str) -> bool:
    """The value of a condition for the hints; the facts it rests on are recorded."""
    if isinstance(expr, BoolConst):
        return expr.value
    if isinstance(expr, Rel):
        return env.assume(expr, why)
    known = static_bool(env, expr)
    if known is not None:
        return known
    if expr.op == "not":
        return not guard_bool_expr(env, expr.parts[0], why)
    value = hint_bool(env, expr)
    # Guard the parts that decide the value: all of them, or the first that settles it.
    settles = (expr.op == "and") != value
    for part in expr.parts:
        if hint_bool(env, part) == (expr.op == "or") or not settles:
            guard_bool_expr(env, part, why)
            if settles:
                break
    return value
