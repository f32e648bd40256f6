"""The direct launch of a compiled Triton binary (``runtime/launcher.direct_launch``), without a GPU.

On a GPU every warm launch goes this way (tests/backend/test_gpu.py runs it for real).
Here stand-ins take the place of a compiled kernel and of its launcher, shaped as Triton
3.6's ``CompiledKernel`` and ``CudaLauncher``, and record what the launch hands them: the
arguments of Triton 3.6's C ``launch`` (format ``iiiKKppOOOOOO`` then the kernel's own:
grid, stream, function, cooperative grid, PDL, global and profile scratch, packed
metadata, launch metadata, enter and exit hooks), with each pointer as an integer.
"""
from __future__ import annotations

import types

import pytest
import torch
from triton import knobs
from triton.runtime.driver import driver

from surge.runtime.launcher import _for_triton, direct_launch

STREAM, DEVICE, FUNCTION, PACKED = 7777, 0, 1234, (4, 1, 0)


class Recorder:
    def __init__(self):
        self.calls = []

    def __call__(self, *args):
        self.calls.append(args)


def launcher_36(**changes):
    """A stand-in of Triton 3.6's CudaLauncher: its C ``launch`` and the metadata it reads."""
    fields = dict(launch=Recorder(), num_ctas=1, global_scratch_size=0, global_scratch_align=1,
                  profile_scratch_size=0, profile_scratch_align=1, launch_cooperative_grid=False, launch_pdl=False)
    fields.update(changes)
    run = Recorder()   # its Python __call__, which allocates scratch and calls launch
    for name, value in fields.items():
        setattr(run, name, value)
    return run


@pytest.fixture
def gpu_driver(monkeypatch):
    active = types.SimpleNamespace(get_current_device=lambda: DEVICE, get_current_stream=lambda device: STREAM)
    monkeypatch.setattr(driver, "_active", active)


def compiled_with(run):
    return types.SimpleNamespace(run=run, function=FUNCTION, packed_metadata=PACKED)


KERNEL = types.SimpleNamespace(arg_names=["in_ptr0", "out_ptr0", "xnumel", "XBLOCK"], used_global_vals={})


def arguments():
    return (torch.empty(64), torch.empty(64))


def test_launches_triton_36s_c_function_with_integer_pointers(gpu_driver):
    run = launcher_36()
    direct = direct_launch(KERNEL, compiled_with(run), (4,), (True, True), (64,), {"XBLOCK": 16})
    args = arguments()
    assert direct(args) is True and direct.calls_c_launch
    assert run.calls == []   # not through the Python __call__
    (call,) = run.launch.calls
    assert call == (4, 1, 1, STREAM, FUNCTION, False, False, None, None, PACKED, None, None, None,
                    args[0].data_ptr(), args[1].data_ptr(), 64, 16)


@pytest.mark.parametrize("run", [launcher_36(global_scratch_size=128), launcher_36(arg_annotations=[]), Recorder()],
                         ids=["scratch", "triton-3.9", "other"])
def test_other_launches_go_through_the_launchers_call(gpu_driver, run):
    """A kernel that needs scratch memory (the launcher's call allocates it), or a launcher
    not laid out as 3.6's (3.9's C launch takes annotated arguments as one tuple): its call, as Triton's ``run`` makes it (grid, stream, function,
    metadata, no launch metadata, no hooks, the kernel's arguments)."""
    direct = direct_launch(KERNEL, compiled_with(run), (4, 2), (True, True), (64,), {"XBLOCK": 16})
    args = arguments()
    assert direct(args) is True and not direct.calls_c_launch
    assert getattr(run, "launch", Recorder()).calls == []
    (call,) = run.calls
    assert call == (4, 2, 1, STREAM, FUNCTION, PACKED, None, None, None, args[0].data_ptr(), args[1].data_ptr(), 64, 16)


def test_a_misaligned_pointer_or_an_installed_hook_goes_back_to_triton(gpu_driver):
    run = launcher_36()
    direct = direct_launch(KERNEL, compiled_with(run), (4,), (True, True), (64,), {"XBLOCK": 16})
    base = torch.empty(65)
    assert direct((base[1:], torch.empty(64))) is False   # 4 bytes past an aligned start
    chain = knobs.runtime.launch_enter_hook
    hook = lambda metadata: None  # noqa: E731
    chain.add(hook)
    try:
        assert direct(arguments()) is False
    finally:
        chain.remove(hook)
    assert direct(arguments()) is True
    assert len(run.launch.calls) == 1


