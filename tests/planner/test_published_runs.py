"""Predictions vs published measured runs (src/moetune/data/published_runs.csv, every row cited).

The shipped efficiency constants were fitted (`moetune calibrate`) on the calibration half of the runs;
accuracy is judged on the held-out half. Known gaps are listed, not hidden: data/known_gaps.toml.
"""

import math
import statistics
from dataclasses import replace

import pytest

from moetune.layout.imbalance import DROPLESS_IMBALANCE, expected_max_normal
from moetune.layout.knobs import Knobs
from moetune.layout.layout import Layout
from moetune.layout.validate import Workload
from moetune.planner.ab_order import NOISE_FLOOR
from moetune.planner.calibrate import memory_misfits, split
from moetune.planner.estimate import estimate
from moetune.planner.repeats import reruns
from moetune.planner.runs import known_gaps, load_configured_runs, load_runs, tokens_from_tflops
from moetune.specs.hardware import load_gpu
from moetune.specs.registry import load_model
from moetune.walls.model_flops import megatron_model_flops

RUNS = load_runs()
# Runs the model cannot reproduce yet, with the reason (data/known_gaps.toml; they stay in the statistics below).
KNOWN_GAPS = known_gaps()["runs"]


def _error(run) -> float:
    e = estimate(run.model, run.gpu, run.layout, run.workload, run.knobs)
    return e.time["tokens_per_s_per_gpu"] / run.tokens_per_s_per_gpu - 1


def test_every_published_run_is_predicted_to_fit():
    """Every run whose configuration is complete, including those published as TFLOP/s only (R160 ran only with
    fine-grained activation offloading of expert_fc1 and moe_act: without it moetune predicts 196 of 185 GiB)."""
    runs = load_configured_runs()
    assert len(runs) > len(RUNS)
    assert memory_misfits(runs) == []


def test_held_out_runs_tokens_per_second():
    """The held-out half within 15% at the rates README states (101/111, median 3.9%), with room for a point or two:
    a change that doubles the median fails here even when it leaves every listed gap in place. Its reruns of a fitted
    configuration (planner/repeats.py reruns) are judged apart from the configurations the fit never saw (6.2%), which
    the reruns' easier 3.4% would otherwise hide."""
    fit, held = split(RUNS)
    errors = {r.run_id: _error(r) for r in held}
    within = [rid for rid, e in errors.items() if abs(e) <= 0.15]
    assert statistics.median(abs(e) for e in errors.values()) <= 0.05
    assert len(within) >= 0.88 * len(errors)
    assert set(errors) - set(within) <= set(KNOWN_GAPS)
    again = {r.run_id for r in reruns(held, fit)}
    assert 0.3 * len(held) < len(again) < 0.6 * len(held)
    assert statistics.median(abs(e) for rid, e in errors.items() if rid not in again) <= 0.075


def test_every_run_outside_15_percent_is_a_listed_gap():
    """Both halves: a run that misses by more than 15% must be in KNOWN_GAPS with its reason, and a listed
    gap that no longer misses must be taken off the list."""
    errors = {r.run_id: _error(r) for r in RUNS}
    missed = {rid for rid, e in errors.items() if abs(e) > 0.15}
    assert missed == set(KNOWN_GAPS), {rid: round(errors[rid], 3) for rid in missed ^ set(KNOWN_GAPS)}


# Runs published as TFLOP/s only, converted to tokens where every FLOP convention agrees (runs.tokens_from_tflops);
# they were not used to fit the constants.
TFLOPS_GAPS = known_gaps()["tflops_only"]


def test_tflops_only_runs_in_tokens():
    runs = [r for r in load_configured_runs() if r.tokens_per_s_per_gpu is None and tokens_from_tflops(r)]
    assert len(runs) >= 20
    errors = {r.run_id: estimate(r.model, r.gpu, r.layout, r.workload, r.knobs).time["tokens_per_s_per_gpu"]
              / tokens_from_tflops(r) - 1 for r in runs}
    missed = {rid for rid, e in errors.items() if abs(e) > 0.15}
    assert missed == set(TFLOPS_GAPS), {rid: round(errors[rid], 3) for rid in missed ^ set(TFLOPS_GAPS)}
    assert statistics.median(abs(e) for e in errors.values()) <= 0.08  # 6.3% (README)


