"""Random small programs from a fixed-seed RNG.

A program is a function ``f(x, n)`` (x: a float tensor of 3 elements, n: a small
int) over a fixed pool of locals (ints i0-i2, tensors t0-t2 with t0 = x, a list,
a dict), all set at its top and all returned at its end, so that any statement
can be removed (the minimiser does) and the program stays valid. Statements mix
control flow, containers, closures and generators, classes with properties and
descriptors, exceptions, torch ops and in-place ops, and writes to module state;
``MUTATIONS`` change module state, classes, closure cells and globals between
calls (the probes for stale cache entries).
"""
from __future__ import annotations

import dataclasses
import random

from . import prelude

INTS = ("i0", "i1", "i2")
TENSORS = ("t0", "t1", "t2")
HEADER = ["global G2", "i0, i1, i2 = n, n + 1, 2", "t0, t1, t2 = x, x * 2, torch.ones(3)",
          "lst = [n, 1, 2]", 'd = {"a": n}']
FOOTER = "return t0, t1, t2, i0, i1, i2, lst, d"


@dataclasses.dataclass
class Node:
    """A statement: header lines, each with an indented body or None (``if``/``else``)."""
    parts: list[tuple[str, list["Node"] | None]]

    def render(self, indent: str) -> list[str]:
        lines = []
        for head, body in self.parts:
            lines.append(indent + head)
            if body is not None:
                inner = [line for node in body for line in node.render(indent + "    ")]
                lines += inner or [indent + "    pass"]
        return lines


def simple(text: str) -> Node:
    return Node([(text, None)])


@dataclasses.dataclass
class Program:
    body: list[Node]
    mutations: list[str]
    n_values: list[int]
    backend: str = "eager"
    keep_blocks: tuple[str, ...] | None = None   # prelude blocks kept (None: all)

    def function_source(self) -> str:
        lines = ["def f(x, n):"] + ["    " + h for h in HEADER]
        lines += [line for node in self.body for line in node.render("    ")]
        lines.append("    " + FOOTER)
        return "\n".join(lines)

    def source(self) -> str:
        fn = self.function_source()
        blocks = [src for names, src in prelude.BLOCKS
                  if self.keep_blocks is None or any(name in self.keep_blocks for name in names)]
        return "\n".join([*blocks, "", "", fn, "", "",
                          f"MUTATIONS = {self.mutations!r}", f"N_VALUES = {self.n_values!r}",
                          f"BACKEND = {self.backend!r}", ""])


