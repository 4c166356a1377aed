"""explain: the seeds' first answer with this run's numbers; moves are re-estimated, not asserted."""

import json
from dataclasses import replace

import pytest

from moetune.cli.main import main
from moetune.errors import MoetuneError
from moetune.layout.knobs import Knobs
from moetune.layout.layout import Layout, parse_pipeline_layout
from moetune.layout.validate import Workload
from moetune.planner.config_map import to_config
from moetune.planner.estimate import estimate
from moetune.planner.explain import explain
from moetune.planner.explain_retune import COMPOUND, COMPOUND_MARGIN
from moetune.planner.explain_scale import scale as explain_scale
from moetune.planner.fit_steps import FIT_LADDER, fit_steps, smallest_fitting_layout
from moetune.planner.from_config import from_config
from moetune.planner.from_json import estimate_from_json
from moetune.planner.moves import apply_move, move_change, moves
from moetune.planner.rule_findings import findings, rule_errors
from moetune.planner.runs import load_configured_runs
from moetune.planner.search import plan
from moetune.rules import derive, evaluate
from moetune.specs.hardware import load_gpu
from moetune.specs.platform import platform_defaults
from moetune.specs.registry import load_model


def _qwen(**knobs):
    return estimate(load_model("qwen3-30b-a3b"), load_gpu("h100"), Layout(world_size=16, ep=16),
                    Workload(seq_length=4096, micro_batch_size=1, global_batch_size=1024),
                    Knobs(dispatcher="alltoall", main_grads_fp32=False, **knobs))


def test_retune_moves_are_measured_improvements_that_fit():
    e = _qwen()
    answer = explain(e)
    assert answer["retune"], "an alltoall EP16 run across two nodes has something to gain"
    for move in answer["retune"]:
        assert move["predicted_gain"] > 0 and move["new_peak_gib"] <= e.gpu.capacity_bytes / 2**30
    gains = [m["predicted_gain"] for m in answer["retune"]]
    assert gains == sorted(gains, reverse=True)
    assert {m["rule"] for m in answer["retune"]} >= {"ep_overlap", "dispatcher_deepep"}


def test_moves_already_in_place_are_not_suggested():
    answer = explain(_qwen(ep_overlap=True))
    assert "ep_overlap" not in {m["rule"] for m in answer["retune"]}


def test_sections_and_meshes():
    answer = explain(_qwen())
    assert answer["scale"]["attention_mesh"] == "TP1 x CP1 x DP16 x PP1"
    assert answer["scale"]["moe_mesh"] == "ETP1 x EP16 x EDP1 x PP1"
    assert answer["scale"]["groups_leaving_nvlink_domain"]["ep"] > 0  # EP16 spans two 8-GPU nodes
    assert answer["default_mappings"]["dispatcher"] == "deepep"
    assert answer["profile"]["dominant_wall"] in {"compute", "communication", "bubble", "host"}
    assert abs(sum(answer["profile"]["wall_shares"].values()) - 1) < 1e-9


def test_not_fitting_run_gets_fit_moves_in_seed_order(capsys):
    e = estimate(load_model("qwen3-30b-a3b"), load_gpu("h100"), Layout(world_size=16, ep=1),
                 Workload(seq_length=4096, micro_batch_size=1, global_batch_size=64), Knobs())
    assert not e.fits
    answer = explain(e)
    assert answer["profile"]["dominant_wall"] == "memory"
    steps = answer["fit"]["steps"]
    ladder = [s["step"] for s in steps if s["step"] != "smallest model parallelism that fits"]
    assert ladder == [m for m in FIT_LADDER if m in ladder]  # the seeds' order: selective, then full, then offload
    assert ladder.index("selective_recompute_moe_act") < len(ladder) - 1
    assert any(s.get("fits", True) for s in steps)
    assert steps[0]["step"] == "smallest model parallelism that fits" and steps[0]["peak_gib"] <= 78


def _errors_after(e, change: dict) -> list[str]:
    """Rule errors of the estimate's configuration with a step's overrides applied, as `moetune check` reads it."""
    config = {**to_config(e), **change}
    return [f.rule for f in evaluate(config, derive(config), context="check") if f.severity == "error"
            and not f.rule.startswith("fit.")]


def test_fit_ladder_keeps_the_runs_modules_and_ends_in_a_configuration_megatron_accepts():
    """Each step adds to the modules already recomputed (it used to replace them and raise the peak) and drops the
    CUDA-graph scopes Megatron refuses beside it (full recompute under TE-scoped graphs used to be the last step)."""
    e = estimate(load_model("qwen3-30b-a3b"), load_gpu("h100"), Layout(world_size=16, ep=8),
                 Workload(seq_length=4096, micro_batch_size=1, global_batch_size=1024),
                 Knobs(recompute="selective", recompute_modules=frozenset({"core_attn"}),
                       cuda_graph_scope=("attn", "moe_router", "moe_preprocess")))
    assert not e.fits and not _errors_after(e, {})
    steps = [s for s in explain(e)["fit"]["steps"] if "change" in s]
    assert steps and steps[-1]["fits"]
    peaks = [s["peak_gib"] for s in steps]
    assert peaks == sorted(peaks, reverse=True) and peaks[0] < e.peak_bytes / 2**30
    applied = {}
    for step in steps:
        applied.update(step["change"])
        assert _errors_after(e, applied) == [], step["step"]
        if applied.get("model.recompute_granularity") == "selective":
            assert "core_attn" in applied["model.recompute_modules"]


