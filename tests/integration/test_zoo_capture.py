"""The model zoo's capture against torch.compile (``python -m surge.tools.zoo_capture``):
a sample of zoo models at their tiny sizes, inference and autocast training steps, must
make no more graphs, breaks or recompiles than torch.compile and match eager.

``SURGE_TEST_ZOO_CAPTURE=1`` runs every zoo workload at the suite's quick sizes instead
(about 30 minutes on 2 cores; timm needs to be importable).
"""
import os

import pytest
import torch

from surge.tools import zoo_capture
from surge.tools.zoo_capture import Capture, CaptureRow

pytest.importorskip("transformers")

# One model per capture cause fixed so far, plus plain ones of each family: RoBERTa's
# position ids use type_as inside autocast; T5 builds its attention bias from buckets.
SAMPLE = ("hf.bert.infer", "hf.roberta.train", "hf.t5.train")
FULL = os.environ.get("SURGE_TEST_ZOO_CAPTURE") == "1"


def _names():
    if not FULL:
        return list(SAMPLE)
    from surge.tools.bench import selected_workloads

    return selected_workloads(None, "models")


@pytest.mark.parametrize("name", _names())
def test_zoo_model_is_captured_as_torch_compile_captures_it(name):
    row = zoo_capture.capture_workload(name, scale="quick" if FULL else "tiny")
    if row.surge is None:
        pytest.skip(row.message)   # a library that is not importable here
    s, t = row.surge, row.torch_compile
    assert s.error is None, s.error
    assert t.error is None, t.error
    assert s.fallbacks == 0, s.reasons
    assert not row.worse_than_torch_compile, zoo_capture.format_rows([row])
    assert s.matches, zoo_capture.format_rows([row])


def test_a_row_with_more_graphs_breaks_or_recompiles_than_the_peer_is_worse():
    peer = Capture(graphs=1, breaks=0, second_call_graphs=0, matches=True)
    same = CaptureRow("m", Capture(graphs=1, breaks=0, second_call_graphs=0, matches=True), peer)
    assert not same.worse_than_torch_compile
    for changed in ({"graphs": 2}, {"breaks": 1}, {"second_call_graphs": 1}, {"fallbacks": 1},
                    {"matches": False}, {"error": "boom"}):
        fields = {"graphs": 1, "breaks": 0, "second_call_graphs": 0, "matches": True, **changed}
        row = CaptureRow("m", Capture(**fields), peer)
        assert row.worse_than_torch_compile, changed
        assert "<< worse" in zoo_capture.format_rows([row])


def test_training_rows_run_under_autocast_and_are_judged_in_low_precision():
    from surge.tools import workloads

    instance = workloads.Instance(torch.nn.Linear(4, 4), lambda seed: (torch.randn(2, 4),), sizes={},
                                  dtype=torch.float32, training=True)
    mixed = zoo_capture.with_autocast(instance, torch.bfloat16)
    assert mixed.autocast is torch.bfloat16 and mixed.dtype is torch.bfloat16
    assert zoo_capture.with_autocast(workloads.Instance(
        torch.nn.Linear(4, 4), instance.make_inputs, sizes={}, dtype=torch.float32), torch.bfloat16).autocast is None
