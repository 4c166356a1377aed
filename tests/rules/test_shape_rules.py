"""The layout's shape rules (heads and KV groups vs TP, experts vs EP, FFN widths vs TP/ETP) where a config states
the shapes itself: `check` without --model says them as Megatron-Core would refuse them, and with --model (as
layout.illegal) or beside Megatron-Core's own TransformerConfig refusal each fault is said once."""

import json
from dataclasses import replace

import pytest
from rule_cases import FIXTURES

from modelzoo_launch import H100_ENV, MODELZOO
from moetune.cli.main import main
from moetune.configio import load_config
from moetune.layout.knobs import Knobs
from moetune.layout.layout import Layout
from moetune.layout.validate import Workload
from moetune.specs.hardware import load_gpu
from moetune.specs.registry import load_model
from moetune.walls.context_parallel import resolve_auto
from moetune.walls.efficiency import efficiency

QWEN = str(FIXTURES / "qwen3_30b_a3b_pretrain_16gpu_h100_bf16.yaml")  # TP 1, EP 16 on 16 H100s
CLUSTER = ["--gpu", "h100", "--gpus", "16"]
MODEL = ["--model", "qwen3-30b-a3b"]


def findings(args, capsys) -> list[dict]:
    main(["check", *args, "--json"])
    return json.loads(capsys.readouterr().out)["findings"]


def errors(args, capsys) -> dict[str, str]:
    return {f["rule"]: f["message"] for f in findings(args, capsys) if f["severity"] == "error"}


def naming(found: dict[str, str], words: str) -> list[str]:
    return sorted(rule for rule, message in found.items() if words in message)


@pytest.fixture(scope="module")
def qwen():
    return load_config([QWEN])


@pytest.mark.parametrize("mcore", [[], ["--no-mcore"]])
def test_heads_not_divisible_by_tp_are_an_error_without_the_model(qwen, mcore, capsys):
    """With or without Megatron-Core's own validation (optional, and skipped where the config leaves the layer count
    or width to its recipe), the fault is said, once."""
    heads = qwen["model.num_attention_heads"]
    tp = next(t for t in range(2, heads) if heads % t)
    found = errors([QWEN, *CLUSTER, *mcore, "--set", f"model.tensor_model_parallel_size={tp}"], capsys)
    assert naming(found, f"num_attention_heads ({heads})") == ["shape.heads_divisible_by_tp"]


def test_with_the_model_layout_illegal_says_it_and_nothing_else_does(qwen, capsys):
    heads = qwen["model.num_attention_heads"]
    tp = next(t for t in range(2, heads) if heads % t)
    # on 16 x TP GPUs, so that the world size divides and the layout's first fault is the heads'
    found = errors([QWEN, *CLUSTER, *MODEL, "--gpus", str(16 * tp), "--set", f"model.tensor_model_parallel_size={tp}"],
                   capsys)
    assert naming(found, f"num_attention_heads ({heads})") == ["layout.illegal"]


@pytest.mark.parametrize("model", [[], MODEL])
def test_experts_not_divisible_by_ep_are_said_once(qwen, model, capsys):
    experts = qwen["model.num_moe_experts"]
    ep = 3  # on 3 GPUs: the expert mesh covers them, the experts do not split
    assert experts % ep
    found = errors([QWEN, *CLUSTER, *model, "--set", f"model.expert_model_parallel_size={ep}", "--gpus", str(ep)],
                   capsys)
    assert naming(found, f"num_moe_experts ({experts})") == (["layout.illegal"] if model else
                                                              ["scale.experts_divisible"])


def test_tp_a_multiple_of_the_kv_groups_passes_as_megatron_core_runs_it(qwen, capsys):
    """Megatron-Core 0.16 runs TP a multiple of num_query_groups (each rank a share of one KV head), with and
    without --model (whose estimate prices the QKV gather it adds: rule scale.tp_past_kv_groups warns)."""
    groups = qwen["model.num_query_groups"]
    sets = ["--set", f"model.tensor_model_parallel_size={2 * groups}", "--set", "model.sequence_parallel=true"]
    assert not errors([QWEN, *CLUSTER, *sets], capsys)
    assert not errors([QWEN, *CLUSTER, *MODEL, *sets], capsys)


