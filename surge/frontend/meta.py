"""Tensor metadata during capture: meta tensors plus the real device beside them.

Every tensor the trace sees is a meta tensor (shape, stride, dtype,
requires_grad, no data), so running an op to learn its result's metadata costs
no computation. Meta tensors forget the real device; ``result_device`` says
which device an op's result would live on.
"""
from __future__ import annotations

import torch
from torch.utils._device import _device_constructors

META = torch.device("meta")
CPU = torch.device("cpu")

# Functions that make tensors from Python values: run on meta they need an
# explicit device, and their result lives on the `device=` argument, else on the CPU
# (a default device set by torch's DeviceContext mode is made explicit by the trace:
# variables/device_modes.py).
FACTORY_FUNCTIONS = frozenset(_device_constructors()) | {torch.normal}


def to_meta(value: torch.Tensor) -> torch.Tensor:
    meta = torch.empty_strided(value.shape, value.stride(), dtype=value.dtype, device=META)
    if value.requires_grad:
        meta.requires_grad_(True)
    return meta


def is_device_like(value) -> bool:
    return isinstance(value, torch.device) or (
        isinstance(value, str) and value.split(":")[0] in ("cpu", "cuda", "meta", "mps", "xpu", "hpu")
    )


def strip_devices(target, args: tuple, kwargs: dict, is_method: bool):
    """Arguments for running ``target`` on meta tensors; returns (args, kwargs, explicit device)."""
    device = None
    if "device" in kwargs and kwargs["device"] is not None:
        device = torch.device(kwargs["device"])
        kwargs = {**kwargs, "device": META}
    if is_method and target == "to":
        new_args = []
        for a in args:
            if is_device_like(a):
                device = torch.device(a)
                a = META
            new_args.append(a)
        args = tuple(new_args)
    elif is_method and target in ("cuda", "cpu"):
        if target == "cpu":
            device = torch.device("cpu")
        else:
            index = args[1] if len(args) > 1 else kwargs.get("device")
            device = torch.device("cuda", index) if isinstance(index, int) else torch.device(index or "cuda")
        return (args[0],), {}, device
    elif target in FACTORY_FUNCTIONS and kwargs.get("device") is None:
        kwargs = {**kwargs, "device": META}
    return args, kwargs, device


def result_device(explicit, input_devices: list):
    if explicit is not None:
        return explicit
    for d in input_devices:
        if d.type != "cpu":
            return d
    if input_devices:
        return input_devices[0]
    return CPU