class Generator:
    """``include_known``: also generate the constructs of open bugs that already have a
    corpus program (they would otherwise be most of what a run finds); none is held
    back at present."""

    def __init__(self, rng: random.Random, include_known: bool = False, classes: bool = False):
        self.r = rng
        self.depth = 0
        self.include_known = include_known
        # Class-heavy programs: super() chains, class attributes and objects whose
        # classes the mutations change (stale-cache probes of class guards).
        self.classes = classes

    def pick(self, *options):
        return self.r.choice(options)

    def small(self) -> int:
        return self.r.randint(0, 5)

    def int_var(self) -> str:
        return self.pick(*INTS)

    def tensor_var(self) -> str:
        return self.pick(*TENSORS)

    # ---- expressions ------------------------------------------------------------

    def int_expr(self, depth: int = 0) -> str:
        i, j = self.int_var(), self.int_var()
        leaves = [i, str(self.small()), "G", "len(lst)", "OBJ.a", "Box.k", "OBJ.level", 'STATE["n"]',
                  'd.get("a", 0)', "(lst[-1] if lst else 0)", f"{self.tensor_var()}.shape[0]"]
        if depth >= 2:
            return self.pick(*leaves)
        sub = lambda: self.int_expr(depth + 1)  # noqa: E731
        return self.pick(
            *leaves,
            f"({sub()} {self.pick('+', '-', '*')} {sub()})",
            f"({sub()} {self.pick('//', '%')} ({sub()} % 3 + 1))",
            f"max({sub()}, {sub()})", f"min({sub()}, {sub()})", f"abs({sub()})",
            f"helper({sub()})", f"SCALE({sub()})", f"sum(gen({sub()} % 4))", f"Box.twice({sub()})",
            f"OBJ.scaled({sub()})", "OBJ.double", "OBJ.tracked", f"Box.make({sub()}).a",
            f"int({self.tensor_var()}.sum() > 0)", f"({i} if {i} > {j} else {j})",
            "sum(v for v in lst)", f"len([v for v in lst if v > {i}])", "COUNTER(1)",
            f"(Vec({i}, 1) + Vec(2, {j})).x", f"len({{v % 3 for v in lst}})",
            f"next(iter(lst), {i})", f"sorted(lst, reverse=True)[0] if lst else {i}",
        )

    def tensor_expr(self, depth: int = 0) -> str:
        t, u = self.tensor_var(), self.tensor_var()
        if depth >= 2:
            return t
        sub = lambda: self.tensor_expr(depth + 1)  # noqa: E731
        return self.pick(
            t, f"torch.sin({sub()})", f"({sub()} + {self.int_expr(1)})", f"({sub()} * {sub()})",
            f"{sub()}.relu()", f"torch.cat([{t}, {u}])[:3]", f"{t}.clone().mul_(2)",
            f"torch.where({t} > 0, {t}, -{u})", f"{t}[torch.tensor([2, 0, 1])]", f"({t}.sum() * {u})",
            f"({sub()} + W)", f"OBJ.scaled({sub()})", f"helper({sub()})", f"SCALE({sub()})",
            f"Box.twice({sub()})", f"({t} / ({u}.abs() + 1))", f"{t}.flip(0)", f"{t}.cumsum(0)",
        )

    def cond(self) -> str:
        i, j = self.int_var(), self.int_var()
        return self.pick(
            f"{i} > {j}", f"{i} % 2 == 0", f"{self.int_expr(1)} >= {self.small()}", f"{self.tensor_var()}.sum() > 0",
            "lst", '"a" in d', "isinstance(OBJ, Box)", f"{i} in lst", "G > 2", "OBJ.a > 3",
        )

    # ---- statements -------------------------------------------------------------

    def block(self, size: int) -> list[Node]:
        self.depth += 1
        try:
            return [self.statement() for _ in range(size)]
        finally:
            self.depth -= 1

    def statement(self) -> Node:
        kinds = [self.assign_int, self.assign_tensor, self.assign_tensor, self.in_place, self.container,
                 self.side_effect, self.local_function, self.python_corner, self.iterator]
        if self.depth < 2:
            kinds += [self.if_else, self.loop, self.try_except, self.no_grad, self.local_class, self.breaking]
        if self.classes:
            kinds += [self.class_use] * 4
        return self.r.choice(kinds)()

    def class_use(self) -> Node:
        """Reads that depend on a class hierarchy the mutations change."""
        i, t = self.int_var(), self.tensor_var()
        return simple(self.pick(
            f"{i} = LEAF.scale({i})", f"{t} = LEAF.scale({t})", f"{i} = Leaf.build({i})",
            f"{i} = LEAF.base_k() + {i}", f"{t} = {t} * Leaf().base_k()", f"{i} = Leaf().scale({i})",
            f"{i} = int(bool(FLAG)) + {i}", f"{i} = int(bool(Flag({i})))", f"{i} = int(FLAG == Flag(1))",
            f"{i} = lst.count(FLAG)", f"{i} = int(Flag({i}) in [FLAG])", f"{t} = {t} + 1 if FLAG else {t} - 1",
            f"{i} = Mid().scale({i})", f"{i} = int(isinstance(LEAF, Base))",
        ))

    def breaking(self) -> Node:
        """A graph break (print, a tensor's value in a branch, .item()) with state alive across it."""
        i, t = self.int_var(), self.tensor_var()
        return self.pick(
            Node([("for v in range(2):", [simple(f"print('step', v, {i})"), self.statement()])]),
            Node([(f"if {t}.sum() > 0:", [self.statement()]), ("else:", [self.statement()])]),
            simple(f"{i} = int({t}.sum().item() > 0) + {i}"),
            Node([("def closure_step():", [simple(f"nonlocal {i}"), simple(f"{i} += 1"), simple(f"print('c', {i})")]),
                  ("closure_step()", None), ("closure_step()", None)]),
            Node([("print('before', len(lst))", None), ("lst.append(len(d))", None), (f"print('after', {i})", None)]),
        )

    def python_corner(self) -> Node:
        i, j = self.int_var(), self.int_var()
        return self.pick(
            simple(f"{i} = getattr(OBJ, 'a', {j}) + hasattr(OBJ, 'missing')"),
            simple(f"{i} = len(f'{{{j}:>4}}|{{OBJ.a!r}}')"), simple(f"{i} = ({j} := {j} + 1) * 2"),
            simple(f"{i} = int(0 < {j} < 4 != {i})"), simple(f"{i} = sorted(lst, key=lambda v: -v)[0] if lst else {j}"),
            simple(f"{i} = int(any(v > {j} for v in lst)) + int(all(lst))"), simple(f"{i} = int(isinstance({j}, bool))"),
            simple(f"{i} = sum(v for v in d.values() if isinstance(v, int))"),
            simple(f"{i} = len(str({j}) + repr(lst[:2]))"), simple(f"{i}, {j} = {j}, {i}"),
            simple(f"{i} = {{**d, 'z': {j}}}.get('z', 0)"), simple(f"{i} = [*lst, {j}][-1]"),
            simple(f"{i} = divmod({j} + 7, 3)[1]"), simple(f"{i} = int({j}).bit_length()"),
            simple(f"{i} = lst.index({j}) if {j} in lst else -1"),
        )

    def iterator(self) -> Node:
        i = self.int_var()
        if self.r.random() < 0.3:
            # corpus: list_iterator_sees_later_append, map_calls_its_function_lazily
            return self.pick(
                Node([("it = iter(lst)", None), (f"lst.append({i})", None), (f"{i} = len(list(it))", None)]),
                Node([("it = map(helper, lst)", None), (f"LOG.append({i})", None), (f"{i} = sum(it)", None)]),
            )
        return self.pick(
            Node([("it = filter(lambda v: v % 2, lst)", None), (f"{i} = next(it, -1)", None)]),
            Node([("it = gen(3)", None), (f"{i} = next(it) + next(it)", None), ("lst.extend(it)", None)]),
            Node([("def evens(limit):", [Node([("for v in range(limit):", [
                Node([("if v % 2 == 0:", [simple("yield v")])])])])]),
                  (f"{i} = sum(evens({i} % 5))", None)]),
            Node([("z = list(zip(lst, 'abc'))", None), (f"{i} = len(z)", None)]),
            Node([("for k in list(d):", [simple("d.pop(k, None)")]),
                  (f'd["e"] = {i}', None)]),
            # one iterator shared by two consumers; views that see later writes
            Node([("it = iter(lst)", None), (f"{i} = len(list(zip(it, it))) + len(list(it))", None)]),
            Node([("it = enumerate(map(helper, lst))", None), (f"LOG.append({i})", None),
                  (f"{i} = sum(k * v for k, v in it)", None)]),
            Node([("keys = d.keys()", None), (f'd["v{i}"] = {i}', None),
                  (f"{i} = len(keys) + len(keys & {{'a', 'e'}}) + int(('e', {i}) in d.items())", None)]),
        )

    def local_class(self) -> Node:
        i, j = self.int_var(), self.int_var()
        body = [
            Node([("def __init__(self, v):", [simple("self.v = v"), simple("self.reads = 0")])]),
            Node([("@property", None), ("def twice(self):", [simple("self.reads += 1"), simple("return self.v * 2")])]),
            Node([("def __len__(self):", [simple("return abs(self.v) % 3")])]),
            Node([("def __eq__(self, other):", [simple("return getattr(other, 'v', other) == self.v")])]),
            Node([("def bump(self):", [simple(f"nonlocal {i}"), simple(f"{i} += self.v"), simple(f"return {i}")])]),
        ]
        keep = [body[0]] + self.r.sample(body[1:], self.r.randint(1, 3))
        uses = self.pick(f"{j} = Local({i}).twice", f"{j} = int(bool(Local({i})))", f"{j} = int(Local({i}) == {i})",
                         f"{j} = lst.count(Local({i}))", f"{j} = len(Local({j}))")
        if body[4] in keep:
            uses = self.pick(uses, f"{j} = Local({j}).bump()")
        return Node([("class Local:", keep), (uses, None)])

    def assign_int(self) -> Node:
        return simple(f"{self.int_var()} = {self.int_expr()}")

    def assign_tensor(self) -> Node:
        return simple(f"{self.tensor_var()} = {self.tensor_expr()}")

    def in_place(self) -> Node:
        t = self.tensor_var()
        return simple(self.pick(f"{t}.add_({self.int_expr(1)})", f"{t}.mul_(0.5)", f"{t}[0] = {self.int_expr(1)}",
                                f"{t} += {self.tensor_expr(1)}", f"{t}.clamp_(-1, 1)"))

    def container(self) -> Node:
        i = self.int_var()
        return self.pick(
            simple(f"lst.append({self.int_expr()})"), simple(f"lst.extend([{i}, {self.small()}])"),
            Node([("if lst:", [simple(f"{i} = lst.pop()")])]), simple("lst.sort()"), simple("lst.reverse()"),
            simple(f'd["k{self.small()}"] = {self.int_expr()}'), simple(f'{i} = d.pop("k{self.small()}", {i})'),
            simple(f"lst = [v * 2 for v in lst if v != {i}]"), simple(f"lst = list(gen({i} % 4))"),
            simple(f"{i}, *rest = lst or [0]"), simple(f"d.update({{'a': {i}}})"),
            simple(f"{i} = len(d) + len(tuple(lst))"), simple(f"lst = lst[1:] + lst[:1]"),
        )

    def side_effect(self) -> Node:
        i = self.int_var()
        return self.pick(
            simple(f"LOG.append({self.int_expr(1)})"), simple(f"LOG.append({self.tensor_var()}.sum())"),
            simple(f"print('i', {i})"), simple('STATE["calls"] += 1'), simple(f"OBJ.a = {self.int_expr(1)}"),
            simple(f"OBJ.level = {self.int_expr(1)}"), simple(f"G2 = {self.int_expr(1)}"),
            simple(f'STATE["n"] = {i}'), simple("OBJ.hits += 1"),
        )

    def local_function(self) -> Node:
        i, j = self.int_var(), self.int_var()
        return self.pick(
            Node([(f"fn = lambda v: v + {i}", None), (f"{j} = fn({self.int_expr(1)})", None)]),
            Node([("def inner(v):", [simple(f"return v * {i} + G")]), (f"{j} = inner({self.small()})", None)]),
            Node([("def grow():", [simple("nonlocal lst"), simple(f"lst = lst + [{i}]")]), ("grow()", None)]),
            Node([("def pair(a, b=2, *rest, **kw):", [simple("return a + b + len(rest) + len(kw)")]),
                  (f"{j} = pair({i}, *lst[:2], k={self.small()})", None)]),
        )

    def if_else(self) -> Node:
        parts = [(f"if {self.cond()}:", self.block(self.r.randint(1, 3)))]
        if self.r.random() < 0.3:
            parts.append((f"elif {self.cond()}:", self.block(1)))
        if self.r.random() < 0.6:
            parts.append(("else:", self.block(self.r.randint(1, 2))))
        return Node(parts)

    def loop(self) -> Node:
        i = self.int_var()
        head = self.pick(f"for v in range({self.int_expr(1)} % 4):", "for v in lst[:3]:",
                         "for k, v in enumerate(lst[:3]):", "for a, v in zip(lst, lst[1:]):",
                         'for key, v in list(d.items())[:2]:')
        body = [simple(f"{i} = {i} + v")] + self.block(self.r.randint(0, 2))
        if self.r.random() < 0.3:
            body.append(Node([(f"if v > {self.small()}:", [simple(self.pick("break", "continue"))])]))
        return Node([(head, body)])

    def try_except(self) -> Node:
        i = self.int_var()
        risky = self.pick(f"{i} = lst[{i}]", f'{i} = d["k{self.small()}"]', f"{i} = 10 // ({i} - {self.small()})",
                          f"raise FuzzError({i})", f"{i} = int('x{i}')",
                          f"{i} = next(gen(0))")
        parts = [("try:", self.block(self.r.randint(0, 1)) + [simple(risky)])]
        handler = self.pick("except (FuzzError, KeyError, IndexError) as e:", "except ZeroDivisionError:",
                            "except Exception as e:", "except (ValueError, StopIteration):")
        if self.r.random() < 0.2:
            handled_info = self.pick("LOG.append(sys.exc_info()[0].__name__)", "LOG.append(str(sys.exception()))")
        else:
            handled_info = None
        handled = [simple(f"{i} = {self.small()}")] + self.block(self.r.randint(0, 1))
        if handled_info is not None:
            handled.append(simple(handled_info))
        if handler.endswith("as e:") and self.r.random() < 0.3:
            # corpus: bare_raise_in_handler
            handled.append(simple(self.pick("LOG.append(type(e).__name__)", "LOG.append(len(e.args))",
                                            "raise FuzzError('again') from e", "raise")))
        parts.append((handler, handled))
        if self.r.random() < 0.4:
            parts.append(("else:", self.block(1)))
        if self.r.random() < 0.4:
            parts.append(("finally:", [simple(f"LOG.append({i})")]))
        return Node(parts)

    def no_grad(self) -> Node:
        i = self.int_var()
        head = self.pick("with torch.no_grad():", "with torch.enable_grad():", f"with tracked({i}) as {i}:",
                         f"with Guard({self.pick('True', 'False')}):", f"with Guard(False), tracked({i}):")
        body = self.block(1)
        if "Guard" in head and self.r.random() < 0.5:
            body.append(Node([(f"if {self.cond()}:", [simple(f"raise FuzzError({i})")])]))
        return Node([(head, body)])

    # ---- mutations between calls --------------------------------------------------

    def mutation(self) -> str:
        k = self.r.randint(1, 6)
        if self.classes and self.r.random() < 0.7:
            return self.pick(
                f"Base.scale = lambda self, v: v * {k}", f"Mid.scale = lambda self, v: v + {k}",
                "Leaf.__bases__ = (Alt,)", f"Base.K = {k}", f"Mid.K = {k}", f"LEAF.K = {k}",
                "Flag.__bool__ = lambda self: False", "Flag.__len__ = lambda self: 0",
                "Flag.__eq__ = lambda self, other: True", f"Base.build = classmethod(lambda cls, v: v - {k})",
                f"Mid.build = classmethod(lambda cls, v: v * {k})", f"Leaf.base_k = lambda self: {k}",
            )
        return self.pick(
            f"G = {k}", f"Box.k = {k}", f"OBJ.a = {k}", f'STATE["n"] = {k}', f"SET_SCALE({k})",
            "W.add_(1.0)", f"W = torch.full((3,), {k}.0)", f"OBJ = Box({k})", "LOG.clear()",
            f"def helper(v):\n    return v - {k}", f"Box.twice = staticmethod(lambda v: v * {k})",
            f"Box.double = property(lambda self: self.a + {k})", f"OBJ.level = {k}",
            "COUNTER = make_counter()", f"OBJ.k = {k}", f"Box.k = {k}.5", f"G = {k}.5", "STATE.clear()",
            f'STATE["extra"] = {k}', f"LOG.append({k})", f"Clamp.__get__ = lambda self, obj, owner=None: {k}",
        )


def generate(seed: int, index: int, backend: str = "eager", include_known: bool = False,
             classes: bool = False) -> Program:
    """Program number ``index`` of the stream of ``seed`` (the same on every machine);
    ``classes``: the class-heavy stream (its own programs)."""
    gen = Generator(random.Random(f"{seed}:{index}{':classes' if classes else ''}"), include_known, classes)
    body = gen.block(gen.r.randint(2, 7))
    gen.depth = 0
    mutations = [gen.mutation() for _ in range(gen.r.randint(1, 3))]
    n_values = [gen.r.randint(0, 4) for _ in range(2)]
    return Program(body, mutations, n_values, backend)