def test_kv_groups_neither_multiple_nor_divisor_of_tp(qwen, capsys):
    heads = qwen["model.num_attention_heads"]
    found = errors([QWEN, *CLUSTER, "--set", "model.tensor_model_parallel_size=2", "--set",
                    "model.sequence_parallel=true", "--set", "model.num_query_groups=3", "--no-mcore"], capsys)
    assert heads % 2 == 0 and list(found) == ["shape.query_groups_vs_tp"]


MLM = ("--num-layers 4 --hidden-size 1024 --num-attention-heads 16 --seq-length 4096 --tensor-model-parallel-size 2 "
       "--disable-bias-linear")


@pytest.mark.parametrize("extra, fires", [
    ("--ffn-hidden-size 1001", True),  # a dense model: every layer's MLP splits 1001 over TP 2
    ("--ffn-hidden-size 1001 --num-experts 8 --moe-ffn-hidden-size 512", False),  # every layer MoE: no dense MLP
    ("--ffn-hidden-size 1001 --num-experts 8 --moe-ffn-hidden-size 512 --moe-layer-freq 2", True),
])
def test_the_dense_ffn_width_counts_where_the_config_builds_dense_layers(extra, fires, capsys):
    found = errors(["--mlm-args", f"{MLM} {extra}", "--gpus", "8", "--no-mcore"], capsys)
    assert ("shape.ffn_divisible_by_tp" in found) is fires


def test_a_bridge_override_of_the_ffn_alone_leaves_the_experts_to_the_recipe(capsys):
    sets = ["--set", "model.ffn_hidden_size=1001", "--set", "model.tensor_model_parallel_size=2"]
    assert "shape.ffn_divisible_by_tp" not in errors([*sets, "--gpus", "8", "--no-mcore"], capsys)


@pytest.mark.parametrize("extra, rule", [
    ("--expert-tensor-parallel-size 2 --moe-ffn-hidden-size 1001", "shape.moe_ffn_divisible_by_etp"),
    ("--moe-ffn-hidden-size 512 --moe-shared-expert-intermediate-size 1001", "shape.shared_expert_divisible_by_tp"),
])
def test_expert_widths_vs_their_tp(extra, rule, capsys):
    args = f"{MLM} --num-experts 8 --expert-model-parallel-size 2 --sequence-parallel {extra}"
    found = errors(["--mlm-args", args, "--gpus", "8", "--no-mcore"], capsys)
    assert rule in found and "1001" in found[rule]


def test_megatron_cores_refusal_of_another_fault_naming_the_same_field_stays(qwen, capsys):
    """60 experts over EP 8 is scale.experts_divisible's fault; Megatron-Core's TransformerConfig checks no expert
    count against EP, and its refusal here ("num_moe_experts (60) should be divisible by moe_router_num_groups (7)")
    is another fault: it had been left out for naming num_moe_experts, so that fault went unsaid."""
    sets = ["model.num_moe_experts=60", "model.expert_model_parallel_size=8", "model.moe_router_group_topk=2",
            "model.moe_router_num_groups=7"]
    found = errors([QWEN, *CLUSTER, *[a for s in sets for a in ("--set", s)]], capsys)
    assert "scale.experts_divisible" in found
    assert "moe_router_num_groups (7)" in found.get("mcore.transformer_config", "")



def test_groups_equal_to_the_heads_are_one_fault_with_them(capsys):
    """Multi-head attention (groups = heads): a TP that does not divide the heads does not divide the groups either,
    and Megatron-Core says the heads; the query-groups rule had said it a second time."""
    sets = ["model.num_attention_heads=24", "model.num_query_groups=24", "model.tensor_model_parallel_size=5",
            "model.sequence_parallel=true"]
    found = errors([QWEN, *CLUSTER, "--gpus", "80", *[a for s in sets for a in ("--set", s)]], capsys)
    assert naming(found, "(24)") == ["shape.heads_divisible_by_tp"]


