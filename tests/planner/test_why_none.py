"""When `plan` finds no legal layout, its one line names the pin (or the batch size) at fault and the rule broken."""

import json
import re

import pytest

from moetune.cli.main import main
from moetune.layout.validate import Workload, sequence_refusal
from moetune.planner.why_none import _Enumerated, _exchange_reason, _pins_text, no_layout_reason, sequence_note
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
    ({"tp": 6}, ["--fix tp=6", "num_attention_heads (64)"]),
    ({"cp": 3}, ["--fix cp=3", "2 x CP"]),
    ({"pp": 4}, ["--fix pp=4", "global batch size (1024)", "DP 3, 6, 12, 24"]),
    ({"pp": 6, "ep": 32}, ["--fix pp=6 --fix ep=32", "not together", "ETP*EP*PP (1*32*6=192)"]),
])
def test_reason_names_the_pin_and_rule(fixed, expected):
    reason = no_layout_reason(QWEN, H100, 96, WL, fixed)
    for text in expected:
        assert text in reason, reason


@pytest.mark.parametrize(("fixed", "expected", "absent"), [
    # more stages than Qwen2-57B-A14B's 28 layers: no split of any kind, and estimate's split flags are no fix here
    ({"pp": 40}, ["--fix pp=40", "40 stages for qwen2-57b-a14b's 28 layers", "at most 28 stages"],
     ["--first-stage-layers", "--account-for"]),
    # 40 chunks for 28 layers: the layers are why, not an interleaving batch check on a GBS the user never gave
    ({"pp": 20, "vpp": 2}, ["40 stages for qwen2-57b-a14b's 28 layers", "at most 28 stages"],
     ["GBS 8", "--first-stage-layers"]),
])
def test_a_pinned_pipeline_no_split_runs_is_worded_for_plan(fixed, expected, absent):
    """The audit's `plan qwen2-57b-a14b --gpu h100 --gpus 40 --gbs 1000 --fix pp=40` had been told to set
    --first-stage-layers, which plan does not take (its search already tries uneven splits)."""
    wl = Workload(seq_length=4096, micro_batch_size=1, global_batch_size=1000)
    reason = no_layout_reason(load_model("qwen2-57b-a14b"), H100, 40, wl, fixed)
    assert all(t in reason for t in expected) and not any(t in reason for t in absent), reason


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
    # a pinned p2p (or a2a+p2p) is what sinks refuse at CP 2, which a2a runs: the line had blamed the KV groups and
    # offered "CP <= 8", which CP 2 already is
    ("gpt-oss-120b", 32, 32768, {"cp": 2, "cp_comm_type": "p2p"},
     ["cp.sinks_need_a2a), not the pinned p2p; drop --fix cp_comm_type=p2p"]),
    ("gpt-oss-120b", 32, 32768, {"cp": 2, "cp_comm_type": "a2a+p2p"}, ["not the pinned a2a+p2p; drop"]),
    # past a2a's limit too, both are said
    ("gpt-oss-120b", 32, 65536, {"cp": 16, "cp_comm_type": "p2p"}, ["not the pinned p2p, and a2a splits", "CP <= 8"]),
    # Qwen3-235B-A22B's 4 KV groups at TP4: one per rank, so a pinned a2a cannot split them over CP 8
    ("qwen3-235b-a22b", 256, 131072, {"cp": 8, "tp": 4, "cp_comm_type": "a2a"}, ["cp.a2a_heads", "use p2p"]),
    # TP 16 past gpt-oss's 8 groups: one a rank, so no CP over 1 runs there (the line had offered CP <= 8)
    ("gpt-oss-120b", 64, 32768, {"tp": 16, "cp": 2}, ["1 KV groups", "use CP <= 1 or a smaller --fix tp"]),
    # a pinned a2a+p2p at TP 8, past Qwen3-30B-A3B's 4 groups, has no a2a group of 2: p2p alone runs (the line had
    # offered "p2p or a2a+p2p", the pin itself)
    ("qwen3-30b-a3b", 32, 32768, {"tp": 8, "cp": 4, "cp_comm_type": "a2a+p2p"}, ["an a2a group of 2", "; use p2p$"]),
])
def test_reason_names_the_missing_cp_exchange(model, world, seq, fixed, expected):
    reason = no_layout_reason(load_model(model), H100, world, Workload(seq_length=seq, global_batch_size=64), fixed)
    for text in expected:
        assert re.search(re.escape(text).replace(r"\$", "$"), reason), reason


