"""The rule table is well-formed data: every rule cites a seed section that exists, reads only names the
name table knows, and derived facts that are either computed or declared as estimator inputs."""

import re
from pathlib import Path

import pytest
from rule_cases import FIXTURES, RECIPES

from moetune.configio import load_config
from moetune.configio.names import PASSTHROUGH, names
from moetune.errors import MoetuneError
from moetune.files import shipped_text
from moetune.rules import EXTERNAL, derive, evaluate, load_table
from moetune.rules.derive import GIB_FACTS, LONG_CONTEXT_TOKENS
from moetune.rules.table import parse_table

SEEDS = Path(__file__).resolve().parents[2].parent / "shared" / "seeds"
SOURCE = re.compile(r"^seeds/(?P<file>[\w.]+) § (?P<section>.+)$")


def test_table_size_and_severities():
    rules = load_table().rules
    assert len(rules) >= 30
    assert {r.severity for r in rules} == {"error", "warning", "info"}


@pytest.mark.parametrize("rule", load_table().rules, ids=lambda r: r.id)
def test_source_cites_a_seed_section_or_megatron_file(rule):
    m = SOURCE.match(rule.source)
    if m is None:
        assert rule.source.startswith(("Megatron-Bridge ", "Megatron-LM ", "TransformerEngine ")), rule.source
        return
    if not SEEDS.exists():
        pytest.skip("../shared/seeds is not beside the repository")
    text = (SEEDS / m["file"]).read_text()
    for part in m["section"].split(" / "):
        assert part in text, f"{rule.id}: section {part!r} not found in {m['file']}"


def test_every_seed_file_is_cited():
    cited = {SOURCE.match(r.source)["file"] for r in load_table().rules if SOURCE.match(r.source)}
    # 001 is the workflow document again with a Chinese translation; rules cite the English 000.
    assert cited >= {"000_e583184a4efba7e2.txt", "002_9e3c03e3c28f68e6.txt", "003_feaaa641ce5b13e6.txt",
                     "004_54d75aa681ca921d.txt"}


@pytest.mark.parametrize("rule", load_table().rules, ids=lambda r: r.id)
def test_rule_names_are_known(rule):
    for name in rule.names:
        section = name.split(".", 1)[0]
        if section in ("derived", "env") or section in PASSTHROUGH:
            continue
        row = names().get(name)
        assert row is not None, f"{rule.id} reads {name}, which megatron_names.csv does not list"
        assert row.role == "used", f"{name} is read by {rule.id} but marked {row.role!r} in megatron_names.csv"
        assert not row.canonical, f"{rule.id} should read the canonical name {row.canonical}, not {name}"


def test_derived_names_are_computed_or_declared():
    computed = set()
    for name, (gpu, gpus) in RECIPES.items():
        computed |= set(derive(load_config([FIXTURES / name], gpu=gpu, gpus=gpus)))
    computed |= set(derive(load_config(sets=["mixed_precision.bf16=true"], gpu="h100", gpus=8)))
    # the linear mixers' head counts exist only where a config builds them: a Mamba hybrid, a gated delta-net model
    computed |= set(derive(load_config(sets=["model.hybrid_layer_pattern=M*E", "model.hidden_size=2688",
                                             "model.experimental_attention_variant=gated_delta_net"])))
    # a2a+p2p's a2a-group facts exist only where the config states its sizes and the heads and KV groups they split
    computed |= set(derive(load_config(sets=["model.num_attention_heads=32", "model.num_query_groups=4",
                                             "model.context_parallel_size=4", "model.cp_comm_type=a2a+p2p",
                                             "model.hierarchical_context_parallel_sizes=[2,2]"])))
    # the GEMM-shape facts exist where a config states its FP8/FP4 recipe, sequence and micro-batch (a refused one)
    computed |= set(derive(load_config(sets=["mixed_precision.fp8=e4m3", "model.seq_length=4097",
                                             "train.micro_batch_size=1"])))
    referenced = {n.split(".", 1)[1] for r in load_table().rules for n in r.names if n.startswith("derived.")}
    unknown = referenced - computed - set(EXTERNAL) - {k.replace("_bytes", "_gib") for k in GIB_FACTS}
    assert not unknown