def test_json_round_trip_through_estimate_and_plan(capsys, tmp_path):
    assert main(["estimate", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--ep", "16", "--gbs", "1024",
                 "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    again = estimate_from_json(data)
    assert again.peak_bytes == data["memory"]["peak_bytes"]
    assert again.time["step_seconds"] == data["time"]["step_seconds"]
    path = tmp_path / "e.json"
    path.write_text(json.dumps(data))
    assert main(["explain", "--plan", str(path), "--json"]) == 0
    assert "retune" in json.loads(capsys.readouterr().out)


def test_a_new_vpp_re_splits_a_layout_string():
    """DeepSeek-V3 with the GB300 card's "Et*4|(t*4|)*14tmL" (PP2 x VPP8): the VPP move re-splits the layers for
    VPP16 (the string written for VPP8 no longer applies) instead of pairing the old string with a new VPP, and
    evens the ranks out as `plan` does: at least as fast as the recipes' own VPP16 string, "Et|(tt|)*30mL"."""
    e = estimate(load_model("deepseek-v3"), load_gpu("gb300"),
                 Layout(world_size=256, pp=2, ep=32, pipeline_layout="Et*4|(t*4|)*14tmL"),
                 Workload(seq_length=4096, micro_batch_size=1, global_batch_size=4096),
                 Knobs(precision="mxfp8", dispatcher="hybridep", routing="force-balance", main_grads_fp32=False))
    assert e.layout.vpp == 8
    moved = apply_move(e, moves()["more_virtual_stages"])
    assert moved.layout.vpp == 16 and len(parse_pipeline_layout(moved.layout.pipeline_layout)) == 32
    recipe = e.variant(layout=replace(moved.layout, pipeline_layout="Et|(tt|)*30mL"))
    assert moved.time["step_seconds"] <= recipe.time["step_seconds"]


def test_fit_flags_a_tight_margin():
    """Free memory under 3% of the GPU is within the estimate's error: explain says so and names --headroom. Mixtral-
    8x7B on 16 H100: the unconstrained pick leaves 0.2 GiB; with 6 GiB of headroom the note goes."""
    spec, gpu, wl = load_model("mixtral-8x7b"), load_gpu("h100"), Workload(seq_length=4096, global_batch_size=256)
    tight = explain(plan(spec, gpu, 16, wl, top=1).results[0])["fit"]
    roomy = explain(plan(spec, gpu, 16, wl, top=1, headroom_gib=6).results[0])["fit"]
    assert tight["capacity_gib"] - tight["peak_gib"] < 0.03 * tight["capacity_gib"]
    assert "--headroom" in tight["note"] and "note" not in roomy


def test_retune_turns_dp_overlap_back_on():
    """gpt-oss-120b on 64 B200 at PP1 EP8 as R006 ran it holds 16 B parameters per rank: with overlap_grad_reduce off
    the whole gradient reduce-scatter is exposed, and explain offers the DP overlap back with a measured gain."""
    run = next(r for r in load_configured_runs() if r.run_id == "R006")
    e = estimate(run.model, run.gpu, run.layout, run.workload, replace(run.knobs, overlap_grad_reduce=False))
    assert e.fits
    moves = {m["rule"]: m for m in explain(e)["retune"]}
    assert moves["dp_overlap"]["predicted_gain"] > 0


def test_explain_names_the_cp_exchange_and_offers_the_better_one():
    """DeepSeek-V3 at 128k on 256 H100 over a p2p ring across nodes (the long-context card's layout, R064): explain
    says which exchange moetune defaults to there, and its Retune offers it with the hierarchical sizes written out."""
    knobs = Knobs(precision="fp8-blockwise", dispatcher="deepep", recompute="selective",
                  recompute_modules=frozenset({"mla_up_proj", "layernorm", "moe", "mlp"}), routing="force-balance",
                  optimizer_offload_fraction=1.0, cp_comm_type="p2p")
    layout = Layout(world_size=256, tp=1, cp=32, pp=8, vpp=4, ep=32, pipeline_layout="Et|(tt|)*30mL")
    e = estimate(load_model("deepseek-v3"), load_gpu("h100"), layout,
                 Workload(seq_length=131072, micro_batch_size=1, global_batch_size=64), knobs)
    answer = explain(e)
    assert answer["default_mappings"]["cp_comm_type"] == "a2a+p2p [8, 4]"
    move = next(m for m in answer["retune"] if m["rule"] == "cp_exchange")
    assert move["change"] == {"model.cp_comm_type": "a2a+p2p", "model.hierarchical_context_parallel_sizes": [8, 4]}
    assert move["predicted_gain"] > 1.0  # the ring is most of the step
    assert any("cp_comm_type p2p" in note for note in answer["scale"]["notes"])


def test_retune_moves_are_estimated_under_the_users_efficiency_file():
    """A user file that credits eager EP overlap nothing (ep_overlap_hide_eager = 0) must take the overlap move
    off the list: each move is re-estimated under the same constants as the configuration it changes."""
    shipped = _qwen()
    assert "ep_overlap" in {m["rule"] for m in explain(shipped)["retune"]}
    mine = estimate(shipped.model, shipped.gpu, shipped.layout, shipped.workload, shipped.knobs,
                    efficiency_overrides={"ep_overlap_hide_eager": 0.0})
    assert "ep_overlap" not in {m["rule"] for m in explain(mine)["retune"]}
    twin = mine.variant(knobs=replace(mine.knobs, ep_overlap=True))
    assert twin.efficiency["ep_overlap_hide_eager"] == 0.0
    assert twin.time["step_seconds"] >= mine.time["step_seconds"] * 0.999


def test_explain_of_a_saved_plan_takes_the_efficiency_file_again(tmp_path, capsys):
    saved = tmp_path / "est.json"
    slow = tmp_path / "slow.toml"
    slow.write_text("[h100]\ngemm_eff = 0.2\nfp8_gemm_eff = 0.2\n")
    args = ["qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--ep", "16", "--seq", "4096", "--gbs", "1024"]
    assert main(["estimate", *args, "--json"]) == 0
    saved.write_text(capsys.readouterr().out)
    assert main(["explain", "--plan", str(saved), "--json"]) == 0
    shipped = json.loads(capsys.readouterr().out)
    assert main(["explain", "--plan", str(saved), "--efficiency", str(slow), "--json"]) == 0
    mine = json.loads(capsys.readouterr().out)
    assert mine["profile"]["wall_shares"]["compute"] > shipped["profile"]["wall_shares"]["compute"]
    # an estimate made under the file carries it: explaining it needs no second --efficiency
    assert main(["estimate", *args, "--efficiency", str(slow), "--json"]) == 0
    made = json.loads(capsys.readouterr().out)
    assert made["efficiency_overrides"] == {"h100": {"gemm_eff": 0.2, "fp8_gemm_eff": 0.2}}
    saved.write_text(json.dumps(made))
    assert main(["explain", "--plan", str(saved), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["profile"] == mine["profile"]


def test_profile_says_what_dropless_routing_costs():
    """Dropless at EP16: explain names the busiest-rank factor, where it came from, and the force-balanced figure
    (re-estimated, not assumed); a user's own factor of 1 costs nothing; force-balanced runs get no such line."""
    from moetune.layout.imbalance import DROPLESS_IMBALANCE
    dropless = explain(_qwen(routing="dropless"))["profile"]["routing"]
    balanced = _qwen(routing="force-balance")
    assert dropless["token_imbalance"] == DROPLESS_IMBALANCE and "R151-R158" in dropless["source"]
    assert dropless["force_balanced_tokens_per_s_per_gpu"] == balanced.time["tokens_per_s_per_gpu"]
    assert 0.05 < dropless["cost"] < 0.5
    mine = explain(_qwen(routing="dropless", token_imbalance=1.0))["profile"]["routing"]
    assert mine["source"] == "--token-imbalance" and abs(mine["cost"]) < 1e-9
    assert explain(balanced)["profile"]["routing"] is None


def test_dropless_on_expert_tp_names_the_ep_first_layout_it_beats():
    """Dropless on EP 1 x ETP 8: no expert rank is busier (nothing charged), while the seeds' EP-first layout over
    the same ranks (EP 8, which rule scale.prefer_ep_over_etp points to) is charged the busiest-rank factor: explain
    gives that layout's re-estimated figure, so a pick that keeps ETP says why. (gpt-oss, the first model this was
    seen on, has expert biases and may not run ETP > 1 at all.)"""
    from moetune.layout.imbalance import DROPLESS_IMBALANCE
    spec, gpu = load_model("mixtral-8x7b"), load_gpu("h100")  # no biases: ETP > 1 is legal (rule scale.moe_bias_*)
    wl = Workload(seq_length=4096, micro_batch_size=1, global_batch_size=512)
    knobs = Knobs(precision="fp8-blockwise", dispatcher="alltoall", routing="dropless")
    etp = estimate(spec, gpu, Layout(world_size=64, tp=2, ep=1, etp=8), wl, knobs)
    routing = explain(etp)["profile"]["routing"]
    ep_first = estimate(spec, gpu, Layout(world_size=64, tp=2, ep=8, etp=1), wl, knobs)
    assert routing["token_imbalance"] == 1.0 and routing["ep_first_token_imbalance"] == DROPLESS_IMBALANCE
    assert routing["ep_first_layout"] == ep_first.layout.short()
    assert routing["ep_first_tokens_per_s_per_gpu"] == ep_first.time["tokens_per_s_per_gpu"]
    assert routing["ep_first_tokens_per_s_per_gpu"] < etp.time["tokens_per_s_per_gpu"]
    forced = replace(knobs, routing="force-balance")
    assert explain(estimate(spec, gpu, Layout(world_size=64, tp=2, ep=1, etp=8), wl, forced))["profile"][
        "routing"] is None


def test_a_saved_dropless_result_keeps_the_default_as_a_default(tmp_path, capsys):
    """A plan or estimate saved with moetune's dropless factor is rebuilt with the default (not as if the user had
    passed --token-imbalance); a factor the user passed stays the user's."""
    args = ["estimate", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--ep", "16", "--seq", "4096",
            "--gbs", "1024", "--json"]
    for extra, source in (([], "R151-R158"), (["--token-imbalance", "1.3"], "--token-imbalance")):
        assert main([*args, *extra]) == 0
        saved = json.loads(capsys.readouterr().out)
        rebuilt = estimate_from_json(saved)
        assert source in explain(rebuilt)["profile"]["routing"]["source"]


def test_tp_comm_overlap_is_offered_only_where_userbuffers_take_the_recipe():
    """ModelZoo's Qwen3-235B-A22B layout at 16k (TP4, sequence parallel) without TP overlap: explain offers it in BF16
    (it hides TP time; ModelZoo's own BF16 runs set it), never under blockwise FP8 (rule overlap.tp_comm_quantizer)."""
    spec, gpu = load_model("qwen3-235b-a22b"), load_gpu("h100")
    lay = Layout(world_size=256, tp=4, pp=8, vpp=4, ep=8, account_for_embedding=True, account_for_loss=True)
    wl = Workload(seq_length=16384, micro_batch_size=1, global_batch_size=256)
    knobs = Knobs(precision="bf16", dispatcher="deepep", recompute="selective",
                  recompute_modules=frozenset({"layernorm", "moe"}), cuda_graph_scope=(), routing="force-balance")
    moves = {m["rule"]: m for m in explain(estimate(spec, gpu, lay, wl, knobs))["retune"]}
    on = estimate(spec, gpu, lay, wl, replace(knobs, tp_comm_overlap=True))
    assert moves["tp_comm_overlap"]["new_tokens_per_s_per_gpu"] == on.time["tokens_per_s_per_gpu"]
    assert moves["tp_comm_overlap"]["predicted_gain"] > 0
    blockwise = explain(estimate(spec, gpu, lay, wl, replace(knobs, precision="fp8-blockwise")))["retune"]
    assert "tp_comm_overlap" not in {m["rule"] for m in blockwise}


def test_scale_says_what_a_cp_ring_costs_the_attention():
    """CP4 over p2p at 8k: the ring's calls see 1,024-token chunks; explain names the ring and its slowdown
    (attention_rate.ring_slowdown), and an a2a exchange (whole-sequence calls) gets no such clause."""
    from moetune.walls.attention_rate import ring_slowdown
    from moetune.walls.compute import rates
    from moetune.walls.efficiency import efficiency
    spec, gpu = load_model("qwen3-235b-a22b"), load_gpu("h100")
    lay = Layout(world_size=64, tp=1, cp=4, pp=1, ep=8)
    wl = Workload(seq_length=8192, micro_batch_size=1, global_batch_size=64)
    ring = estimate(spec, gpu, lay, wl, Knobs(precision="bf16", cp_comm_type="p2p"))
    notes = " ".join(explain(ring)["scale"]["notes"])
    slow = ring_slowdown(8192, 4, rates(gpu, "bf16", efficiency("h100")))
    assert f"ring of 4 runs the attention in calls of 1,024-token chunks, {slow:.2f}x" in notes
    a2a = " ".join(explain(estimate(spec, gpu, lay, wl, Knobs(precision="bf16", cp_comm_type="a2a")))["scale"]["notes"])
    assert "ring of" not in a2a and "cp_comm_type a2a" in a2a


def test_a_layout_with_expert_tp_is_weighed_against_the_ep_first_one():
    """Rule scale.prefer_ep_over_etp warns on any ETP > 1; Scale then says what the EP-first layout over the same
    ranks would do, from its own estimate, and which wall separates them (force-balanced: no imbalance in play)."""
    spec, gpu = load_model("nemotron3-nano-30b-a3b"), load_gpu("gb200")
    wl = Workload(seq_length=8192, micro_batch_size=1, global_batch_size=512)
    knobs = Knobs(precision="mxfp8", dispatcher="hybridep", routing="force-balance")
    e = estimate(spec, gpu, Layout(world_size=64, ep=2, etp=2), wl, knobs)
    alt = estimate(spec, gpu, Layout(world_size=64, ep=4, etp=1), wl, knobs)
    note = next(n for n in explain(e)["scale"]["notes"] if n.startswith("expert TP2"))
    assert alt.layout.short() in note and f"{alt.time['tokens_per_s_per_gpu']:,.0f} tokens/s/GPU" in note
    gain = alt.time["tokens_per_s_per_gpu"] / e.time["tokens_per_s_per_gpu"] - 1
    assert f"({100 * gain:+.1f}%)" in note
    assert not any(n.startswith("expert TP") for n in explain(alt)["scale"]["notes"])  # EP-first already


def test_long_context_note_follows_the_seeds_own_tp_cp_recipe():
    """seeds/002's Qwen3-235B-A22B 128K NVL72 recipe (TP4 CP4 PP4 VPP12 EP32) is 8K tokens a TP x CP shard: no CP
    advice; at CP2 the note names a CP the 256 GPUs can hold (CP ~= seq / (4096 x TP) = 8), not seq/4096 = 32."""
    def notes(cp):
        e = estimate(load_model("qwen3-235b-a22b"), load_gpu("gb200"),
                     Layout(world_size=256, tp=4, cp=cp, pp=4, vpp=12, ep=32, account_for_embedding=True,
                            account_for_loss=True),
                     Workload(seq_length=131072, micro_batch_size=1, global_batch_size=256),
                     Knobs(recompute="selective", recompute_modules=frozenset({"moe_act", "layernorm"})),
                     with_time=False)
        return [n for n in explain_scale(e)["notes"] if n.startswith("long context")]
    assert notes(4) == []
    assert "here CP8" in notes(2)[0]


def _long(model, world, seq, gbs, **layout):
    return estimate(load_model(model), load_gpu("gb200"), Layout(world_size=world, **layout),
                    Workload(seq_length=seq, micro_batch_size=1, global_batch_size=gbs),
                    Knobs(cp_comm_type="auto", recompute="full"))


def _cp_advice(e):
    notes = [n for n in explain_scale(e)["notes"] if n.startswith("long context")]
    rule = [f for f in findings(e) if f.rule == "longctx.cp_sizing"]
    return notes, rule


def test_cp_advice_names_only_a_cp_estimate_runs():
    """The 4K-shard CP is taken among the CPs estimate runs for the model: gpt-oss-120b's sinks run CP over a2a alone,
    at most its 8 KV groups (the picks' TP1 CP8 at 128k on 256 GB200: no CP32 priced with p2p, the note says why CP16
    does not run); Qwen3-Next-80B-A3B's 16 gated delta-net key heads leave 8 a TP2 rank, so CP8, not CP16 (at 512k:
    its shard is weighed by its attention share, 12 of 48 mixers, so at 128k TP2 x CP4 it holds 4K attention tokens,
    the target itself; rules/derive_layers.py attention_facts)."""
    gpt = _long("gpt-oss-120b", 256, 131072, 256, cp=8, ep=64)
    notes, rule = _cp_advice(gpt)
    assert rule == [] and len(notes) == 1 and "here CP" not in notes[0] and "predicts" not in notes[0]
    assert "no CP above 8 runs on this layout: CP16: no CP exchange runs at CP 16" in notes[0]
    assert '"CP ~= seq_len / 4096"' in notes[0]  # the seed as it reads; (4096 x TP) is labelled moetune's reading
    nxt = _long("qwen3-next-80b-a3b", 256, 524288, 256, tp=2, cp=4, pp=4, ep=64)
    notes, rule = _cp_advice(nxt)
    assert "here CP8, the nearest power of two estimate runs" in notes[0] and "CP=8." in rule[0].message
    assert rule[0].fix == {"model.context_parallel_size": 8}
    assert 'seeds/002: "Start from a 4K shard target: CP ~= seq_len / 4096"' in rule[0].message
    assert "moetune's reading" in rule[0].message
    with pytest.raises(MoetuneError, match="linear_num_key_heads per TP rank"):
        nxt.variant(layout=replace(nxt.layout, cp=16))  # what the advice used to name


def test_scale_notes_a_cp_group_leaving_nvlink_and_shards_below_4k_with_what_moetune_predicts():
    """Qwen3-30B-A3B at 16k on 32 H100, TP4 CP4: two of each rank's three CP peers are on the other node of its
    16-rank TP x CP group, and the shard is 1,024 tokens, a quarter of the seeds' 4K. Neither is an error: the notes
    give the exchange's cost and the alternatives moetune weighed (CP kept inside NVLink at TP2; the 4K-shard CP1)."""
    spec, gpu = load_model("qwen3-30b-a3b"), load_gpu("h100")
    wl = Workload(seq_length=16384, micro_batch_size=1, global_batch_size=64)
    e = estimate(spec, gpu, Layout(world_size=32, tp=4, cp=4, ep=8), wl, Knobs(cp_comm_type="auto"))
    notes = explain_scale(e)["notes"]
    out = next(n for n in notes if "outside the NVLink domain (TP4 x CP4" in n)
    exposed, t = e.time["exposed_collectives"]["cp"], e.time
    assert out.startswith("2 of CP4's 3 peers sit outside") and f"of which {exposed:.2f} s is exposed" in out
    assert f"counted in the {t['tokens_per_s_per_gpu']:,.0f} tokens/s/GPU moetune predicts here" in out
    inside = estimate(spec, gpu, Layout(world_size=32, tp=2, cp=4, ep=8), wl, Knobs(cp_comm_type="auto"))
    assert f"keeping CP inside the domain, TP2 x CP4 predicts {inside.time['tokens_per_s_per_gpu']:,.0f}" in out
    shard = next(n for n in notes if n.startswith("long context: 1,024 tokens per TP x CP shard"))
    assert "1/4 of the seeds' 4K target" in shard and "CP1 here" in shard and "moetune predicts CP1 at" in shard
    assert not any("is an error" in n for n in notes) and "longctx.cp_sizing" not in {f.rule for f in findings(e)}
    # TP2 x CP4 fills one 8-GPU node: no CP peer off it; 2,048-token shards still note the 4K target
    notes = explain_scale(inside)["notes"]
    assert not any("outside the NVLink domain (TP" in n for n in notes)
    assert any(n.startswith("long context: 2,048 tokens per TP x CP shard") for n in notes)


def test_grace_blackwell_defaults_to_hybridep_whatever_its_nvlink_domain(tmp_path):
    cluster = tmp_path / "gb200_nvl8.toml"
    cluster.write_text('gpu = "gb200"\nnvlink_domain = 8\n')
    assert platform_defaults(load_gpu(str(cluster)))["dispatcher"] == "hybridep"  # Bridge runs no DeepEP on GB200


def test_a_compound_move_is_shown_only_when_it_beats_its_part():
    """By COMPOUND_MARGIN at least: Mixtral-8x22B at PP4 without VPP had led Retune with EP overlap + VPP at +19.4%
    where VPP alone gives +19.3% (explain audit)."""
    mixtral = estimate(load_model("mixtral-8x22b"), load_gpu("b200"), Layout(world_size=64, tp=2, ep=8, pp=4),
                       Workload(seq_length=4096), Knobs(precision="mxfp8", dispatcher="deepep"))
    gains = {m["rule"]: m["predicted_gain"] for m in explain(mixtral)["retune"]}
    compound = apply_move(mixtral, moves()["ep_overlap_with_vpp"])  # re-estimated apart from Retune's filter
    base = mixtral.time["tokens_per_s_per_gpu"]
    # VPP alone gives the compound's gain within the margin: the overlap adds next to nothing here
    assert compound is not None
    assert abs(compound.time["tokens_per_s_per_gpu"] / base - 1 - gains["more_virtual_stages"]) < COMPOUND_MARGIN
    assert "ep_overlap_with_vpp" not in gains and COMPOUND["ep_overlap_with_vpp"] == "more_virtual_stages"


def test_explain_lists_the_seeds_info_checklist_items():
    e = estimate(load_model("deepseek-v3"), load_gpu("h100"),
                 Layout(world_size=1024, tp=2, pp=8, ep=64, pipeline_layout="Et|(tt|)*30mL"),
                 Workload(seq_length=4096, micro_batch_size=1, global_batch_size=8192), Knobs())
    rules = {c["rule"]: c["severity"] for c in explain(e)["checks"]}
    assert rules.get("fit.fake_process_group") == "info"  # seeds/000 Fit: --fake-init-process-group


def _est(model, gpu, world, layout, gbs, mbs=1, seq=4096, **knobs):
    return estimate(load_model(model), load_gpu(gpu), Layout(world_size=world, **layout),
                    Workload(seq_length=seq, micro_batch_size=mbs, global_batch_size=gbs), Knobs(**knobs))


def test_the_bf16_move_writes_the_fields_that_turn_fp8_off():
    """Its overrides applied to the run give BF16 (a recipe name had lost to the run's own fp8 fields)."""
    e = _est("qwen3-30b-a3b", "gb200", 8, dict(ep=8), 256, precision="mxfp8", fp8_output_proj=True)
    move = moves()["bf16_precision"]
    change = move_change(move, e, apply_move(e, move))
    assert change["mixed_precision.fp8"] is None and change["model.fp8_output_proj"] is False
    assert not _errors_after(e, change)
    assert from_config({**to_config(e), **change})[2].precision == "bf16"


@pytest.mark.parametrize(("precision", "switch"), [("mxfp8", "fp8_param_gather"), ("nvfp4", "fp4_param_gather")])
@pytest.mark.parametrize(("move_id", "offload", "quantized"), [("optimizer_offload", 0.0, False),
                                                               ("drop_offload", 1.0, True)])
def test_the_offload_moves_write_the_quantized_weights_they_size(precision, switch, move_id, offload, quantized):
    """MXFP8 weights stay FP8 only without the optimizer's CPU offload, NVFP4 ones likewise (layout/param_gather.py
    OFFLOAD_RECIPES), so an offload move turns fp8_param_gather (and the MXFP8 gradient-buffer reuse) or
    fp4_param_gather off or back on; its overrides applied to the run's config give the peak shown and a config `check`
    accepts (they had kept the recipe's quantized weights beside the offload: Megatron refuses or fails on it and the
    weights' bytes differ)."""
    e = _est("qwen3-235b-a22b", "gb200", 32, dict(ep=8, pp=2), 256, precision=precision,
             optimizer_offload_fraction=offload)
    move = moves()[move_id]
    moved = apply_move(e, move)
    change = move_change(move, e, moved)
    assert change[f"mixed_precision.{switch}"] is quantized
    assert change.get("mixed_precision.reuse_grad_buf_for_mxfp8_param_ag") is (quantized if precision == "mxfp8"
                                                                              else None)
    assert not _errors_after(e, change)
    layout, wl, knobs = from_config({**to_config(e), **change})
    assert estimate(e.model, e.gpu, layout, wl, knobs).peak_bytes == moved.peak_bytes


def test_a_config_stating_fp8_weights_is_still_offered_the_optimizer_offload():
    """A Bridge MXFP8 recipe's config states fp8_param_gather (its preset's), which Knobs refuses beside a non-delayed
    optimizer offload; the ladder's offload step turns it off with the offload (it had been dropped as illegal, so the
    ladder stopped at full recompute, still out of memory) and the lighter recompute after it keeps those weights."""
    e0 = _est("qwen3-235b-a22b", "gb200", 32, dict(ep=8, pp=2), 256, precision="mxfp8")
    layout, wl, knobs = from_config({**to_config(e0), "cluster.num_gpus": 32})
    assert knobs.fp8_param_gather is True and not e0.fits
    steps = {s["step"]: s for s in fit_steps(estimate(e0.model, e0.gpu, layout, wl, knobs)) if "change" in s}
    assert steps["optimizer_offload"]["fits"] and steps["lighter_recompute_with_offload"]["fits"]
    assert steps["optimizer_offload"]["change"]["mixed_precision.fp8_param_gather"] is False


def test_a_config_stating_nvfp4_weights_is_still_offered_the_optimizer_offload():
    """Bridge's NVFP4 recipe states fp4_param_gather, which no optimizer offload steps: the ladder's offload step
    turns it off with the offload (precision.fp4_params_with_optimizer_offload would otherwise refuse the step)."""
    e0 = _est("qwen3-235b-a22b", "gb200", 32, dict(ep=8, pp=2), 256, precision="nvfp4")
    layout, wl, knobs = from_config({**to_config(e0), "cluster.num_gpus": 32})
    assert knobs.fp4_param_gather is True and not e0.fits
    steps = {s["step"]: s for s in fit_steps(estimate(e0.model, e0.gpu, layout, wl, knobs)) if "change" in s}
    assert steps["optimizer_offload"]["change"]["mixed_precision.fp4_param_gather"] is False


def test_a_users_ep_overlap_does_not_stop_the_ladder_short_of_fitting():
    """moe and full recompute are refused beside EP overlap: the ladder turns it off for them, and says so."""
    e = _est("qwen3-next-80b-a3b", "h100", 32, dict(ep=16), 64, ep_overlap=True)
    steps = [s for s in explain(e)["fit"]["steps"] if "change" in s]
    assert not e.fits and steps[-1]["fits"]
    assert any("EP overlap turned off" in s.get("note", "") for s in steps)


def test_the_micro_batch_is_halved_down_to_one_before_recompute():
    e = _est("qwen3-30b-a3b", "h100", 16, dict(ep=16), 1024, mbs=4)
    steps = [s for s in explain(e)["fit"]["steps"] if "change" in s]
    assert [s["change"].get("train.micro_batch_size") for s in steps[:2]] == [2, 1] and steps[1]["fits"]


def test_the_smallest_fitting_layout_is_one_the_rules_accept():
    """On 256 GB200 (64-GPU NVLink domains) an EP128 HybridEP layout is refused; the step names another."""
    e = _est("kimi-k2", "gb200", 256, dict(ep=32), 512)
    smallest = smallest_fitting_layout(e)
    assert smallest is not None and smallest.fits
    assert not set(rule_errors(smallest)) - set(rule_errors(e))


def test_offload_rows_come_after_every_other_fix_on_a_run_that_does_not_fit():
    e = _est("qwen3-30b-a3b", "gb300", 8, dict(ep=8), 32, seq=65536, precision="nvfp4")
    rows = [r["rule"] for r in explain(e)["retune"]]
    offload = [i for i, r in enumerate(rows) if "offload" in r]
    assert not e.fits and offload and offload == list(range(len(rows) - len(offload), len(rows)))


def test_moe_recompute_keeps_the_graph_scopes_megatron_accepts_beside_it():
    e = _est("nemotron3-nano-30b-a3b", "h100", 8, dict(ep=8), 64, cuda_graph_scope=("attn", "mamba", "moe_router",
                                                                                       "moe_preprocess"))
    new = apply_move(e, moves()["selective_recompute_moe"])
    assert new.knobs.cuda_graph_scope == ("attn", "mamba") and not set(rule_errors(new)) - set(rule_errors(e))


def test_a_refused_run_that_fits_is_offered_the_moves_that_clear_its_error():
    """Full recompute under TE-scoped graphs fits but Megatron-Core refuses it: the selective-recompute and
    graph-dropping moves clear the error even where they are memory moves or cost time."""
    e = _qwen(recompute="full", cuda_graph_scope=("attn", "moe_router"))
    assert e.fits and rule_errors(e) == ["cudagraph.full_recompute"]
    rows = explain(e)["retune"]
    assert {"selective_recompute_moe", "full_recompute"} <= {r["rule"] for r in rows}
    for r in rows:
        new = apply_move(e, moves()[r["rule"]])
        assert new.fits and not rule_errors(new)


def test_ep_first_halves_expert_tp_where_the_experts_cannot_take_all_of_it():
    """Mixtral-8x22B's 8 experts over 16 expert ranks: EP16 is illegal, EP8 x ETP2 is the seeds' EP-first layout
    (the rule scale.prefer_ep_over_etp and explain's comparison both name it)."""
    from moetune.planner.ep_first import ep_first
    from moetune.planner.rule_findings import findings
    spec, gpu = load_model("mixtral-8x22b"), load_gpu("h200")
    e = estimate(spec, gpu, Layout(world_size=64, tp=8, pp=2, ep=2, etp=8),
                 Workload(seq_length=4096, micro_batch_size=1, global_batch_size=256),
                 Knobs(precision="bf16", dispatcher="alltoall"))
    alt = ep_first(e)
    assert (alt.layout.ep, alt.layout.etp) == (8, 2)
    rule = next(f for f in findings(e) if f.rule == "scale.prefer_ep_over_etp")
    assert "EP8 x ETP2" in rule.message


def test_an_offloading_run_that_fits_without_is_told_to_drop_it():
    """seeds/000 Phase 1: offloading only when recompute and parallelism are not enough. Qwen3-30B-A3B on 16 H100 with
    its optimizer on the host and moe_act recompute fits without the offload: Retune offers dropping it, and its
    overrides applied to the run give a run with no offloading."""
    e = _est("qwen3-30b-a3b", "h100", 16, dict(ep=16), 256, precision="bf16", dispatcher="alltoall",
             recompute="selective", recompute_modules=frozenset({"moe_act"}), optimizer_offload_fraction=1.0)
    row = next(r for r in explain(e)["retune"] if r["rule"] == "drop_offload")
    assert row["predicted_gain"] > 0 and row["new_peak_gib"] < e.gpu.capacity_bytes / 2**30
    knobs = from_config({**to_config(e), **row["change"]})[2]
    assert knobs.optimizer_offload_fraction == 0 and not knobs.offload_modules
    assert not _errors_after(e, row["change"])


def test_a_fused_dispatcher_picked_because_the_default_s_buffers_do_not_fit_says_so():
    """Qwen3-235B-A22B on 256 H100 (the plan's pick at GBS 2048): HybridEP fits with 0.6 GiB free, DeepEP (the
    platform's default) does not, by half a GiB: the difference is the buffers charged each (memory_overheads.toml),
    and explain says so rather than let a tight margin pass for a preference."""
    e = estimate(load_model("qwen3-235b-a22b"), load_gpu("h100"),
                 Layout(world_size=256, tp=2, pp=8, vpp=6, ep=16, pipeline_layout="Ett|(tt|)*38t|(tt|)*7tL"),
                 Workload(seq_length=4096, micro_batch_size=1, global_batch_size=2048),
                 Knobs(precision="fp8-blockwise", dispatcher="hybridep", ep_overlap=True, delay_wgrad=True,
                       cuda_graph_scope=("attn", "moe_router", "moe_preprocess")))
    assert e.fits and not e.variant(knobs=replace(e.knobs, dispatcher="deepep")).fits
    assert any("platform's deepep does not fit" in n for n in explain(e)["scale"]["notes"])


def test_once_offloading_fits_the_ladder_backs_off_full_recompute():
    """Qwen3-30B-A3B on 4 H100 in BF16: only the optimizer offload makes it fit, on top of full recompute; with the
    offload on, selective recompute (moe) fits too and runs faster, so the ladder ends there (seeds/000 Phase 1: full
    recompute only when the run still does not fit)."""
    e = _est("qwen3-30b-a3b", "h100", 4, dict(ep=4), 60, precision="bf16")
    steps = explain(e)["fit"]["steps"]
    names = [s["step"] for s in steps]
    assert names[-2:] == ["optimizer_offload", "lighter_recompute_with_offload"]
    offload, lighter = steps[-2:]
    assert lighter["fits"] and lighter["tokens_per_s_per_gpu"] > offload["tokens_per_s_per_gpu"]
    assert lighter["change"]["model.recompute_granularity"] == "selective"
    composed = {}
    for step in steps:  # the ladder's overrides, one on top of another, as a user applies them
        composed.update(step.get("change", {}))
    assert not _errors_after(e, composed)
    assert from_config({**to_config(e), **composed})[2].recompute == "selective"


def test_current_scaling_is_offered_to_blockwise_fp8_on_hopper_only():
    def rules(precision, gpu="h100"):
        e = estimate(load_model("qwen3-30b-a3b"), load_gpu(gpu), Layout(world_size=16, ep=16),
                     Workload(seq_length=4096, micro_batch_size=1, global_batch_size=1024),
                     Knobs(precision=precision, cuda_graph_scope=("attn", "moe_router", "moe_preprocess")))
        return {m["rule"]: m for m in explain(e)["retune"]}

    move = rules("fp8-blockwise")["fp8_current_scaling"]
    assert move["predicted_gain"] > 0 and move["change"]["mixed_precision.fp8_recipe"] == "tensorwise"
    assert "fp8_current_scaling" not in rules("bf16") and "fp8_current_scaling" not in rules("fp8-current")
    assert "fp8_current_scaling" not in rules("mxfp8", gpu="gb200")


def test_a_hybrid_defaults_to_graphing_its_mamba_mixers_and_retune_offers_it(capsys):
    """Every Nemotron-3 Nano recipe graphs attn, mamba, moe_router and moe_preprocess; estimate's default had left the
    Mamba mixers eager (host 21% of the step) and no Retune move added them (explain audit)."""
    job = ["nemotron3-nano-30b-a3b", "--gpu", "b200", "--gpus", "8", "--ep", "8", "--gbs", "64"]
    assert main(["estimate", *job, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["knobs"]["cuda_graph_scope"] == ["attn", "mamba", "moe_router", "moe_preprocess"]
    assert main(["explain", *job, "--cuda-graph-scope", "attn,moe_router,moe_preprocess", "--json"]) == 0
    retune = json.loads(capsys.readouterr().out)["retune"]
    mamba = next(m for m in retune if m["rule"] == "cuda_graphs_mamba")
    assert mamba["predicted_gain"] > 0.05
    assert main(["explain", "qwen3-30b-a3b", "--gpu", "b200", "--gpus", "8", "--ep", "8", "--cuda-graph-scope", "none",
                 "--json"]) == 0
    assert "cuda_graphs_mamba" not in {m["rule"] for m in json.loads(capsys.readouterr().out)["retune"]}


def test_at_ep_1_the_default_dispatcher_named_is_the_one_that_runs(capsys):
    assert main(["explain", "deepseek-v3", "--gpu", "h100", "--gpus", "1024", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)["default_mappings"]
    assert d["dispatcher"] == "alltoall" and d["flex_num_sms"] is None and "EP 1" in d["dispatcher_note"]


def test_past_the_rack_the_default_dispatcher_is_one_that_runs(capsys):
    """DeepSeek-V3 at EP128 on 512 GB200: the default HybridEP is refused past the 72-rank rack, DeepEP on
    Grace-Blackwell, and the fixes sent a user from one to the other (explain audit); the default is now alltoall,
    which runs, with a warning whose fix is an EP inside the domain."""
    job = ["deepseek-v3", "--gpu", "gb200", "--gpus", "512", "--pp", "4", "--vpp", "4", "--ep", "128",
           "--pipeline-layout", "Et*4|(t*4|)*14tmL", "--gbs", "2048", "--json"]
    assert main(["explain", *job]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["default_mappings"]["dispatcher"] == "alltoall"
    checks = {c["rule"]: c for c in data["checks"]}
    assert not [c for c in checks.values() if c["severity"] == "error"]
    assert checks["scale.ep_outside_rack"]["fix"] == {"model.expert_model_parallel_size": 64}
    assert main(["explain", *job, "--dispatcher", "deepep"]) == 1  # the refused dispatcher: explained, then exit 1
    fix = {c["rule"]: c for c in json.loads(capsys.readouterr().out)["checks"]}["dispatcher.deepep_platform"]["fix"]
    assert fix["model.moe_token_dispatcher_type"] == "alltoall"


def test_explain_names_a_defaulted_global_batch_muon_and_the_time_wall_of_a_run_that_does_not_fit(capsys):
    """The explain audit: a defaulted GBS (4 micro-batches, a 32% bubble) was never stated, Muon was invisible, and a
    run that does not fit named the memory wall alone where estimate names a time wall."""
    job = ["mixtral-8x22b", "--gpu", "b200", "--gpus", "64", "--tp", "2", "--ep", "8", "--pp", "4", "--json"]
    assert main(["estimate", *job]) == 0
    assert "global_batch_size" in json.loads(capsys.readouterr().out)["defaulted"]
    assert main(["explain", *job]) == 0
    said = json.loads(capsys.readouterr().out)["gbs_defaulted"]
    assert "4 micro-batches a step" in said and "Megatron-LM's own default, MBS x DP = 8, runs one" in said
    assert main(["explain", *job, "--gbs", "256"]) == 0
    assert json.loads(capsys.readouterr().out)["gbs_defaulted"] is None
    muon = ["qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--ep", "8", "--optimizer", "muon", "--json"]
    assert main(["explain", *muon]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["optimizer"] == "muon" and "Newton-Schulz" in data["optimizer_note"]
    main(["estimate", *muon])
    wall = json.loads(capsys.readouterr().out)["time"]["dominant_wall"]
    assert data["profile"]["dominant_wall"] == "memory" and f"{wall} would dominate" in data["profile"]["why"]


def test_explain_withdraws_a_fix_that_would_trip_another_rule(capsys):
    """vet_fixes re-derives each fixed config; explain had handed it the run's own derived facts, which pinned the fixed
    config to the run's (EP overlap still off), so no fix was ever withdrawn there (review)."""
    assert main(["explain", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "32", "--ep", "16", "--dispatcher", "alltoall",
                 "--cuda-graph-scope", "attn,moe", "--routing", "force-balance", "--json"]) == 1  # moe_scope_dropless
    found = {c["rule"]: c for c in json.loads(capsys.readouterr().out)["checks"]}
    assert found["ep_overlap.candidate"]["fix"] == {}
    assert found["ep_overlap.candidate"]["fix_withdrawn"] == ["ep_overlap.graph_scope_moe"]


@pytest.mark.parametrize("dispatcher, router, source", [("hybridep", None, "dispatcher"), ("alltoall", None, None),
                                                        ("alltoall", "fp32", "moe_router_dtype"),
                                                        ("hybridep", "fp64", "moe_router_dtype")])
def test_profile_names_the_fc2_bias_pass_of_biased_experts(dispatcher, router, source):
    """gpt-oss adds its experts' fc2 bias outside the GEMM (walls/compute.py expert_bias_seconds): Profile says how
    much of the compute wall it is and whether the router's dtype or the dispatcher made it FP32; a model without
    expert biases has none."""
    knobs = Knobs(precision="bf16", dispatcher=dispatcher, routing="force-balance", moe_router_dtype=router)
    work = Workload(seq_length=4096, micro_batch_size=4, global_batch_size=32)
    e = estimate(load_model("gpt-oss-120b"), load_gpu("b200"), Layout(world_size=8, ep=8), work, knobs)
    bias = explain(e)["profile"]["expert_bias"]
    assert (bias["fp32_probs"], bias["fp32_probs_from"]) == (source is not None, source)
    assert bias["seconds"] == e.time["compute_by_class"]["expert_bias"]
    assert 0 < bias["share_of_compute"] < 1
    plain = estimate(load_model("qwen3-30b-a3b"), load_gpu("b200"), Layout(world_size=8, ep=8), work, knobs)
    assert explain(plain)["profile"]["expert_bias"] is None


def test_a_megatron_fsdp_run_is_offered_the_strategies_its_memory_allows():
    """Under optim_grads_params every layer is gathered twice a micro-batch (layout/dp_sharding.py): where whole
    weights still fit, explain says what keeping them gains; a move onto a strategy the run already has, or from a
    strategy the move does not start from, is never offered (retune_moves.toml from_knobs)."""
    spec, gpu, layout = load_model("qwen3-30b-a3b"), load_gpu("h100"), Layout(world_size=16, ep=8)
    wl = Workload(seq_length=4096, micro_batch_size=1, global_batch_size=256)
    full = estimate(spec, gpu, layout, wl, Knobs(megatron_fsdp="optim_grads_params"))
    rows = {r["rule"]: r for r in explain(full)["retune"]}
    assert rows["megatron_fsdp_whole_weights"]["predicted_gain"] > 0.1
    assert rows["megatron_fsdp_whole_weights"]["change"]["ddp.data_parallel_sharding_strategy"] == "optim_grads"
    assert "megatron_fsdp_shard_everything" not in rows
    ddp = {r["rule"] for r in explain(estimate(spec, gpu, layout, wl, Knobs()))["retune"]}
    assert not any(rule.startswith("megatron_fsdp") for rule in ddp)  # no FSDP move onto a DDP run


def test_a_run_no_layout_and_no_ladder_step_fits_alone_gets_the_two_together():
    """Qwen2-57B-A14B on 8 A100s at EP 8: no layout fits its own knobs, and the ladder down to the optimizer offload
    still needs 91 GiB on its own layout; explain had ended there ('no single move'), though plan finds layouts that
    fit. The ladder's knobs on the smallest model parallelism that takes them are the last step."""
    e = estimate(load_model("qwen2-57b-a14b"), load_gpu("a100"), Layout(world_size=8, ep=8), Workload(seq_length=4096))
    steps = fit_steps(e)
    assert not any(s.get("fits") for s in steps[:-1]) and "peak_gib" in steps[-1]
    assert steps[-1]["step"] == "then the smallest model parallelism that fits"
    assert steps[-1]["peak_gib"] <= e.gpu.capacity_bytes / 2**30 and "PP" in steps[-1]["layout"]


@pytest.mark.parametrize(("ep", "whole"), [(8, False), (16, True)])
def test_scale_says_what_megatron_fsdp_shards_and_what_its_collectives_cost(ep, whole):
    """Scale names the FSDP wrapping the run: what it shards over which ranks, that at EDP 1 the experts stay whole,
    and its per-micro-batch traffic as the step's collectives report it; a run under Megatron's DDP gets no such
    note."""
    spec, gpu = load_model("qwen3-30b-a3b"), load_gpu("h100")
    lay, wl = Layout(world_size=16, ep=ep), Workload(seq_length=4096, micro_batch_size=1, global_batch_size=256)
    e = estimate(spec, gpu, lay, wl, Knobs(megatron_fsdp="optim_grads_params"))
    (note,) = [n for n in explain_scale(e)["notes"] if "Megatron FSDP" in n]
    assert f"over DP x CP 16 (experts over EDP {16 // ep})" in note
    assert ("only the dense part is sharded" in note) is whole
    assert f"{e.time['collectives']['dp_grad_reduce_param_gather']:.2f} s a step" in note
    ddp = estimate(spec, gpu, lay, wl, Knobs())
    assert not [n for n in explain_scale(ddp)["notes"] if "FSDP" in n]


@pytest.mark.parametrize(("model", "gpu", "backend", "recipe", "graphs"), [
    ("qwen3-30b-a3b", "h100", "deepep", "Hopper to FP8 blockwise", "dropless MoE TE-scoped CUDA graphs"),
    ("qwen3-30b-a3b", "gb200", "hybridep", "Blackwell to MXFP8", "dropless MoE TE-scoped CUDA graphs"),
    ("nemotron3-nano-30b-a3b", "b200", "deepep", "Blackwell to MXFP8", "Nemotron-3 Nano recipe"),
    ("qwen3-30b-a3b", "a100", None, "no FP8 Tensor Cores", "eager at bring-up"),
])
def test_each_default_mapping_names_its_rule_and_bridge_fields(model, gpu, backend, recipe, graphs):
    """Each default mapping (dispatcher, FP8 recipe, CUDA-graph scope) with the seed rule it comes from and the
    fields Megatron Bridge sets for it: the scope had none (explain audit), a hybrid's Mamba scope no word at all."""
    e = estimate(load_model(model), load_gpu(gpu), Layout(world_size=8, ep=8), Workload(seq_length=4096))
    d = explain(e)["default_mappings"]
    assert recipe in d["rules"]["fp8_recipe"] and graphs in d["rules"]["cuda_graph_scope"]
    assert d["rules"]["dispatcher"].startswith("seeds/000 First Answer Checklist")
    fields = d["bridge_fields"]
    assert fields["model.moe_token_dispatcher_type"] == ("flex" if backend else "alltoall")
    assert fields.get("model.moe_flex_dispatcher_backend") == backend
    assert fields["model.cuda_graph_impl"] == ("transformer_engine" if d["cuda_graph_scope"] else "none")
    assert fields.get("model.cuda_graph_scope", []) == d["cuda_graph_scope"]
    assert fields.get("mixed_precision.fp8_recipe") == {"h100": "blockwise", "a100": None}.get(gpu, "mxfp8")


def test_retune_lists_the_pipeline_resplit_scale_names():
    """Qwen3-30B on PP 8 with 4 micro-batches, the loss's rank the slowest: Scale named a re-split at +23.0% while
    Retune led with FP8 current scaling at +3.1% (explain audit). The re-split is a Retune row, first, its overrides
    the layout that re-estimated gives its gain."""
    e = estimate(load_model("qwen3-30b-a3b"), load_gpu("h100"), Layout(world_size=64, pp=8, ep=8),
                 Workload(seq_length=4096, global_batch_size=32))
    answer = explain(e)
    top = answer["retune"][0]
    assert top["rule"] == "pipeline_resplit"
    layout = top["change"]["model.pipeline_model_parallel_layout"]
    assert f'--pipeline-layout "{layout}"' in " ".join(answer["scale"]["notes"])
    moved = e.variant(layout=replace(e.layout, pipeline_layout=layout))
    assert moved.fits and top["predicted_gain"] == pytest.approx(
        moved.time["tokens_per_s_per_gpu"] / e.time["tokens_per_s_per_gpu"] - 1) and top["predicted_gain"] > 0.1


def test_retune_lists_the_ep_inside_the_domain_scale_names(capsys):
    """GLM-4.5-Air at 64K on 32 B300, EP 16 across two 8-GPU domains: Scale said EP 8 inside the domain predicts
    +1.3% while Retune led with tp_comm_overlap at +0.9% (explain audit); EP 8 is now a Retune row, first."""
    assert main(["explain", "glm-4.5-air", "--gpu", "b300", "--gpus", "32", "--tp", "2", "--cp", "4", "--ep", "16",
                 "--seq", "65536", "--json"]) == 0
    top = json.loads(capsys.readouterr().out)["retune"][0]
    assert top["rule"] == "ep_inside_nvlink" and top["change"] == {"model.expert_model_parallel_size": 8}
    assert main(["estimate", "glm-4.5-air", "--gpu", "b300", "--gpus", "32", "--tp", "2", "--cp", "4", "--ep", "8",
                 "--seq", "65536", "--json"]) == 0
    assert top["new_tokens_per_s_per_gpu"] == pytest.approx(
        json.loads(capsys.readouterr().out)["time"]["tokens_per_s_per_gpu"])


@pytest.mark.parametrize(("ep", "outer", "inner_edp"), [(8, "no_shard", 2), (16, "no_shard", 1), (8, "optim", 2)])
def test_scale_says_megatron_fsdp_shards_within_each_copy_under_hybrid_sharding(ep, outer, inner_edp):
    """Under Megatron FSDP's hybrid sharding (4 copies) the strategy shards over each copy's DP x CP / 4 and EDP / 4
    ranks (walls/model_state.py inner_divisors), the experts whole where a copy's EDP is 1; outer optim shards the
    optimizer state over all the DP ranks."""
    spec, gpu = load_model("qwen3-30b-a3b"), load_gpu("h100")
    lay, wl = Layout(world_size=64, ep=ep), Workload(seq_length=4096, micro_batch_size=1, global_batch_size=256)
    knobs = Knobs(megatron_fsdp="optim_grads_params", num_distributed_optimizer_instances=4,
                  outer_dp_sharding_strategy=outer)
    (note,) = [n for n in explain_scale(estimate(spec, gpu, lay, wl, knobs))["notes"] if "Megatron FSDP" in n]
    assert f"within each of its 4 copies, over DP x CP / 4 = 16 (experts over EDP / 4 = {inner_edp})" in note
    assert ("only the dense part is sharded" in note) is (inner_edp == 1)
    assert ("optimizer state over all DP x CP 64 (EDP " in note) is (outer == "optim")


@pytest.mark.parametrize(("strategy", "each"), [
    ("optim_grads", "its gradient reduce-scatters run every micro-batch"),
    ("optim_grads_params", "its weight gathers and gradient reduce-scatters run every micro-batch"),
])
def test_scale_names_the_megatron_fsdp_collectives_each_micro_batch_runs(strategy, each):
    """optim_grads gathers its weights once a step (the distributed optimizer's gather): only its reduce-scatters run
    every micro-batch (Knobs.microbatch_gathers, microbatch_reduce_scatters)."""
    spec, gpu = load_model("qwen3-30b-a3b"), load_gpu("h100")
    lay, wl = Layout(world_size=16, ep=8), Workload(seq_length=4096, micro_batch_size=1, global_batch_size=256)
    e = estimate(spec, gpu, lay, wl, Knobs(megatron_fsdp=strategy))
    (note,) = [n for n in explain_scale(e)["notes"] if "Megatron FSDP" in n]
    assert each in note


def test_scale_says_the_megatron_fsdp_figure_holds_its_once_a_step_collectives():
    """Qwen3-30B-A3B 16 H100 EP8 optim_grads, one micro-batch a step: the note's 0.49 s had stood as the gradient
    reduce-scatters' alone, where a third of it (0.16 s) is the weights' gather, which runs once a step."""
    spec, gpu = load_model("qwen3-30b-a3b"), load_gpu("h100")
    lay, wl = Layout(world_size=16, ep=8), Workload(seq_length=4096, micro_batch_size=1, global_batch_size=16)
    e = estimate(spec, gpu, lay, wl, Knobs(megatron_fsdp="optim_grads"))
    (note,) = [n for n in explain_scale(e)["notes"] if "Megatron FSDP" in n]
    dp = e.time["collectives"]["dp_grad_reduce_param_gather"]
    assert f"run every micro-batch beside compute; with what it runs once a step, {dp:.2f} s a step" in note


def test_the_ladder_stops_at_the_first_step_a_wider_layout_takes():
    """Qwen3-30B-A3B on 8 H100 at EP 1: nothing fits its own knobs, nor the ladder on its own layout; the smallest
    model parallelism that fits comes at the first step of the ladder with a layout that takes it, and the steps
    after it are left out (seeds/000 Phase 1: offloading only when recompute and parallelism are still
    insufficient). The ladder had run on to the optimizer offload, then widened: 1,174 tokens/s/GPU."""
    knobs = Knobs(precision="fp8-blockwise", cuda_graph_scope=("attn", "moe_router", "moe_preprocess"))  # Hopper's
    e = estimate(load_model("qwen3-30b-a3b"), load_gpu("h100"), Layout(world_size=8),
                 Workload(seq_length=4096, global_batch_size=64), knobs)
    steps = fit_steps(e)
    assert steps[-1]["step"] == "then the smallest model parallelism that fits"
    assert "optimizer_offload" not in [s["step"] for s in steps] and not any(s.get("fits") for s in steps[:-1])
    assert steps[-1]["peak_gib"] <= e.gpu.capacity_bytes / 2**30
    assert steps[-1]["tokens_per_s_per_gpu"] > 1.5 * 1174