@pytest.mark.parametrize(("seq", "cps", "expected"), [
    (65537, [1, 2, 4, 8, 16, 32, 64], ["is odd", "every CP > 1", "every TP > 1", "TP1 CP1 alone", "--seq 65536"]),
    # 24584 = 8 x 3073: CP up to 4, TP x CP up to 8; 24576 = 3 x 2^13 allows CP16 at TP8
    (24584, [1, 2, 4, 8, 16], ["largest power-of-two factor", "CP above 4", "TP x CP above 8", "--seq 24576"]),
])
def test_sequence_note_names_what_the_length_rules_out_and_the_nearest_that_does_not(seq, cps, expected):
    note = sequence_note(seq, [1, 2, 4, 8], cps, 1024)
    for text in expected:
        assert text in note, note
    nearest = int(note.rsplit("--seq ", 1)[1].split()[0])
    assert all(sequence_refusal(nearest, t, c, t > 1) is None for t in (1, 2, 4, 8) for c in cps)
    assert sequence_note(65536, [1, 2, 4, 8], cps, 1024) is None
    # on 16 GPUs TP x CP stops at 16: 1,000,000 = 64 x 15,625 allows every such pair, so it is not the sequence's fault
    assert sequence_note(1_000_000, [1, 2, 4, 8], [1, 2, 4, 8, 16, 512], 16) is None
    assert "CP up to 8" in sequence_note(24584, [1, 2, 4, 8], [1, 2, 4, 8, 16], 8)


def test_nothing_fits_on_an_odd_sequence_says_the_sequence_shut_out_tp_and_cp(capsys):
    """Qwen3-235B-A22B on 256 H100 at seq 65537: only TP1 CP1 layouts are legal and none fits; the line says the odd
    length is why, and that 65536 allows them (where the plan finds 190k fitting candidates)."""
    code = main(["plan", "qwen3-235b-a22b", "--gpu", "h100", "--gpus", "256", "--seq", "65537", "--gbs", "256"])
    out = capsys.readouterr().out
    assert code == 1 and "nothing fits: the lightest candidate" in out
    assert "seq 65,537 is odd, which rules out every CP > 1" in out and "--seq 65536 allows" in out


def test_pins_read_as_typed():
    """parse_fix's values as a user types them: a graph scope's tuple, a set of recompute modules, a switch (they had
    printed as Python objects: frozenset({'layernorm', 'moe_act'}), ('attn',), True)."""
    pins = {"pp": 1, "recompute_modules": frozenset({"moe_act", "layernorm"}), "cuda_graph_scope": [("attn",)],
            "ep_overlap": True, "precision": ["bf16"]}
    assert _pins_text(pins) == ("--fix pp=1 --fix recompute_modules=layernorm,moe_act --fix cuda_graph_scope=attn "
                                "--fix ep_overlap=true --fix precision=bf16")


@pytest.mark.parametrize(("seq", "fixed", "expected"), [
    # seq 1024: the search tries CP up to seq/1024 = 1, so a pinned exchange has no CP to run on
    (1024, {"cp_comm_type": "all_gather"}, ["--fix cp_comm_type=all_gather asks for CP > 1", "1 at seq 1,024"]),
    # GLM-4.5-Air's 8 KV groups at TP 8: one a rank, which a2a cannot split over CP 2 or 4
    (4096, {"tp": 8, "cp_comm_type": "a2a"}, ["--fix tp=8", "cp.a2a_heads", "CP 2 needs at least 2"]),
])
def test_a_pinned_cp_exchange_that_no_cp_runs_is_named(seq, fixed, expected):
    """The line had read "no layout satisfies the model's shapes on 64 GPUs; change --gpus" or "no legal layout ...
    has tp=8", where the pinned cp_comm_type, not the GPUs or TP, left nothing (audit)."""
    reason = no_layout_reason(load_model("glm-4.5-air"), H100, 64, Workload(seq_length=seq, global_batch_size=512),
                              fixed)
    for text in expected:
        assert text in reason, reason