def test_long_context_throughput_rises_with_sequence_as_measured():
    """Qwen3-235B-A22B on 256 H100 at TP4 PP8 VPP4 EP8 (ModelZoo long-context table, R151-R158): 16k, 32k, 64k, 128k
    with CP 1, 2, 4, 8, force-balanced and dropless. Attention grows from 36% to 82% of the FLOPs and runs at its kernel
    rate, so TFLOP/s/GPU rises with the sequence in both routings as measured, and the 128k runs are within 11%."""
    runs = {r.run_id: r for r in load_configured_runs()}
    for ids in (("R151", "R153", "R155", "R157"), ("R152", "R154", "R156", "R158")):
        predicted = [estimate(runs[k].model, runs[k].gpu, runs[k].layout, runs[k].workload, runs[k].knobs)
                     .time["tflops_per_gpu"] for k in ids]
        measured = [runs[k].tflops_per_gpu for k in ids]
        assert measured == sorted(measured) and predicted == sorted(predicted), (ids, predicted)
        assert abs(predicted[-1] / measured[-1] - 1) < 0.11, (ids[-1], predicted[-1])


def test_dropless_routing_costs_what_the_routing_pairs_measured():
    """Force-balanced over dropless throughput, Qwen3-235B-A22B on 256 H100 at 16k-128k (R151-R158, one layout, the
    routing the only change): the default busiest-rank factor reproduces each measured ratio within 2%. The 1.2 it
    replaced predicted 1.04-1.10 where 1.09-1.25 was measured."""
    runs = {r.run_id: r for r in load_configured_runs()}
    for fb, dl in (("R151", "R152"), ("R153", "R154"), ("R155", "R156"), ("R157", "R158")):
        assert runs[fb].knobs.routing == "force-balance" and runs[dl].knobs.routing == "dropless"
        assert runs[dl].knobs.token_imbalance is None  # the default, not a per-run value
        tok = {k: estimate(runs[k].model, runs[k].gpu, runs[k].layout, runs[k].workload, runs[k].knobs)
               .time["tokens_per_s_per_gpu"] for k in (fb, dl)}
        measured = runs[fb].tflops_per_gpu / runs[dl].tflops_per_gpu
        assert tok[fb] / tok[dl] == pytest.approx(measured, rel=0.02), (fb, dl, tok[fb] / tok[dl], measured)


def test_a_run_without_the_models_mtp_layers_drops_them():
    """DeepSeek-V3 with no --mtp-num-layers (the Megatron-LM GB200 guide, R144; published_runs.csv mtp 0): the run's
    model has no MTP layer, so its layout string may hold none and Megatron counts no MTP FLOPs."""
    runs = {r.run_id: r for r in load_configured_runs()}
    without, with_mtp = runs["R144"].model, load_model("deepseek-v3")
    assert with_mtp.mtp_num_layers == 1 and without.mtp_num_layers == 0
    assert megatron_model_flops(without, 4096, 1) < megatron_model_flops(with_mtp, 4096, 1)
    assert runs["R051"].model.mtp_num_layers == 1  # mtp 1: the model as configured


def test_dropless_factor_holds_on_a_second_model_and_expert_split():
    """Qwen3-30B-A3B on 16 H100, EP16 (8 experts a rank against the ModelZoo pairs' 16), natural routing on real data
    (R101, Bridge's verification card; no EP overlap, no recompute in its recipe): the default factor, set from the
    Qwen3-235B-A22B pairs alone, predicts it within 3%, and the run pins the factor (0.3 either way moves the
    prediction by more than 10%). A law in which the busiest rank's excess grows as sqrt(EP / experts a rank), fitted
    to the same pairs, would charge it 1.8x and miss it: the flat factor stays until a run says otherwise."""
    run = next(r for r in load_configured_runs() if r.run_id == "R101")
    assert run.knobs.routing == "dropless" and run.layout.ep == 16 and run.model.num_moe_experts // run.layout.ep == 8

    def tokens(imbalance=None):
        knobs = replace(run.knobs, token_imbalance=imbalance)
        return estimate(run.model, run.gpu, run.layout, run.workload, knobs).time["tokens_per_s_per_gpu"]

    assert tokens() == pytest.approx(run.tokens_per_s_per_gpu, rel=0.03)
    low, high = tokens(DROPLESS_IMBALANCE - 0.3), tokens(DROPLESS_IMBALANCE + 0.3)
    assert low / run.tokens_per_s_per_gpu > 1.10 and high / run.tokens_per_s_per_gpu < 0.90
    per_expert_cv = (DROPLESS_IMBALANCE - 1) * math.sqrt(128 / 8) / expected_max_normal(8)  # ModelZoo: EP8, 16 a rank
    law = 1 + per_expert_cv / math.sqrt(8) * expected_max_normal(16)
    assert law > 1.75 and tokens(law) / run.tokens_per_s_per_gpu < 0.90


