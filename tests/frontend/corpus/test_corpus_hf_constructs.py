"""Library constructs that HuggingFace-style model code is made of, one small program
each: class and function introspection, registries in dict subclasses, output
dataclasses that are also OrderedDicts, configs with attribute aliases, compile
detection, environment switches. Each is compared with eager and must be one graph."""
import collections
import copy
import dataclasses
import functools
import inspect
import os
from collections.abc import Sequence

import pytest
import torch

import surge
from corpus_harness import CounterDelta, RecordingBackend, check_fn, compare_call, randn


@pytest.fixture(autouse=True)
def _own_random_stream():
    # These programs draw their own inputs without moving the RNG stream that the
    # corpus files after this one see (their data stays what it was without this file).
    with torch.random.fork_rng():
        torch.manual_seed(0)
        yield


def x_only(i):
    return (randn(3, 4),)


# ---- introspection ---------------------------------------------------------------


class Block(torch.nn.Module):
    def forward(self, x):
        return x * 2


BLOCK = Block()


def class_name_of_module(x):
    name = f"{BLOCK.__class__.__name__}.forward"
    return BLOCK(x), name, str(BLOCK.__class__), type(BLOCK) is Block


def _decorated(x, scale=2.0, *, use_cache=None):
    return x * scale


def code_varnames(x):
    names = _decorated.__code__.co_varnames
    index = names.index("scale") if "scale" in names else None
    return x + index, names[: _decorated.__code__.co_argcount], _decorated.__name__, _decorated.__defaults__


def signature_of_bound_method(x):
    params = inspect.signature(BLOCK.forward).parameters
    wrapper_params = inspect.signature(_decorated).parameters
    return x * len(params), list(params), wrapper_params["scale"].default, \
        wrapper_params["use_cache"].kind == inspect.Parameter.KEYWORD_ONLY


def merge_defaults(func):
    """A decorator of the merge-with-config-defaults kind: reads the wrapped code's names."""
    @functools.wraps(func)
    def wrapper(x, **kwargs):
        if "use_cache" in func.__code__.co_varnames and kwargs.get("use_cache") is None:
            kwargs["use_cache"] = False
        return func(x, **kwargs)
    return wrapper


@merge_defaults
def wrapped_forward(x, scale=3.0, *, use_cache=None):
    return x * scale + (1 if use_cache else 0)


def call_wraps_decorated(x):
    unwrapped = wrapped_forward.__wrapped__
    return wrapped_forward(x), wrapped_forward(x, scale=0.5, use_cache=True), unwrapped(x), \
        hasattr(wrapped_forward, "__wrapped__"), hasattr(unwrapped, "__wrapped__"), \
        getattr(unwrapped, "_filtered", False)


def compile_detection(x):
    # Under compilation libraries take their compile-friendly path, as under torch.compile.
    if torch.compiler.is_compiling():
        return x + 1
    return x - 1


# ---- registries and dict subclasses ---------------------------------------------------


class ClassRegistry(dict):
    def get(self, model):
        return super().get(str(model.__class__)) or {}


REGISTRY = ClassRegistry()
REGISTRY[str(Block)] = {"scale": 3}


def dict_subclass_registry(x):
    entry = REGISTRY.get(BLOCK)
    missing = REGISTRY.get(FUNCTIONS)
    return x * entry["scale"], missing


class Interface(collections.abc.MutableMapping):
    _global_mapping = {"double": lambda t: t * 2, "neg": lambda t: -t}

    def __init__(self):
        self._local_mapping = {}

    def __getitem__(self, key):
        if key in self._local_mapping:
            return self._local_mapping[key]
        return self._global_mapping[key]

    def __setitem__(self, key, value):
        self._local_mapping[key] = value

    def __delitem__(self, key):
        del self._local_mapping[key]

    def __iter__(self):
        return iter({**self._global_mapping, **self._local_mapping})

    def __len__(self):
        return len(self._global_mapping.keys() | self._local_mapping.keys())


FUNCTIONS = Interface()