@pytest.mark.parametrize(("text", "needle"), [
    ("rules: [{id: a.b, severity: fatal, when: 'True', message: m, source: s}]", "severity"),
    ("rules: [{id: Bad, severity: error, when: 'True', message: m, source: s}]", "area.what"),
    ("rules: [{id: a.b, severity: error, message: m, source: s}]", "missing when"),
    ("rules: [{id: a.b, severity: error, when: 'True', message: m, source: s},"
     " {id: a.b, severity: error, when: 'True', message: m, source: s}]", "duplicate"),
    ("rules: [{id: a.b, severity: error, when: 'open(1)', message: m, source: s}]", "not allowed"),
    ("rules: [{id: a.b, severity: error, when: 'True', message: m, source: s, contexts: [lint]}]", "contexts"),
    ("rules: [{id: a.b, severity: error, severity_mlm: mild, when: 'True', message: m, source: s}]", "severity_mlm"),
    # covers: rows of the release tables (a misspelt value would leave check.not_in_release saying it), on an error
    ("rules: [{id: a.b, severity: error, when: 'True', message: m, source: s, covers: [optimizer.optimizer=muonn]}]",
     "no release table has: optimizer.optimizer=muonn"),
    ("rules: [{id: a.b, severity: warning, when: 'True', message: m, source: s, covers: [optimizer.optimizer=muon]}]",
     "covers needs severity error"),
    ("rules: [{id: a.b, severity: error, severity_mlm: warning, when: 'True', message: m, source: s, "
     "covers: [optimizer.optimizer=muon]}]", "covers needs severity error"),
])
def test_malformed_tables_are_rejected(text, needle):
    with pytest.raises(MoetuneError, match=needle):
        parse_table(text)


def test_the_shipped_table_parses_in_full():
    """load_table leaves each expression to be parsed when first asked, and the `covers` rows unlooked-up: parsed in
    full (every expression, every row), the shipped table is the same table, and a malformed rule fails here."""
    full, lazy = parse_table(shipped_text("rules.yaml")), load_table()
    assert [(r.id, r.when.source, r.message, r.names, r.covers) for r in full.rules] == [
        (r.id, r.when.source, r.message, r.names, r.covers) for r in lazy.rules]


def test_a_table_read_lazily_says_a_malformed_expression_when_it_is_asked():
    text = ("rules: [{id: a.b, severity: error, when: 'model.a > 1', message: 'a is {model.a ** 2}', source: s, "
            "fix: {model.b: '=open(1)'}, covers: [optimizer.optimizer=muonn]}]")
    with pytest.raises(MoetuneError, match="Pow is not allowed"):
        parse_table(text)
    rule = parse_table(text, full=False).rules[0]
    assert rule.when.names == {"model.a"}
    with pytest.raises(MoetuneError, match="Pow is not allowed"):
        _ = rule.names
    with pytest.raises(MoetuneError, match="function 'open' is not allowed"):
        _ = rule.steps[0].fix["model.b"].names


def test_docs_list_every_rule():
    docs = (Path(__file__).resolve().parents[2] / "docs" / "rules.md").read_text()
    missing = [r.id for r in load_table().rules if f"`{r.id}`" not in docs]
    assert missing == []


def test_a_check_only_bridge_makes_is_a_warning_under_megatron_lm():
    """DeepEP on GB200: Bridge's validate_flex_dispatcher_backend raises; Megatron-LM runs it (seeds/004 names DeepEP a
    familiar tuned path there), so the same config is an error for a Bridge launch and a warning for Megatron-LM's."""
    from moetune.rules import evaluate
    base = ["model.num_moe_experts=64", "model.moe_token_dispatcher_type=flex",
            "model.moe_flex_dispatcher_backend=deepep", "model.expert_model_parallel_size=8"]
    def severity(extra):
        config = load_config(sets=base + extra, gpu="gb200", gpus=8)
        return next(f.severity for f in evaluate(config) if f.rule == "dispatcher.deepep_platform")
    assert severity([]) == "error"
    assert severity(["cluster.launcher=megatron-lm"]) == "warning"


def test_selective_recompute_with_no_modules_recomputes_core_attention():
    """Megatron-Core's recompute_modules default is ["core_attn"] (transformer_config.py __post_init__), so selective
    recompute with no modules named is SDPA recompute, which seeds/002 warns against at very long context."""
    from moetune.rules import evaluate
    sets = ["model.num_moe_experts=64", "model.moe_grouped_gemm=true", "model.recompute_granularity=selective",
            "model.seq_length=65536", "dataset.seq_length=65536", "model.context_parallel_size=16"]
    fired = {f.rule: f for f in evaluate(load_config(sets=sets, gpu="h100", gpus=64))}
    assert "core_attn" not in fired["longctx.sdpa_recompute"].fix["model.recompute_modules"]