def test_ep_overlap_without_cuda_graphs_on_blackwell_gains_what_was_measured():
    """gpt-oss-120b on 64 GB200, one recipe (BF16, EP64, eager): EP overlap measured +5% with alltoall (R190) over R023
    without it; Qwen3-30B-A3B on 16 H100 (eager but for the router graphs) measured +17.7% from it (R083 -> R084,
    TFLOP/s). The predicted gains follow: within 6 points of the measured one on GB200 (0%), and above 10% on H100
    (+23%). R172 (the overlap on HybridEP at 32 SMs, +1% measured) changes the dispatcher too: it holds since the FP32
    fc2 bias pass HybridEP's probabilities bring is charged (compute.expert_bias_seconds; +15% predicted before)."""
    runs = {r.run_id: r for r in load_configured_runs()}
    tokens = {k: estimate(runs[k].model, runs[k].gpu, runs[k].layout, runs[k].workload, runs[k].knobs)
              .time["tokens_per_s_per_gpu"] for k in ("R023", "R190", "R172", "R083", "R084")}
    for on in ("R190", "R172"):
        measured = runs[on].tokens_per_s_per_gpu / runs["R023"].tokens_per_s_per_gpu - 1
        assert abs(tokens[on] / tokens["R023"] - 1 - measured) < 0.06, on
    assert tokens["R084"] / tokens["R083"] - 1 > 0.10


def test_ep_overlap_on_blackwell_gains_as_much_as_the_graphs_capture():
    """Blackwell runs with EP overlap and TE-scoped graphs (attention and router, or the router alone) leave much of
    each layer's launches eager, and the overlap's CPU work then sets the pace, as it does with no graph at all
    (efficiency.toml ep_overlap_hide_eager). Crediting their overlap in full put the seven such runs at -2% to +25%;
    capped by the share of launches left eager they are within 20% (R119, a listed gap, at +19% since the bubble takes
    the unpaired warm-up all-to-all whole, +18% since the DP window counts host gaps, 17% before) and nearer on average,
    and R102 (Qwen3-30B-A3B
    on 8 GB200, router graphs only, natural routing), whose +30% prompted the look, moves to within 10% under the
    linear form, which was taken as the plain reading of the cap, not tuned on it."""
    runs = {r.run_id: r for r in load_configured_runs()}
    scoped = [r for r in runs.values() if r.gpu.arch == "blackwell" and r.knobs.ep_overlap
              and r.knobs.cuda_graph_scope and "full_iteration" not in r.knobs.cuda_graph_scope]
    assert {r.run_id for r in scoped} >= {"R102", "R111", "R112", "R118", "R119", "R160", "R162", "R188"}

    def error(run, overrides=None):
        t = estimate(run.model, run.gpu, run.layout, run.workload, run.knobs, efficiency_overrides=overrides)
        return t.time["tokens_per_s_per_gpu"] / (run.tokens_per_s_per_gpu or tokens_from_tflops(run)) - 1

    capped = {r.run_id: error(r) for r in scoped}
    uncapped = {r.run_id: error(r, {"ep_overlap_hide_eager": 1.0}) for r in scoped}
    # R265 (B300, Megatron-LM's EP16 over two nodes, +20%) is a listed gap for its cross-node all-to-all (R243)
    assert max(abs(e) for k, e in capped.items() if k != "R265") < 0.20 and 0.15 < capped["R265"] < 0.25
    assert statistics.mean(abs(e) for e in capped.values()) < statistics.mean(abs(e) for e in uncapped.values())
    assert uncapped["R102"] > 0.25 and abs(capped["R102"]) < 0.10


def test_ep_overlap_across_nodes_hides_under_nearly_the_whole_window():
    """Qwen3-235B-A22B on 256 H100, TP2 PP8 VPP4 EP32, NCCL alltoall with EP overlap, eager (R014, R033, R050, R181,
    R200: five releases of one recipe). Its all-to-all crosses 4 nodes and the NIC share outlasts the NVLink copies,
    so the compute beside it loses next to nothing (overlap.ep_overlap_hide); charging the NVLink share (0.7 usable)
    to it put all five 8-14% low. Now within 8%."""
    runs = {r.run_id: r for r in load_configured_runs()}
    errors = {k: _error(runs[k]) for k in ("R014", "R033", "R050", "R181", "R200")}
    assert all(abs(e) < 0.08 for e in errors.values()), errors


