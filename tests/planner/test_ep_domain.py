"""A pick whose EP leaves the NVLink domain for less than the step model's error names the in-domain layout (the
model and recipe audits: Moonlight-16B-A3B on 32 H100 picked EP16 across nodes for +1.5% over EP8 inside one)."""

import pytest

from moetune.layout.layout import Layout
from moetune.layout.validate import Workload
from moetune.planner.ep_domain import EP_DOMAIN_NOTE_MARGIN, ep_domain_note, in_domain_ep
from moetune.planner.estimate import estimate
from moetune.planner.search import plan
from moetune.specs.hardware import load_gpu
from moetune.specs.registry import load_model

H100 = load_gpu("h100")


def test_a_near_tie_across_the_domain_names_the_in_domain_layout():
    pick = plan(load_model("moonlight-16b-a3b"), H100, 32, Workload(seq_length=4096, global_batch_size=1024),
                top=1).results[0]
    near = ep_domain_note(pick)
    assert pick.layout.ep == 16 and near["ep"] == 8
    alt = pick.variant(layout=Layout(world_size=32, ep=8))
    assert near["tokens_per_s_per_gpu"] == pytest.approx(alt.time["tokens_per_s_per_gpu"])
    assert 0 <= near["pick_margin"] <= EP_DOMAIN_NOTE_MARGIN


def test_no_note_inside_the_domain_or_without_a_fitting_alternative():
    spec = load_model("moonlight-16b-a3b")
    wl = Workload(seq_length=4096, micro_batch_size=1, global_batch_size=1024)
    assert in_domain_ep(estimate(spec, H100, Layout(world_size=32, ep=8), wl)) is None  # EP8 stays in an 8-GPU node
    dsv3 = plan(load_model("deepseek-v3"), H100, 1024, Workload(seq_length=4096, global_batch_size=8192),
                top=1).results[0]
    assert dsv3.layout.ep == 64 and ep_domain_note(dsv3) is None  # EP8 of 671B parameters does not fit