@pytest.mark.parametrize("seq", [LONG_CONTEXT_TOKENS - 2, LONG_CONTEXT_TOKENS])
def test_sdpa_recompute_takes_over_from_fused_attention_at_one_cutoff(seq):
    """Below seeds/002's very long context core_attn recompute is fit.core_attn_fused_attention's warning, from it on
    longctx.sdpa_recompute's (as is the NVL72 TP lever): one fact, derived.long_context_tokens, for all three."""
    sets = ["model.num_moe_experts=64", "model.moe_grouped_gemm=true", "model.recompute_granularity=selective",
            "model.recompute_modules=[core_attn]", f"model.seq_length={seq}", f"dataset.seq_length={seq}",
            "model.context_parallel_size=16"]
    config = load_config(sets=sets, gpu="gb200", gpus=64)
    fired = {f.rule for f in evaluate(config)}
    long = seq >= derive(config)["long_context_tokens"]
    assert ("longctx.sdpa_recompute" in fired, "longctx.tp_lever_nvl72" in fired) == (long, long)
    assert ("fit.core_attn_fused_attention" in fired) == (not long)
    assert [r.id for r in load_table().rules if "derived.long_context_tokens" in r.when.source] == [
        "longctx.sdpa_recompute", "fit.core_attn_fused_attention", "longctx.tp_lever_nvl72"]
@pytest.mark.parametrize("grouped_gemm", ["true", "false"])
def test_core_attn_under_fused_attention_names_the_modules_its_fix_sets(grouped_gemm):
    """The message recommends derived.first_selective_modules, the set the fix writes (moe_act needs grouped GEMMs),
    rather than restating how that set is chosen."""
    sets = ["model.num_moe_experts=64", f"model.moe_grouped_gemm={grouped_gemm}",
            "model.recompute_granularity=selective", "model.recompute_modules=[core_attn]"]
    config = load_config(sets=sets, gpu="h100", gpus=8)
    fired = {f.rule: f for f in evaluate(config)}["fit.core_attn_fused_attention"]
    modules = fired.fix["model.recompute_modules"]
    assert modules == derive(config)["first_selective_modules"] and ("moe_act" in modules) == (grouped_gemm == "true")
    assert f"Recompute {' and '.join(modules)} instead." in fired.message and "[" not in fired.message


@pytest.mark.parametrize("launcher, fires", [("bridge", False), ("megatron-lm", True)])
def test_bias_rules_leave_a_bridge_recipe_s_bias_to_the_recipe(launcher, fires):
    """An overrides file that does not set add_bias_linear leaves it to the recipe's provider (False for most MoE
    bridges): no bias error then; Megatron-LM's own default (bias on) applies to its arguments."""
    from moetune.rules import evaluate
    sets = ["model.num_moe_experts=64", "model.expert_model_parallel_size=4", "model.expert_tensor_parallel_size=2",
            f"cluster.launcher={launcher}"]
    found = {f.rule for f in evaluate(load_config(sets=sets, gpu="h100", gpus=8))}
    assert ("scale.moe_bias_needs_etp1" in found) == fires


@pytest.mark.parametrize("bias, cause", [
    # a Megatron-LM launch that never passes --disable-bias-linear: TransformerConfig.add_bias_linear defaults to True
    # (Megatron-LM transformer_config.py @ d98e8a6); the message had blamed gpt-oss for it
    (None, "add_bias_linear=True, Megatron-LM's default, which the launch keeps by not passing --disable-bias-linear"),
    ("true", "model.add_bias_linear=true (set by the config, or by the model"),
])
def test_the_moe_bias_error_names_the_setting_that_gives_the_experts_a_bias(bias, cause):
    from moetune.rules import evaluate
    sets = ["model.num_moe_experts=64", "model.expert_model_parallel_size=4", "model.expert_tensor_parallel_size=2",
            "cluster.launcher=megatron-lm", *([f"model.add_bias_linear={bias}"] if bias else [])]
    (message,) = [f.message for f in evaluate(load_config(sets=sets, gpu="h100", gpus=8))
                  if f.rule == "scale.moe_bias_needs_etp1"]
    assert cause in message and "only at ETP 1" in message
    assert ("or pass --disable-bias-linear" in message) == (bias is None)  # a config's own bias is its choice


