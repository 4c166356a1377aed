"""When `plan` finds no legal layout, its one line names the pin (or the batch size) at fault and the rule broken."""

import pytest

from moetune.cli.main import main
from moetune.layout.validate import Workload
from moetune.planner.why_none import no_layout_reason
from moetune.specs.hardware import load_gpu
from moetune.specs.registry import load_model

# Qwen3-235B-A22B: 94 layers, 4 KV groups, 128 experts. 96 GPUs = 3 x 32, so GBS 1024 (2^10) needs the factor 3 in
# TP x CP x PP (and PP 4 leaves DP in {3, 6, 12, 24}).
QWEN = load_model("qwen3-235b-a22b")
H100 = load_gpu("h100")
WL = Workload(seq_length=4096, micro_batch_size=1, global_batch_size=1024)


@pytest.mark.parametrize(("fixed", "expected"), [
    ({"pp": 5}, ["--fix pp=5", "TP*CP*PP (1*1*5=5)"]),
    ({"ep": 7}, ["--fix ep=7", "ETP*EP*PP (1*7*1=7)"]),
    ({"tp": 16}, ["--fix tp=16", "num_query_groups (4)"]),
    ({"cp": 3}, ["--fix cp=3", "2 x CP"]),
    ({"pp": 4}, ["--fix pp=4", "global batch size (1024)", "DP 3, 6, 12, 24"]),
    ({"pp": 6, "ep": 32}, ["--fix pp=6 --fix ep=32", "not together", "ETP*EP*PP (1*32*6=192)"]),
])
def test_reason_names_the_pin_and_rule(fixed, expected):
    reason = no_layout_reason(QWEN, H100, 96, WL, fixed)
    for text in expected:
        assert text in reason, reason


def test_unpinned_batch_size_reason():
    wl = Workload(seq_length=4096, micro_batch_size=1, global_batch_size=1000)
    reason = no_layout_reason(QWEN, H100, 96, wl, {"mbs": 8})
    assert "global batch size (1000)" in reason and "MBS 8" in reason


def test_plan_cli_one_line(capsys):
    code = main(["plan", "qwen3-235b-a22b", "--gpu", "h100", "--gpus", "96", "--seq", "4096", "--gbs", "1024",
                 "--fix", "pp=5"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "--fix pp=5" in err and "Traceback" not in err


@pytest.mark.parametrize(("model", "world", "seq", "fixed", "expected"), [
    # gpt-oss's attention sinks run context parallel only over a2a, which splits 8 KV groups at most 8 ways
    ("gpt-oss-120b", 64, 65536, {"cp": 16}, ["--fix cp=16", "cp.sinks_need_a2a", "CP <= 8"]),
    # Qwen3-235B-A22B's 4 KV groups at TP4: one per rank, so a pinned a2a cannot split them over CP 8
    ("qwen3-235b-a22b", 256, 131072, {"cp": 8, "tp": 4, "cp_comm_type": "a2a"}, ["cp.a2a_heads", "use p2p"]),
])
def test_reason_names_the_missing_cp_exchange(model, world, seq, fixed, expected):
    reason = no_layout_reason(load_model(model), H100, world, Workload(seq_length=seq, global_batch_size=64), fixed)
    for text in expected:
        assert text in reason, reason