def test_mla_heads_filled_in_by_the_model_are_one_fault(monkeypatch, capsys):
    """The ModelZoo's DeepSeek-V3 launch at TP 3 with --model: the model fills in MLA's 128 query groups (its heads),
    and layout.illegal says the heads; shape.query_groups_vs_tp had said the same 128 over TP 3 again."""
    for k, v in {**H100_ENV, "TP": "3", "PP": "1"}.items():
        monkeypatch.setenv(k, v)
    found = errors([str(MODELZOO), "--gpu", "h100", "--gpus", "192", "--model", "deepseek-v3"], capsys)
    assert naming(found, "(128)") == ["layout.illegal"]


def test_an_a2a_exchange_past_the_kv_groups_splits_one_group_a_rank(capsys):
    """Past the KV groups a TP rank holds one group, which an a2a CP exchange over 2 ranks cannot split: check refuses
    it as estimate does (it had computed no a2a limit past the groups, and passed)."""
    sets = [a for kv in ("model.num_attention_heads=32", "model.tensor_model_parallel_size=8",
                         "model.sequence_parallel=true", "model.context_parallel_size=2", "model.cp_comm_type=a2a",
                         "model.seq_length=8192") for a in ("--set", kv)]
    assert "cp.a2a_heads" in errors([QWEN, *sets, "--gpus", "16", "--gpu", "h100"], capsys)  # 4 groups over TP 8
    # with --model the layout's own refusal says it, once (it had been said twice: layout.illegal and this rule)
    said = errors([QWEN, *sets, *CLUSTER, *MODEL], capsys)
    assert "layout.illegal" in said and "cp.a2a_heads" not in said
    within = [a if a != "model.tensor_model_parallel_size=8" else "model.tensor_model_parallel_size=2" for a in sets]
    assert "cp.a2a_heads" not in errors([QWEN, *within, "--gpus", "16", "--gpu", "h100"], capsys)  # 2 a rank