@pytest.mark.parametrize("rule, sets", [
    ("overlap.tp_comm_needs_sp", ["comm_overlap.tp_comm_overlap=true"]),
    ("env.cuda_device_max_connections", ["model.tensor_model_parallel_size=2", "model.sequence_parallel=true",
                                         "model.moe_token_dispatcher_type=flex",
                                         "model.moe_flex_dispatcher_backend=deepep",
                                         "env.CUDA_DEVICE_MAX_CONNECTIONS=32"]),
])
def test_what_bridge_tolerates_megatron_lm_asserts(rule, sets):
    """Bridge turns tp_comm_overlap off without SP and its perf scripts only set the connections; Megatron-LM's
    validate_args refuses both (arguments.py): one rule, a warning for a Bridge launch, an error for Megatron-LM's."""
    from moetune.rules import evaluate
    base = ["model.num_moe_experts=64", "model.expert_model_parallel_size=8", *sets]
    def severity(launcher):
        config = load_config(sets=base + [f"cluster.launcher={launcher}"], gpu="h100", gpus=8)
        return next(f.severity for f in evaluate(config) if f.rule == rule)
    assert (severity("bridge"), severity("megatron-lm")) == ("warning", "error")


@pytest.mark.parametrize("fsdp", ["dist.use_torch_fsdp2=true", "ddp.use_megatron_fsdp=true"])
@pytest.mark.parametrize(("connections", "fired"), [(8, set()), (1, {"env.fsdp_connections"})])
def test_either_fsdp_wants_more_than_one_connection_at_tp2(fsdp, connections, fired):
    """Megatron-LM asks TP/CP > 1 before Blackwell for one connection except beside an FSDP (validate_args only
    warns there, arguments.py:930-937 @core_v0.16.0) and both FSDPs assert more than one (:622-623, :687-688)."""
    from moetune.rules import evaluate
    sets = ["model.num_moe_experts=64", "model.tensor_model_parallel_size=2", "model.sequence_parallel=true", fsdp,
            "cluster.launcher=megatron-lm", f"env.CUDA_DEVICE_MAX_CONNECTIONS={connections}"]
    found = {f.rule for f in evaluate(load_config(sets=sets, gpu="h100", gpus=8))}
    assert found & {"env.fsdp_connections", "env.cuda_device_max_connections"} == fired


MUON_OVERLAP = {"optimizer.muon_dp_overlap_needs_mcore_018", "optimizer.dist_muon_dp_overlap_needs_mcore_017"}


@pytest.mark.parametrize(("args", "fired"), [
    ("--optimizer muon --overlap-grad-reduce", {"optimizer.muon_dp_overlap_needs_mcore_018"}),
    ("--optimizer dist_muon --overlap-grad-reduce --overlap-param-gather",
     {"optimizer.dist_muon_dp_overlap_needs_mcore_017"}),
    ("--optimizer dist_muon", set()),
    ("--optimizer adam --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather", set()),
])
def test_megatron_lm_refused_muon_with_dp_overlap_before_core_v0_18(args, fired):
    """validate_args' Muon check: core_v0.16.0 asserts neither overlap flag for any Muon (arguments.py:1181-1182),
    core_v0.17.0 for plain muon (:1479-1480), core_v0.18.0 for none; the warnings name the release that accepts it."""
    from moetune.rules import evaluate
    config = load_config(mlm_args=f"--num-experts 64 --bf16 {args}", gpu="h100", gpus=8)
    assert {f.rule for f in evaluate(config)} & MUON_OVERLAP == fired


def test_bridge_runs_muon_with_dp_overlap_unchecked():
    """Bridge runs none of validate_args' asserts (Kimi-K2's Muon recipes overlap the gradient reduce)."""
    from moetune.rules import evaluate
    config = load_config(sets=["model.num_moe_experts=64", "optimizer.optimizer=muon", "ddp.overlap_grad_reduce=true"],
                         gpu="h100", gpus=8)
    assert not {f.rule for f in evaluate(config)} & MUON_OVERLAP


@pytest.mark.parametrize("fsdp", ["--use-torch-fsdp2", "--use-megatron-fsdp"])
@pytest.mark.parametrize(("optimizer", "fires"), [("muon", True), ("dist_muon", True), ("adam", False),
                                                   ("sgd", False), ("lion", True), ("soap", True)])
def test_megatron_lm_refuses_muon_under_either_fsdp(fsdp, optimizer, fires):
    """validate_args: "Emerging optimizer does not support Torch-FSDP2 / Megatron-FSDP for now", every optimizer but
    Adam and SGD (arguments.py:1559-1573 @core_v0.18.2; Muon alone at :1185-1186 @core_v0.16.0), read from
    Megatron-LM's own arguments (lion and soap had passed check)."""
    from moetune.rules import evaluate
    config = load_config(mlm_args=f"--num-experts 64 --bf16 {fsdp} --optimizer {optimizer}", gpu="h100", gpus=8)
    assert ("fsdp.muon" in {f.rule for f in evaluate(config)}) == fires