def mapping_interface_dispatch(x, kind):
    fn = FUNCTIONS[kind]
    return fn(x), "neg" in FUNCTIONS, "gelu" in FUNCTIONS


class PerLayerView(Sequence):
    def __init__(self, n):
        self._n = n

    def __len__(self):
        return self._n

    def __getitem__(self, i):
        if i >= self._n:
            raise IndexError(i)
        return i + 1


def sequence_view(x):
    view = PerLayerView(3)
    return x * sum(view), len(view), view[1]


# ---- output dataclasses that are OrderedDicts ------------------------------------------


class Output(collections.OrderedDict):
    def __post_init__(self):
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if value is not None:
                self[field.name] = value

    def __setitem__(self, key, value):
        super().__setitem__(key, value)
        super().__setattr__(key, value)

    def __setattr__(self, name, value):
        if name in self.keys() and value is not None:
            super().__setitem__(name, value)
        super().__setattr__(name, value)

    def __getitem__(self, k):
        if isinstance(k, str):
            return dict(self.items())[k]
        return self.to_tuple()[k]

    def to_tuple(self):
        return tuple(self[k] for k in self.keys())


@dataclasses.dataclass
class LMOutput(Output):
    logits: torch.Tensor = None
    loss: torch.Tensor = None
    hidden: tuple = None


def build_output(x):
    return LMOutput(logits=x * 2, hidden=(x, x + 1))


def use_output(x):
    out = build_output(x)
    out.loss = out.logits.sum()
    return out[0] + out["logits"], out.to_tuple()[-1], list(out.keys()), len(out), out.logits


def return_output(x):
    out = build_output(x)
    return out


# ---- configs with attribute aliases and overridden attribute access ---------------------


class Config:
    attribute_map = {"n_layer": "num_hidden_layers"}

    def __init__(self, **kwargs):
        for k, v in kwargs.items():
            setattr(self, k, v)

    def __setattr__(self, key, value):
        if key in super().__getattribute__("attribute_map"):
            key = super().__getattribute__("attribute_map")[key]
        super().__setattr__(key, value)

    def __getattribute__(self, key):
        if key != "attribute_map" and key in super().__getattribute__("attribute_map"):
            key = super().__getattribute__("attribute_map")[key]
        return super().__getattribute__(key)


def aliased_config(x, config):
    spec = config.__dict__.get("_spec") if "_spec" in config.__dict__ else "absent"
    scale = getattr(config, "scale", 1.0)
    return x * config.n_layer * scale, spec, config.num_hidden_layers, hasattr(config, "missing")


def config_alias_write(x, config):
    config.n_layer = config.n_layer + 1
    return x * config.num_hidden_layers


def derive_config_copy(x, config):
    variant = copy.deepcopy(config)
    variant.n_layer = 5  # through the class's __setattr__: an alias of num_hidden_layers
    del variant.scale
    return x * variant.num_hidden_layers, config.num_hidden_layers, hasattr(variant, "scale"), \
        variant.tags is not config.tags, variant.tags == config.tags


# ---- environment switches and python numbers meeting tensors ---------------------------


def environment_switch(x):
    if os.environ.get("SURGE_CORPUS_FORCE_SWITCH", "0") == "1":
        return x * 2
    return x + ("SURGE_CORPUS_FORCE_SWITCH" in os.environ)


def number_plus_tensor_in_place(x):
    buckets = 0
    buckets += (x > 0).to(torch.long) * 4
    total = 1.5
    total *= x
    return buckets, total


PROGRAMS = [
    class_name_of_module, code_varnames, signature_of_bound_method, call_wraps_decorated,
    dict_subclass_registry, sequence_view, use_output, return_output,
    number_plus_tensor_in_place,
]


@pytest.mark.parametrize("program", PROGRAMS, ids=lambda p: p.__name__)
def test_hf_construct(program):
    check_fn(program, x_only)


def test_is_compiling_is_true_in_the_graph_and_false_in_eager():
    backend = RecordingBackend()
    x = randn(3, 4)
    torch.testing.assert_close(surge.compile(compile_detection, backend=backend)(x), x + 1)
    torch.testing.assert_close(compile_detection(x), x - 1)
    assert len(backend.graphs) == 1