def test_host_bound_small_micro_batches_are_predicted():
    """Qwen3-30B-A3B on 8 B200: 9,299 tokens/s/GPU at MBS 1 with alltoall and router graphs (R046) against
    26,695 at MBS 4 with HybridEP and attention graphs (R010), 2.87x; the GPU work per token barely changes,
    the host CPU per micro-batch does. The predicted ratio is within 15% and the MBS-1 run is host-bound."""
    runs = {r.run_id: r for r in RUNS}
    small, big = (estimate(runs[k].model, runs[k].gpu, runs[k].layout, runs[k].workload, runs[k].knobs)
                  for k in ("R046", "R010"))
    ratio = big.time["tokens_per_s_per_gpu"] / small.time["tokens_per_s_per_gpu"]
    assert ratio == pytest.approx(26695 / 9299, rel=0.15)
    assert small.time["dominant_wall"] == "host"
    assert big.time["walls"]["host"] < 0.05 * big.time["step_seconds"]


def _run(model, gpu, world, *, tp=1, cp=1, pp=1, vpp=1, ep=1, mbs=1, gbs, seq=4096, layout=None, acct=False, **knobs):
    return (load_model(model), load_gpu(gpu),
            Layout(world_size=world, tp=tp, cp=cp, pp=pp, vpp=vpp, ep=ep, pipeline_layout=layout,
                   account_for_embedding=acct, account_for_loss=acct),
            Workload(seq_length=seq, micro_batch_size=mbs, global_batch_size=gbs), Knobs(**knobs))


def _tokens(case) -> float:
    return estimate(*case).time["tokens_per_s_per_gpu"]


SEED_SMOKE = dict(model="qwen3-30b-a3b", gpu="h100", world=16, ep=16, gbs=1024, precision="bf16", dispatcher="alltoall",
                  routing="force-balance", main_grads_fp32=False)


def test_the_seed_s_overlap_smoke_without_overlap_is_predicted_within_15_percent():
    """R239: 41.25 s a step without EP overlap (assumptions as its A/B pair's below). With overlap (R240, 31.31 s)
    moetune predicts 17% less: it hides more of the eager alltoall than this smoke measured (docs/time.md)."""
    step = estimate(*_run(**SEED_SMOKE)).time["step_seconds"]
    assert step == pytest.approx(41.25, rel=0.15)