def test_the_muon_fsdp_fix_clears_megatron_fsdp_turned_on_from_dist():
    """Megatron FSDP turned on by dist.use_megatron_fsdp alone (Bridge takes it as ddp's, finalize.megatron_fsdp):
    fsdp.muon's fix turns that switch off too, where it had cleared only ddp's and left the error standing."""
    from moetune.rules import evaluate
    base = load_config(mlm_args="--num-experts 64 --bf16 --optimizer dist_muon", gpu="h100", gpus=8)
    config = {**base, "dist.use_megatron_fsdp": True}
    (found,) = [f for f in evaluate(config) if f.rule == "fsdp.muon"]
    assert "fsdp.muon" not in {f.rule for f in evaluate({**config, **found.fix})}


@pytest.mark.parametrize(("args", "fix"), [
    ("", {"ddp.use_distributed_optimizer": True}),
    ("--use-megatron-fsdp", None),  # Megatron FSDP gathers its own shards: the assert accepts it
    ("--optimizer dist_muon", None),  # accepted from core_v0.17.0 (arguments.py:856-859)
    # torch FSDP2 refuses the distributed optimizer (fsdp.torch_fsdp2_distributed_optimizer): the switch goes
    ("--use-torch-fsdp2", {"ddp.overlap_param_gather": False}),
])
def test_overlap_param_gather_needs_what_megatron_lm_asserts(args, fix):
    """validate_args: '--overlap-param-gather only supported with distributed optimizer, megatron fsdp, or dist_muon'
    (megatron/training/arguments.py:1003-1006 @core_v0.18.2)."""
    from moetune.rules import evaluate
    config = load_config(mlm_args=f"--num-experts 64 --bf16 --overlap-grad-reduce --overlap-param-gather {args}",
                         gpu="h100", gpus=8)
    found = {f.rule: f for f in evaluate(config)}
    finding = found.get("overlap.param_gather_needs_dist_opt")
    assert (finding.fix if finding else None) == fix


@pytest.mark.parametrize(("sets", "target"), [
    (("model.seq_length=131072",), 32),  # the 4K guess at TP1
    # attention sinks: a2a alone, whose head split stops at the 8 KV groups
    (("model.seq_length=131072", "model.num_attention_heads=64", "model.num_query_groups=8",
      "model.softmax_type=learnable"), 8),
    # TP4 with sequence parallelism: 2 x CP32 divides 1,000,000, but TP4 does not divide its 31,250 tokens a CP rank
    (("model.seq_length=1000000", "model.tensor_model_parallel_size=4", "model.sequence_parallel=true"), 16),
])
def test_the_cp_a_config_is_advised_runs_by_its_own_fields(sets, target):
    config = load_config(sets=("model.num_moe_experts=64", *sets), gpu="gb200", gpus=256)
    facts = derive(config)
    assert facts["cp_shard_target"] == target and facts["cp_undersharded"]
    fired = {f.rule: f for f in evaluate(config)}["longctx.cp_sizing"]
    # with sinks, over a2a, the one exchange they run (the config at CP 1 holds Megatron's p2p): without it the fix
    # had been withdrawn for cp.sinks_need_a2a, gpt-oss's long-context advice left empty
    sinks = {"model.cp_comm_type": "a2a"} if "model.softmax_type=learnable" in sets else {}
    assert fired.fix == {"model.context_parallel_size": target, **sinks}
    assert f"power of two Megatron runs here is CP={target}." in fired.message


def test_no_cp_is_advised_where_sinks_past_the_kv_groups_run_none():
    """gpt-oss's shape at 256k on TP 16, past its 8 KV groups: a rank holds one group, so its sinks' a2a runs no CP
    over 1 (estimate refuses --cp 2 there); the rule had read the groups over TP as no limit and asked for CP 4."""
    config = load_config(sets=("model.num_moe_experts=64", "model.seq_length=262144", "model.num_attention_heads=64",
                               "model.num_query_groups=8", "model.softmax_type=learnable",
                               "model.tensor_model_parallel_size=16", "model.sequence_parallel=true"),
                         gpu="gb200", gpus=256)
    facts = derive(config)
    assert facts["cp_shard_target"] == 1 and not facts["cp_undersharded"]
    assert "longctx.cp_sizing" not in {f.rule for f in evaluate(config)}