def test_a_pinned_p2p_is_not_said_to_ask_for_cp_above_1():
    """--fix cp_comm_type=p2p runs at CP 1 (layout/knobs.py CP1_COMM_TYPES), so the exchange reason must not say it
    asks for CP > 1, as it says of all_gather. Called directly: no plan is known to reach it with p2p pinned (every
    no-layout case of the built-in models on H100 and GB200 with ten pin sets gave another reason first)."""
    layouts = _Enumerated(load_model("glm-4.5-air"), H100, 64, Workload(seq_length=1024, global_batch_size=512))
    gather = _exchange_reason(layouts, {}, {"cp_comm_type": "all_gather"})
    p2p = _exchange_reason(layouts, {}, {"cp_comm_type": "p2p"})
    assert "asks for CP > 1" in gather and "asks for CP > 1" not in p2p and "at CP 1 nothing" not in p2p, p2p
    assert p2p.startswith("--fix cp_comm_type=p2p: ") and p2p.endswith("drop the pin (plan picks each layout's "
                                                                      "exchange)")


def test_each_pin_set_is_enumerated_once(monkeypatch):
    """The batch-size reason reads the DPs of the layouts the pin's own check enumerated, those the batch ruled out
    among them: `--fix pp=4` on Qwen3-235B-A22B (every layout ruled out by GBS 1024) had enumerated pp=4 twice."""
    import moetune.planner.why_none as why_none

    asked: list[tuple] = []
    enumerate_layouts = why_none.enumerate_layouts

    def counted(spec, gpu, world, wl, fixed, *args):
        asked.append(tuple(sorted(fixed.items())))
        return enumerate_layouts(spec, gpu, world, wl, fixed, *args)

    monkeypatch.setattr(why_none, "enumerate_layouts", counted)
    reason = no_layout_reason(QWEN, H100, 96, WL, {"pp": 4, "ep": 8, "tp": 2})
    assert "--fix pp=4" in reason and "DP 3, 6, 12, 24" in reason, reason
    assert asked and len(asked) == len(set(asked)), asked


def test_nothing_fits_drops_the_shorter_sequence_where_the_model_state_alone_is_too_big(capsys):
    """Kimi-K2 on 8 H100s: the weights and FP32 gradients alone are ~720 GiB a GPU on any layout (the optimizer
    state offloaded), so 'shorten the sequence' was no remedy; OLMoE on one H100 at 1M tokens is held back by its
    activations, and keeps it."""
    code = main(["plan", "kimi-k2", "--gpu", "h100", "--gpus", "8", "--gbs", "64", "--json"])
    reason = json.loads(capsys.readouterr().out)["nothing_fits"]
    assert code == 1 and reason["lightest_state_gib"] > 78
    assert "shorten the sequence" not in reason["reason"] and "no shorter sequence lowers" in reason["reason"]
    code = main(["plan", "olmoe-1b-7b", "--gpu", "h100", "--gpus", "1", "--gbs", "8", "--seq", "1048576", "--json"])
    reason = json.loads(capsys.readouterr().out)["nothing_fits"]
    assert code == 1 and reason["lightest_state_gib"] < 78 and "shorten the sequence" in reason["reason"]


def test_a_layout_refusal_names_plans_pins_not_estimates_flags():
    """plan takes layout sizes as --fix pins; the refusal it quotes from the layout checks had told the user to
    'choose an --ep that divides it' (audit)."""
    wl = Workload(seq_length=4096, micro_batch_size=1, global_batch_size=64)
    reason = no_layout_reason(load_model("qwen1.5-moe-a2.7b"), H100, 8, wl, {"ep": 8})
    assert "choose a --fix ep=N that divides it" in reason and "--ep " not in reason


def test_a_pinned_vpp_is_judged_on_the_pinned_pp():
    """--fix vpp=40 --fix pp=5 had been told 'vpp (40) needs pp > 1 ... set --fix pp=N', pp being pinned already
    (audit); the VPP is judged with its PP: 200 stages for 28 layers."""
    wl = Workload(seq_length=4096, micro_batch_size=1, global_batch_size=320)
    reason = no_layout_reason(load_model("qwen2-57b-a14b"), H100, 40, wl, {"vpp": 40, "pp": 5})
    assert reason.startswith("--fix vpp=40 --fix pp=5: PP 5 x VPP 40 = 200 stages") and "needs pp > 1" not in reason