# Single-knob A/B pairs from the published runs (slower first, as measured).
AB_PAIRS = [
    # R083 -> R084: EP overlap off -> on, Qwen3-30B-A3B 16 x H100 (244.0 -> 287.3 TFLOP/s/GPU)
    ("ep_overlap", dict(model="qwen3-30b-a3b", gpu="h100", world=16, ep=16, gbs=1024, dispatcher="hybridep",
                        cuda_graph_scope=("moe_router", "moe_preprocess"), routing="force-balance",
                        main_grads_fp32=False), {"ep_overlap": False}, {"ep_overlap": True}),
    # R239 -> R240: the seeds' own smoke (seeds/003 § Measured Short-Run Caveat): EP overlap off -> on, alltoall EP16,
    # no CUDA graphs, BF16 (41.25 -> 31.31 s a step); sequence 4096 and MBS 1 assumed (the Qwen3-30B-A3B recipe's), and
    # force-balanced routing (iterations 3-8 of a fresh router on mock data route near-uniformly)
    ("ep_overlap_alltoall_seed", SEED_SMOKE, {"ep_overlap": False}, {"ep_overlap": True}),
    # R134 -> R135 and R141 -> R142: alltoall -> DeepEP -> HybridEP, DeepSeek-V3 256 x GB200 (540 -> 566,
    # 830 -> 944); sequence length 4096 assumed (the optimisation-history rows do not state it)
    ("alltoall_to_deepep", dict(model="deepseek-v3", gpu="gb200", world=256, pp=8, vpp=4, ep=32, gbs=2048,
                                layout="Et|(tt|)*30mL", precision="mxfp8", recompute="selective",
                                recompute_modules=frozenset({"mla_up_proj", "mlp"}), main_grads_fp32=False),
     {"dispatcher": "alltoall"}, {"dispatcher": "deepep"}),
    ("deepep_to_hybridep", dict(model="deepseek-v3", gpu="gb200", world=256, pp=8, vpp=4, ep=32, gbs=2048,
                                layout="Et|(tt|)*30mL", precision="mxfp8", recompute="selective",
                                recompute_modules=frozenset({"mlp", "moe_act"}), main_grads_fp32=False),
     {"dispatcher": "deepep"}, {"dispatcher": "hybridep"}),
    # R152 -> R151: dropless -> force-balanced routing, Qwen3-235B-A22B 256 x H100 at 16K (237 -> 295);
    # CP and MBS are not stated (CP 1, MBS 1 assumed); the Bridge qwen3 split counts embedding and loss as layers
    ("dropless_to_force_balance", dict(model="qwen3-235b-a22b", gpu="h100", world=256, tp=4, pp=8, vpp=4, ep=8,
                                       gbs=256, seq=16384, acct=True, dispatcher="deepep", recompute="selective",
                                       recompute_modules=frozenset({"layernorm", "moe"}), main_grads_fp32=False),
     {"routing": "dropless"}, {"routing": "force-balance"}),
    # R067 -> R068: CUDA graphs off -> TE-scoped (attn, moe_router, moe_preprocess), Qwen3-30B-A3B 16 x H100
    # TP2 PP2 EP4 (214 -> 274); sequence, batch and dispatcher not stated (4096, GBS 1024, alltoall assumed)
    ("cuda_graphs_on", dict(model="qwen3-30b-a3b", gpu="h100", world=16, tp=2, pp=2, ep=4, gbs=1024,
                            dispatcher="alltoall", main_grads_fp32=False),
     {"cuda_graph_scope": ()}, {"cuda_graph_scope": ("attn", "moe_router", "moe_preprocess")}),
    # R069 -> R070: CUDA graphs off -> TE-scoped, gpt-oss-20b 16 x H100 TP2 PP4 EP4, GBS 4 (40.1 -> 49.9); sequence,
    # MBS, precision and dispatcher not stated (4096, 1, BF16, alltoall assumed)
    ("cuda_graphs_on_gpt_oss", dict(model="gpt-oss-20b", gpu="h100", world=16, tp=2, pp=4, ep=4, gbs=4,
                                    dispatcher="alltoall"),
     {"cuda_graph_scope": ()}, {"cuda_graph_scope": ("attn", "moe_router", "moe_preprocess")}),
    # R082 -> R081: recompute moe + layernorm -> moe alone, Nemotron-3-Nano 16 x H100 EP8 at 8K, BF16, HybridEP,
    # attention/Mamba graphs (270.6 -> 277.7)
    ("layernorm_recompute_off", dict(model="nemotron3-nano-30b-a3b", gpu="h100", world=16, ep=8, gbs=16, seq=8192,
                                     dispatcher="hybridep", recompute="selective", cuda_graph_scope=("attn", "mamba")),
     {"recompute_modules": frozenset({"moe", "layernorm"})}, {"recompute_modules": frozenset({"moe"})}),
    # R154 -> R153, R156 -> R155, R158 -> R157: dropless -> force-balanced at 32K, 64K and 128K (CP 2, 4, 8)
    *[(f"dropless_to_force_balance_{seq // 1024}k",
       dict(model="qwen3-235b-a22b", gpu="h100", world=256, tp=4, cp=cp, pp=8, vpp=4, ep=8, gbs=256, seq=seq,
            acct=True, dispatcher="deepep", recompute="selective", recompute_modules=frozenset({"layernorm", "moe"}),
            main_grads_fp32=False), {"routing": "dropless"}, {"routing": "force-balance"})
      for seq, cp in ((32768, 2), (65536, 4), (131072, 8))],
    # R118/R119 -> R116/R117: TE-scoped -> full-iteration CUDA graphs, Qwen3-235B-A22B 128 x GB200 EP64 MXFP8
    # HybridEP with EP overlap (1018/876 -> 1160/1208)
    ("full_iteration_graphs", dict(model="qwen3-235b-a22b", gpu="gb200", world=128, ep=64, gbs=8192,
                                   precision="mxfp8", dispatcher="hybridep", ep_overlap=True, routing="force-balance",
                                   main_grads_fp32=False),
     {"cuda_graph_scope": ("attn", "moe_router", "moe_preprocess")}, {"cuda_graph_scope": ("full_iteration",)}),
]


