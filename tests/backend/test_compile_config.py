"""One CompileConfig, one key: every option that changes compiled code changes the key
every cache of compiled code uses; options that only say where files go do not."""
from __future__ import annotations

import dataclasses

import pytest
import torch

from surge.backends import pipeline
from surge.options import NON_CODE_FIELDS, CompileConfig, Options, code_fields
from surge.target import Target, cpp_target, triton_target

from .helpers import aten_graph

# Options that steer the frontend (capture, guards, recompiles), not the backend stages.
FRONTEND_OPTIONS = {"backend", "fullgraph", "dynamic", "mode", "cache_size_limit", "frontend_cache",
                    "capture_scalar_outputs", "capture_dynamic_output_shape_ops", "native_checks"}


def _changed(value):
    """A different value of a field's kind."""
    if value is None:
        return True
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, str):
        return value + "/other"
    if isinstance(value, tuple):
        return value + ("other",)
    raise AssertionError(f"no changed value for {value!r}")


def test_every_option_reaches_the_config_or_is_the_frontends():
    options = {f.name for f in dataclasses.fields(Options)}
    config = {f.name for f in dataclasses.fields(CompileConfig)}
    assert options - FRONTEND_OPTIONS <= config, "an option the backend stages never see"
    assert NON_CODE_FIELDS <= config


@pytest.mark.parametrize("name", code_fields())
def test_each_code_field_changes_the_key(name):
    base = CompileConfig()
    changed = base.replace(**{name: _changed(getattr(base, name))})
    assert changed.cache_key() != base.cache_key()
    target = cpp_target()
    assert changed.cache_key(target) != base.cache_key(target)


@pytest.mark.parametrize("name", sorted(NON_CODE_FIELDS))
def test_fields_that_do_not_change_code_keep_the_key(name):
    base = CompileConfig(cache_dir="/a")
    changed = base.replace(**{name: _changed(getattr(base, name))})
    assert changed.cache_key(cpp_target()) == base.cache_key(cpp_target())


def test_the_config_comes_from_the_options():
    options = Options(split_reduction_min_elements=7, pad_matmuls=True, persistent_reduction_limit=16,
                      autotune=True, fallback_random=True, cxx="clang++", cache_dir="/c", debug_dir="/d")
    config = CompileConfig.from_options(options)
    for name in ("split_reduction_min_elements", "pad_matmuls", "persistent_reduction_limit", "autotune",
                 "fallback_random", "cxx", "cache_dir", "debug_dir"):
        assert getattr(config, name) == getattr(options, name), name


@pytest.mark.parametrize("name", [f.name for f in dataclasses.fields(Target)])
def test_each_target_decision_changes_the_key(name):
    base = triton_target("cuda", interpreted=False, knobs=("H200", (9, 0)))
    changed = dataclasses.replace(base, **{name: _changed(getattr(base, name))})
    assert changed.cache_key() != base.cache_key()
    assert CompileConfig().cache_key(changed) != CompileConfig().cache_key(base)


def test_the_code_cache_key_holds_the_config_the_target_and_the_lowering_hint():
    x = torch.randn(4, 8)
    gm = aten_graph(lambda t: (t.relu() * 2, t.sum(0)), x)
    config, target = CompileConfig(cache_dir="/a"), cpp_target()
    key = pipeline.code_key(gm, [x], target, config)
    assert pipeline.code_key(gm, [x], target, config.replace(debug_dir="/d", cache_dir="/b")) == key
    assert pipeline.code_key(gm, [x], target, config.replace(persistent_reduction_limit=16)) != key
    assert pipeline.code_key(gm, [x], triton_target("cpu", interpreted=True), config) != key
    # the aot layer marks a training forward's saved outputs: lowering keeps their traced layouts
    gm.meta[pipeline.TRACED_LAYOUT_OUTPUTS_FROM] = 1
    assert pipeline.code_key(gm, [x], target, config) != key


def test_a_changed_code_option_misses_the_code_cache(tmp_path):
    from surge.backends.cpp import compile_aten_graph_cpp

    x = torch.randn(6, 40)
    fn = lambda t: (t - t.mean(-1, keepdim=True)).exp()   # noqa: E731
    gm = aten_graph(fn, x)
    first = compile_aten_graph_cpp(gm, [x], Options(cache_dir=str(tmp_path)))
    again = compile_aten_graph_cpp(gm, [x], Options(cache_dir=str(tmp_path), debug_dir=None, warn_fallbacks=False))
    other = compile_aten_graph_cpp(gm, [x], Options(cache_dir=str(tmp_path), split_reduction_min_elements=64))
    assert again.cache_hit and again.path == first.path
    assert not other.cache_hit and other.path != first.path
    torch.testing.assert_close(other(x), fn(x))