def test_an_hcp_a2a_group_past_the_kv_groups_of_a_rank(qwen, capsys):
    """a2a+p2p's a2a group (hierarchical_context_parallel_sizes[0]) splits each TP rank's heads and KV groups as a2a
    does: without --model check had no rule for it and passed a group of 4 over Qwen3's 4 groups at TP 2 (2 a rank),
    which estimate refuses; with --model layout.illegal says it, once. A Megatron-LM launch states it the same way."""
    groups = qwen["model.num_query_groups"]
    cp = [a for kv in ("model.tensor_model_parallel_size=2", "model.sequence_parallel=true",
                       "model.expert_tensor_parallel_size=1", "model.context_parallel_size=8",
                       "model.cp_comm_type=a2a+p2p") for a in ("--set", kv)]
    sizes = [f"model.hierarchical_context_parallel_sizes=[{a},{8 // a}]" for a in (groups, groups // 2)]
    assert "cp.hcp_a2a_heads" in errors([QWEN, *CLUSTER, *cp, "--set", sizes[0]], capsys)
    assert "cp.hcp_a2a_heads" not in errors([QWEN, *CLUSTER, *cp, "--set", sizes[1]], capsys)
    assert list(errors([QWEN, *CLUSTER, *MODEL, *cp, "--set", sizes[0]], capsys)) == ["layout.illegal"]
    # sizes that do not multiply to CP are cp.hcp_sizes's fault alone, though 3 splits no rank's heads either
    assert list(errors([QWEN, *CLUSTER, *cp, "--set", "model.hierarchical_context_parallel_sizes=[3,2]"],
                       capsys)) == ["cp.hcp_sizes"]
    mlm = (f"--num-layers 4 --hidden-size 4096 --num-attention-heads 32 --group-query-attention --num-query-groups "
           f"{groups} --seq-length 8192 --max-position-embeddings 8192 --tensor-model-parallel-size 2 "
           f"--sequence-parallel --context-parallel-size 8 --cp-comm-type a2a+p2p "
           f"--hierarchical-context-parallel-sizes {groups} {8 // groups} --bf16")
    assert list(errors(["--mlm-args", mlm, *CLUSTER], capsys)) == ["cp.hcp_a2a_heads"]


@pytest.mark.parametrize(("gpu", "node"), [("h100", 8), ("gb200", 64)])  # a 64-GPU job's NVLink domain
def test_the_hcp_sizes_fix_keeps_the_a2a_group_inside_nvlink(gpu, node, capsys):
    """cp.hcp_sizes offered the largest a2a group that splits a TP rank's heads, wherever its ranks sat: 64 heads / 16
    KV groups at TP 4 CP 16 got [4, 4] on H100, an all-to-all over 16 ranks, two nodes. It now offers the largest
    inside the job's NVLink domain, as estimate picks (Bridge's HCP guide: a2a on intra-node links), and past it only
    where none fits; the fixed config passes."""
    tp, cp, heads, groups = 4, 16, 64, 16
    sets = [a for kv in (f"model.num_attention_heads={heads}", f"model.num_query_groups={groups}",
                         f"model.tensor_model_parallel_size={tp}", "model.sequence_parallel=true",
                         "model.expert_tensor_parallel_size=1", f"model.context_parallel_size={cp}",
                         "model.cp_comm_type=a2a+p2p", "model.seq_length=131072") for a in ("--set", kv)]
    cluster = ["--gpu", gpu, "--gpus", "64"]
    [fix] = [f["fix"] for f in findings([QWEN, *cluster, *sets], capsys) if f["rule"] == "cp.hcp_sizes"]
    a2a, p2p = fix["model.hierarchical_context_parallel_sizes"]
    splits = [a for a in range(2, cp) if cp % a == 0 and (heads // tp) % a == 0 and (groups // tp) % a == 0]
    assert a2a * p2p == cp and a2a == max(a for a in splits if a * tp <= node)
    assert (a2a * tp <= 8) if gpu == "h100" else a2a == max(splits)  # 4 x TP 4 fits NVL72, not an H100 node
    fixed = ["--set", f"model.hierarchical_context_parallel_sizes=[{a2a},{p2p}]"]
    assert not naming(errors([QWEN, *cluster, *sets, *fixed], capsys), "hierarchical_context_parallel_sizes")


@pytest.mark.parametrize(("groups", "cp"), [(12, 12), (3, 12), (3, 6)])
def test_estimate_picks_the_a2a_group_the_hcp_sizes_fix_offers_at_any_cp(groups, cp, capsys):
    """At a CP that is no power of two estimate tried a2a groups of 2, 4, 8 ... alone, while cp.hcp_sizes offers the
    largest divisor of CP that splits a TP rank's heads inside NVLink: 48 heads / 12 KV groups at CP 12 got 4 from
    estimate and [6, 2] from the rule; 3 groups at CP 12 or 6 were refused (no power of two splits them) where the
    rule offers [3, 4] or [3, 2]. Estimate now picks what the rule offers."""
    heads, world = 48, 2 * cp
    sets = [a for kv in (f"model.num_attention_heads={heads}", f"model.num_query_groups={groups}",
                         "model.context_parallel_size=" + str(cp), "model.cp_comm_type=a2a+p2p",
                         "model.expert_model_parallel_size=2", "model.seq_length=65536") for a in ("--set", kv)]
    [fix] = [f["fix"] for f in findings([QWEN, "--gpu", "h100", "--gpus", str(world), *sets], capsys)
             if f["rule"] == "cp.hcp_sizes"]
    a2a, p2p = fix["model.hierarchical_context_parallel_sizes"]
    # by hand: the largest divisor of CP below it that splits the groups and fits an 8-GPU H100 node at TP 1
    assert a2a == max(a for a in range(2, min(cp, 9)) if cp % a == 0 and groups % a == 0) and a2a * p2p == cp
    spec = replace(load_model("qwen3-30b-a3b"), num_attention_heads=heads, num_query_groups=groups)
    knobs = resolve_auto(spec, Layout(world_size=world, cp=cp, ep=2), Workload(seq_length=65536),
                         Knobs(cp_comm_type="a2a+p2p"), load_gpu("h100"), efficiency("h100"))
    assert knobs.hcp_a2a_size == a2a


@pytest.mark.parametrize(("args", "fires"), [
    # a Megatron-LM launch without --moe-ffn-hidden-size runs its experts at ffn_hidden_size (14336 over ETP 5)
    (["--mlm-args", "--num-experts 8 --ffn-hidden-size 14336 --expert-tensor-parallel-size 5 "
      "--expert-model-parallel-size 2 --bf16"], True),
    # Bridge overrides silent on it leave the experts' width to the recipe: nothing to check
    (["--set", "model.num_moe_experts=8", "--set", "model.ffn_hidden_size=14336", "--set",
      "model.expert_tensor_parallel_size=5", "--set", "model.expert_model_parallel_size=2"], False),
])
def test_the_experts_width_is_the_ffn_where_megatron_lm_takes_it(args, fires, capsys):
    found = errors([*args, "--gpu", "h100", "--gpus", "10"], capsys)
    assert ("shape.moe_ffn_divisible_by_etp" in found) is fires


def test_the_gemm_shape_fix_sets_the_datasets_sequence_length_too(capsys):
    """precision.gemm_shapes offers a sequence length; on a Bridge recipe, whose dataset.seq_length Bridge asserts
    equals the model's, the fix had set model.seq_length alone, tripped model.seq_length_matches_dataset and was
    withdrawn (fix {}). It now sets both, and the fixed config passes."""
    config = {"model.seq_length": 4097, "dataset.seq_length": 4097, "mixed_precision.fp8": "e4m3",
              "mixed_precision.fp8_recipe": "blockwise", "model.moe_router_dtype": "fp32"}

    def sets(values: dict) -> list[str]:
        return [a for k, v in values.items() for a in ("--set", f"{k}={v}")]
    [found] = [f for f in findings([QWEN, *CLUSTER, *sets(config)], capsys) if f["rule"] == "precision.gemm_shapes"]
    fix = found["fix"]
    assert fix.get("model.seq_length") and fix.get("dataset.seq_length") == fix["model.seq_length"] != 4097
    assert not errors([QWEN, *CLUSTER, *sets({**config, **fix})], capsys)


def test_hcp_sizes_offer_sizes_that_run_and_a_ring_of_one_runs(qwen, capsys):
    """cp.hcp_sizes had no fix; it now offers sizes whose a2a group splits each TP rank's KV groups (Qwen3-30B-A3B: 4
    groups at TP 1), which check then passes, with --model too. An a2a group of CP (a p2p ring of one) runs as plain
    a2a in Transformer Engine, so check --model no longer calls [4, 1] at CP 4 illegal where check alone passed it."""
    groups = qwen["model.num_query_groups"]
    cp = [a for kv in (f"model.context_parallel_size={groups}", "model.cp_comm_type=a2a+p2p")
          for a in ("--set", kv)]
    [fix] = [f["fix"] for f in findings([QWEN, *CLUSTER, *cp], capsys) if f["rule"] == "cp.hcp_sizes"]
    sizes = fix["model.hierarchical_context_parallel_sizes"]
    assert sizes[0] * sizes[1] == groups and groups % sizes[0] == 0 and sizes[1] >= 2
    for extra in ([], MODEL):
        assert not errors([QWEN, *CLUSTER, *extra, *cp, "--set", f"model.hierarchical_context_parallel_sizes={sizes}"],
                          capsys)
        assert not errors([QWEN, *CLUSTER, *extra, *cp, "--set",
                           f"model.hierarchical_context_parallel_sizes=[{groups},1]"], capsys)
