"""The dtype generated code computes a logical dtype in: fp16 and bf16 in fp32 (as eager's
kernels do), every other dtype in itself. Shared by both code generators."""
from __future__ import annotations

import torch


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