def test_a_binary_specialized_for_a_misaligned_pointer_launches_directly_with_it(gpu_driver):
    run = launcher_36()
    direct = direct_launch(KERNEL, compiled_with(run), (4,), (False, True), (64,), {"XBLOCK": 16})
    base = torch.empty(65)
    assert direct((base[1:], torch.empty(64))) is True
    assert direct(arguments()) is False


def test_arena_addresses_are_launched_as_the_integers_they_are(gpu_driver):
    """The host code passes a kernel-only arena buffer as its address (``codegen/wrapper.py``):
    the launch reads the other pointers' data pointers and checks the address's alignment."""
    run = launcher_36()
    direct = direct_launch(KERNEL, compiled_with(run), (4,), (True, True), (64,), {"XBLOCK": 16},
                           {1: torch.float32})
    tensor, address = torch.empty(64), 1 << 20
    assert direct((tensor, address)) is True
    assert run.launch.calls[-1][-4:] == (tensor.data_ptr(), address, 64, 16)
    assert direct((tensor, address + 4)) is False


def test_tritons_own_launch_gets_each_address_as_a_pointer_of_its_dtype():
    tensor = torch.empty(4)
    given = _for_triton((tensor, 4096, 7), {1: torch.bfloat16})
    assert given[0] is tensor and given[2] == 7
    assert given[1].data_ptr() == 4096 and given[1].dtype is torch.bfloat16



class SymbolicKernel:
    """A stand-in of a symbolic kernel's JITFunction: ``warmup`` returns a binary (kept); a
    launch through Triton's own path would fail the test."""

    arg_names = ["in_ptr0", "out_ptr0", "s0", "xnumel", "XBLOCK"]
    used_global_vals: dict = {}

    def __init__(self):
        self.binaries = []   # (warmup's size arguments, config, the binary returned)

    def warmup(self, *args, grid, **config):
        compiled = compiled_with(launcher_36())
        self.binaries.append((args[2:], config, compiled))
        return compiled

    def __getitem__(self, grid):
        raise AssertionError("a symbolic kernel's launch went through Triton's launcher")


def test_one_binary_of_a_symbolic_kernel_serves_every_size(gpu_driver, monkeypatch, tmp_path):
    """A kernel of symbolic sizes is not specialized on them (``do_not_specialize``), so the
    binary of a config launches at every size with that size's grid and numbers; a size
    past 32 bits (which Triton types i64) compiles a binary of its own."""
    from surge.runtime import compile_pool, launcher

    monkeypatch.setattr(launcher, "interpreting", lambda: False)
    monkeypatch.setattr(compile_pool, "finish_pending", lambda: None)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *device: "a GPU")   # tuning choices are looked up by it
    kernel = SymbolicKernel()
    meta = dict(symbolic=True, size_hints=[16, 16 * 64], reduction=False, persistent=False,
                signature={"in_ptr0": "*fp32", "out_ptr0": "*fp32"}, xnumel="64*s0", rnumel=1)
    launch = launcher.make_symbolic_launcher(kernel, "k", meta, "source", str(tmp_path))
    assert launch.bind() and len(kernel.binaries) == 1
    args, lengths = arguments(), (16, 17, 33, 17)
    for s0 in lengths:
        launch(*args, s0, 64 * s0)
    ((hints, config, compiled),) = kernel.binaries   # one config serves these sizes
    assert hints == (16, 1024)
    calls = compiled.run.launch.calls
    assert [c[-3:] for c in calls] == [(s0, 64 * s0, config["XBLOCK"]) for s0 in lengths]
    assert [c[0] for c in calls] == [-(-64 * s0 // config["XBLOCK"]) for s0 in lengths]
    assert [c[-5:-3] for c in calls] == [(args[0].data_ptr(), args[1].data_ptr())] * len(lengths)
    launch(*args, 2**31, 2**31 * 64)
    assert len(kernel.binaries) == 2 and kernel.binaries[1][0] == (2**31, 2**37)