@pytest.mark.parametrize(("name", "base", "slow", "fast"), AB_PAIRS, ids=[p[0] for p in AB_PAIRS])
def test_single_knob_changes_are_ranked_in_the_measured_order(name, base, slow, fast):
    assert _tokens(_run(**base, **slow)) < _tokens(_run(**base, **fast))


def test_throughput_in_megatron_flops_matches_tokens():
    run = next(r for r in RUNS if r.run_id == "R051")
    e = estimate(run.model, run.gpu, run.layout, run.workload, run.knobs)
    flops = megatron_model_flops(run.model, run.workload.seq_length, run.workload.gbs(run.layout), tp=run.layout.tp)
    per_token = flops / (run.workload.gbs(run.layout) * run.workload.seq_length)
    assert e.time["tflops_per_gpu"] * 1e12 == pytest.approx(e.time["tokens_per_s_per_gpu"] * per_token, rel=1e-9)


def test_recompute_sets_follow_the_measured_order_on_moonlight():
    """ab_recompute_moonlight (published_runs.csv R071-R076: Moonlight-16B-A3B, 8 x H100, TP2 EP8, MBS 1, BF16;
    dispatcher not stated, alltoall assumed): measured TFLOP/s/GPU for each recompute set."""
    measured = {"": 77.50, "moe_act": 75.50, "core_attn": 74.44, "mla_up_proj": 73.72, "mla_up_proj mlp": 71.50,
                "layernorm moe_act": 70.27}
    predicted = {}
    for mods in measured:
        knobs = dict(recompute="selective", recompute_modules=frozenset(mods.split())) if mods else {}
        case = _run("moonlight-16b-a3b", "h100", 8, tp=2, ep=8, gbs=4, dispatcher="alltoall", main_grads_fp32=False,
                    **knobs)
        predicted[mods] = estimate(*case).time["tflops_per_gpu"]
    names = list(measured)
    # as every A/B check here (planner/ab_order.py): a pair counts only when its measured gap exceeds the noise floor
    # (these runs have no repeat); 12 of the 15 pairs do
    pairs = [(a, b) for i, a in enumerate(names) for b in names[i + 1:]
             if abs(measured[a] / measured[b] - 1) > NOISE_FLOOR]
    wrong = {(a, b) for a, b in pairs if (measured[a] > measured[b]) != (predicted[a] > predicted[b])}
    assert max(predicted, key=predicted.get) == ""  # no recompute is fastest, as measured
    # every pair in order since mla_up_proj replays the up-projections alone (it had replayed the whole attention
    # projection, and put layernorm recompute cheaper than it)
    assert wrong == set(), f"{len(pairs) - len(wrong)} of {len(pairs)} in order"


@pytest.mark.parametrize(("ep_overlap", "measured"), [(False, 244.039), (True, 287.305)])
def test_bf16_small_model_throughput_without_a_token_count(ep_overlap, measured):
    """R083/R084 (Qwen3-30B-A3B, 16 x H100, EP16, BF16, HybridEP, router graphs; published as TFLOP/s/GPU only, so
    they are not among the complete runs): predicted Megatron TFLOP/s within 15%. Before FP8 recipes carried their
    own CPU cost (fp8_host_factor) this BF16 run was predicted host-bound and 20-26% slow."""
    case = _run("qwen3-30b-a3b", "h100", 16, ep=16, gbs=1024, dispatcher="hybridep", routing="force-balance",
                cuda_graph_scope=("moe_router", "moe_preprocess"), main_grads_fp32=False, ep_overlap=ep_overlap)
    assert estimate(*case).time["tflops_per_gpu"] == pytest.approx(measured, rel=0.15)


def test_hybridep_sm_count_read_from_each_recipe_matters_on_nvlink5():
    """Nemotron-3-Nano on 8 GB300 ran HybridEP at the recipe's 16 SMs (Bridge's 32-SM override runs before its
    backend is set; published_runs.csv flex_num_sms): predicted within 15% at 16 SMs, while at 32 the same run
    would be over-predicted by more than 20%."""
    runs = {r.run_id: r for r in RUNS}
    nano = runs["R182"]
    assert nano.knobs.num_sms == 16
    at = {}
    for sms in (16, 32):
        e = estimate(nano.model, nano.gpu, nano.layout, nano.workload, replace(nano.knobs, flex_num_sms=sms))
        at[sms] = e.time["tokens_per_s_per_gpu"] / nano.tokens_per_s_per_gpu - 1
    assert abs(at[16]) <= 0.15 < at[32] - 0.05