def test_mapping_interface_dispatch_guards_the_key():
    check_fn(mapping_interface_dispatch, lambda i: (randn(3, 4), "double"))
    check_fn(mapping_interface_dispatch, lambda i: (randn(3, 4), ["double", "neg"][i]), graphs=2)


def test_local_override_of_interface_is_seen():
    compiled = surge.compile(mapping_interface_dispatch, backend=RecordingBackend())
    compare_call(compiled, mapping_interface_dispatch, (randn(3, 4), "double"))
    FUNCTIONS["double"] = lambda t: t * 4
    try:
        compare_call(compiled, mapping_interface_dispatch, (randn(3, 4), "double"))
    finally:
        del FUNCTIONS["double"]
    compare_call(compiled, mapping_interface_dispatch, (randn(3, 4), "double"))


def test_config_with_attribute_map():
    config = Config(n_layer=2, num_heads=4)
    check_fn(aliased_config, lambda i: (randn(3, 4), config))
    config._spec = "set"
    config.scale = 0.5
    check_fn(aliased_config, lambda i: (randn(3, 4), config))  # new attributes: a fresh capture


def test_config_alias_write_is_replayed():
    config, reference = Config(n_layer=2), Config(n_layer=2)
    compiled = surge.compile(config_alias_write, backend=RecordingBackend())
    x = randn(3, 4)
    for _ in range(2):
        torch.testing.assert_close(compiled(x, config), config_alias_write(x, reference))
    assert config.num_hidden_layers == reference.num_hidden_layers == 4
    assert "n_layer" not in config.__dict__


def test_config_deep_copy_is_fresh_and_guarded():
    config = Config(n_layer=2, scale=0.5, tags=["a", {"b": (1, 2)}])
    check_fn(derive_config_copy, lambda i: (randn(3, 4), config))
    compiled = surge.compile(derive_config_copy, backend=RecordingBackend())
    delta = CounterDelta()
    compare_call(compiled, derive_config_copy, (randn(3, 4), config))
    config.tags[1]["b"] = (3,)  # a nested value the copy read: a new capture, never a stale one
    compare_call(compiled, derive_config_copy, (randn(3, 4), config))
    compare_call(compiled, derive_config_copy, (randn(3, 4), config))
    assert (delta["graphs"], delta["recompiles"], delta["cache_hits"]) == (2, 1, 1), delta
    assert config.num_hidden_layers == 2 and config.scale == 0.5


def test_environment_switch_is_guarded(monkeypatch):
    monkeypatch.delenv("SURGE_CORPUS_FORCE_SWITCH", raising=False)
    compiled = surge.compile(environment_switch, backend=RecordingBackend())
    delta = CounterDelta()
    compare_call(compiled, environment_switch, x_only(0))
    monkeypatch.setenv("SURGE_CORPUS_FORCE_SWITCH", "1")
    compare_call(compiled, environment_switch, x_only(1))
    monkeypatch.setenv("SURGE_CORPUS_FORCE_SWITCH", "0")
    compare_call(compiled, environment_switch, x_only(2))
    assert delta["graphs"] == 3 and delta["fallbacks"] == 0, delta


def test_output_dataclass_structure():
    out = surge.compile(return_output, backend=RecordingBackend())(randn(3, 4))
    assert type(out) is LMOutput and list(out.keys()) == ["logits", "hidden"]
    assert out.loss is None and out[1] is out.hidden and out["logits"] is out.logits


def test_function_attribute_set_later_is_not_stale():
    compiled = surge.compile(call_wraps_decorated, backend=RecordingBackend())
    delta = CounterDelta()
    compare_call(compiled, call_wraps_decorated, x_only(0))
    wrapped_forward.__wrapped__._filtered = True  # read as absent by the first capture
    try:
        compare_call(compiled, call_wraps_decorated, x_only(1))
    finally:
        del wrapped_forward.__wrapped__._filtered
    assert delta["graphs"] == 2 and delta["recompiles"] == 1, delta
