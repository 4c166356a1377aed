"""check --model: the memory wall feeds the fit rules; their fixes are layouts the estimator says fit."""

import json

import pytest

from moetune.cli.main import main
from moetune.configio.load import load_config
from moetune.planner.estimate import estimate
from moetune.planner.from_config import from_config
from moetune.specs.hardware import load_gpu
from moetune.specs.registry import load_model

BASE = ["--set", "train.global_batch_size=64", "--set", "model.seq_length=4096", "--gpu", "h100", "--gpus", "16",
        "--model", "qwen3-30b-a3b", "--no-mcore", "--json"]


def _findings(capsys, *sets):
    code = main(["check", *[a for s in sets for a in ("--set", s)], *BASE])
    return code, {f["rule"]: f for f in json.loads(capsys.readouterr().out)["findings"]}


def test_not_fitting_config_gets_thesmallest_fitting_layout(capsys):
    code, found = _findings(capsys, "model.expert_model_parallel_size=1")  # 30B params unsharded on 16 GPUs
    assert code == 1 and "fit.does_not_fit" in found
    fix = found["fit.does_not_fit"]["fix"]
    config = load_config(sets=[f"{k}={v}" for k, v in fix.items()] + ["train.global_batch_size=64"],
                         gpu="h100", gpus=16)
    layout, workload, knobs = from_config(config)
    assert estimate(load_model("qwen3-30b-a3b"), load_gpu("h100"), layout, workload, knobs).fits


def test_fitting_config_with_extra_model_parallelism_is_told_to_maximize_dp(capsys):
    code, found = _findings(capsys, "model.expert_model_parallel_size=16", "model.tensor_model_parallel_size=2",
                            "model.expert_tensor_parallel_size=1", "model.sequence_parallel=true")
    assert "fit.does_not_fit" not in found and "scale.maximize_dp" in found
    fix = found["scale.maximize_dp"]["fix"]
    assert fix["model.tensor_model_parallel_size"] == 1
    # and what the step model predicts of it, which plan weighs beside the seeds' order (the B300 audit: check had
    # offered a layout moetune predicts slower without a word)
    config = load_config(sets=[f"{k}={v}" for k, v in fix.items()] + ["train.global_batch_size=64",
                               "model.expert_model_parallel_size=16"], gpu="h100", gpus=16)
    mine = load_config(sets=["train.global_batch_size=64", "model.expert_model_parallel_size=16",
                             "model.tensor_model_parallel_size=2", "model.expert_tensor_parallel_size=1",
                             "model.sequence_parallel=true"], gpu="h100", gpus=16)
    speed = [estimate(load_model("qwen3-30b-a3b"), load_gpu("h100"), *from_config(c)).time["tokens_per_s_per_gpu"]
             for c in (config, mine)]
    assert f"moetune predicts it at {100 * (speed[0] / speed[1] - 1):+.1f}%" in found["scale.maximize_dp"]["message"]


def test_maximize_dp_says_to_measure_only_past_the_least_gain():
    from moetune.planner.memory_facts import less_model_parallel_note

    assert less_model_parallel_note(0.007) == "; moetune predicts it at +0.7% tokens/s/GPU against this one"
    assert "measure before moving" not in less_model_parallel_note(-0.001)
    assert less_model_parallel_note(-0.03).endswith("-3.0% tokens/s/GPU against this one, so the step time ranks "
                                                     "this layout first (plan weighs both): measure before moving")


def test_illegal_layout_is_a_finding_not_a_crash(capsys):
    # ETP 4 x EP 16 over 16 GPUs (given: silent, Bridge's finalize would run ETP 1 under EP > 1)
    code, found = _findings(capsys, "model.expert_model_parallel_size=16", "model.tensor_model_parallel_size=4",
                            "model.expert_tensor_parallel_size=4", "model.sequence_parallel=true")
    assert code == 1 and found["layout.illegal"]["severity"] == "error"
    # one finding for one fault: the config-only rule saying the same of the expert mesh is left out (fuzz audit)
    assert "ETP*EP*PP" in found["layout.illegal"]["message"] and "scale.world_size_experts" not in found


def test_model_architecture_lets_megatron_core_validate_an_overrides_file(capsys):
    """Overrides leave the architecture to the recipe; with --model, check fills it in from the model (never over
    the config's own values) and Megatron-Core's TransformerConfig validates the combination."""
    sets = ["model.expert_model_parallel_size=8", "model.pipeline_model_parallel_size=4",
            "model.cpu_offloading=true", "model.recompute_granularity=selective",  # TransformerConfig refuses it
            "model.recompute_modules=[moe_act]",  # beside PP and beside recompute; no rule of the table says so
            "train.global_batch_size=256", "model.seq_length=4096"]
    args = ["check", *[a for s in sets for a in ("--set", s)], "--gpu", "h100", "--gpus", "64", "--json"]
    main(args)
    alone = {f["rule"] for f in json.loads(capsys.readouterr().out)["findings"]}
    code = main([*args, "--model", "moonlight-16b-a3b"])
    out = json.loads(capsys.readouterr().out)
    rules = {f["rule"]: f for f in out["findings"]}
    assert "mcore.skipped" in alone and "mcore.transformer_config" not in alone
    assert code == 1 and "mcore.skipped" not in rules
    assert "CPU offloading" in rules["mcore.transformer_config"]["message"]  # its first refusal: beside PP 4
    assert out["config"]["model.num_layers"] == 27 and out["config"]["model.multi_latent_attention"] is True
    main([*args, "--model", "moonlight-16b-a3b", "--set", "model.num_layers=36"])  # the config's own value stands
    assert json.loads(capsys.readouterr().out)["config"]["model.num_layers"] == 36


def test_check_with_the_model_advises_a_cp_its_linear_attention_runs(capsys):
    """Qwen3-Next-80B-A3B at 512k, TP2 CP4 on 256 GB200: the 4K guess, weighed by its attention share (12 of 48
    mixers: rules/derive_layers.py attention_facts), is CP16, but its 16 gated delta-net key heads leave 8 a TP2 rank,
    which CP16 cannot split; with --model the rule takes the estimator's CP, 8. (At 128k it holds 4K attention tokens
    a shard at CP4, the target itself.)"""
    code = main(["check", "--set", "model.seq_length=524288", "--set", "model.tensor_model_parallel_size=2",
                 "--set", "model.sequence_parallel=true", "--set", "model.context_parallel_size=4",
                 "--set", "model.pipeline_model_parallel_size=4", "--set", "model.expert_model_parallel_size=64",
                 "--set", "model.expert_tensor_parallel_size=1",
                 "--set", "train.global_batch_size=256", "--set", "train.micro_batch_size=1",
                 "--gpu", "gb200", "--gpus", "256", "--model", "qwen3-next-80b-a3b", "--no-mcore", "--json"])
    found = {f["rule"]: f for f in json.loads(capsys.readouterr().out)["findings"]}
    assert code in (0, 1) and found["longctx.cp_sizing"]["fix"] == {"model.context_parallel_size": 8}


def test_an_offload_on_a_gpu_of_unknown_host_memory_is_flagged_not_passed_silently():
    """B300's host memory is not in the catalog (no source gives the DGX B300's): an optimizer offload there is
    counted as fitting, so the rule table says nobody checked it; on B200 (2 TB a node, checked) it does not."""
    from dataclasses import replace

    from moetune.layout.layout import Layout
    from moetune.layout.validate import Workload
    from moetune.planner.rule_findings import findings

    model, wl = load_model("qwen3-30b-a3b"), Workload(seq_length=4096, global_batch_size=64)
    lay = Layout(world_size=16, ep=16)
    said = {}
    for gpu in ("b300", "b200"):
        base = estimate(model, load_gpu(gpu), lay, wl)
        e = base.variant(knobs=replace(base.knobs, optimizer_offload_fraction=1.0))
        assert e.host_peak_bytes > 0
        said[gpu] = {f.rule: f.message for f in findings(e)}.get("fit.host_memory_unchecked")
        if gpu == "b300":
            assert f"keeps {round(e.host_peak_bytes / 2**30, 1)} GiB a GPU" in said[gpu]
    assert said["b200"] is None


def test_the_smallest_fitting_layout_weighs_each_candidate_under_the_dispatcher_it_would_run(monkeypatch):
    """A defaulted dispatcher follows EP and where its group sits: on 256 GB200 (Slurm segments of 64 ranks) an EP
    group of 128 cannot run HybridEP and defaults to alltoall, one of 32 runs HybridEP. Their memory differs
    (HybridEP's buffers), so each batch of candidates is weighed under its own; the first EP > 1 candidate's had
    served all."""
    from dataclasses import replace

    import moetune.planner.fit_steps as fit_steps
    from moetune.layout.layout import Layout
    from moetune.layout.validate import Workload
    from moetune.planner.defaults import default_dispatcher

    groups, weighed = [], []  # the candidates of each batch, and the dispatcher each batch is weighed under
    real_build, real_memory = fit_steps.build_batch, fit_steps.batch_memory

    def build(model, group):
        groups.append([(lay.ep, lay.etp) for lay, _ in group])
        return real_build(model, group)

    def memory(model, batch, seq, gbs, knobs, overheads, *, arch):
        weighed.append(knobs.dispatcher)
        return real_memory(model, batch, seq, gbs, knobs, overheads, arch=arch)

    monkeypatch.setattr(fit_steps, "build_batch", build)
    monkeypatch.setattr(fit_steps, "batch_memory", memory)
    gpu = load_gpu("gb200")
    e = estimate(load_model("qwen3-235b-a22b"), gpu, Layout(world_size=256, pp=2, ep=32),
                 Workload(seq_length=4096, global_batch_size=1024))
    fit_steps.smallest_fitting_layout(replace(e, defaulted=["dispatcher"]))
    def default(ep, etp=1):
        return default_dispatcher(gpu, Layout(world_size=256, ep=ep, etp=etp))

    assert (default(128), default(32)) == ("alltoall", "hybridep")
    assert {ep for group in groups for ep, _ in group} >= {32, 128}
    for group, dispatcher in zip(groups, weighed, strict=True):
        assert {default(ep, etp) for ep, etp in group} == {dispatcher}


def _past_groups(capsys, seq):
    """Qwen3-30B-A3B (4 KV groups) at TP 8 on 32 H100s, EP 16, core_attn recompute: rule scale.tp_past_kv_groups."""
    sets = ["train.global_batch_size=64", f"model.seq_length={seq}", "model.tensor_model_parallel_size=8",
            "model.sequence_parallel=true", "model.expert_model_parallel_size=16",
            "model.expert_tensor_parallel_size=1", "model.recompute_granularity=selective",
            "model.recompute_modules=[core_attn]"]
    main(["check", *[a for s in sets for a in ("--set", s)], "--gpu", "h100", "--gpus", "32", "--model",
          "qwen3-30b-a3b", "--no-mcore", "--json"])
    found = {f["rule"]: f for f in json.loads(capsys.readouterr().out)["findings"]}
    at_groups = load_config(sets=[s.replace("=8", "=4") for s in sets], gpu="h100", gpus=32)
    return found["scale.tp_past_kv_groups"], estimate(load_model("qwen3-30b-a3b"), load_gpu("h100"),
                                                      *from_config(at_groups))


def test_tp_at_the_kv_groups_is_offered_only_where_it_fits(capsys):
    """The fix (TP = the KV groups) splits activations over fewer ranks: at 4K tokens TP 4 fits and is offered; at 32K
    this TP 8 layout fits but TP 4 does not, so the warning stays, names what TP 4 would need, and offers no fix."""
    short, fixed = _past_groups(capsys, 4096)
    assert fixed.fits and short["fix"] == {"model.tensor_model_parallel_size": 4}
    long, fixed = _past_groups(capsys, 32768)
    assert not fixed.fits and long["fix"] == {}
    assert f"at TP 4 this config would need {fixed.peak_bytes / 2**30:.1f} GiB per rank" in long["message"]


def test_the_platform_dispatcher_is_advised_only_where_its_buffers_fit():
    """Qwen2-57B-A14B on 24 H100s at TP2 PP3 VPP2 EP8 (a plan's pick, within 0.1 GiB of the GPU on alltoall):
    DeepEP's buffers take it past the GPU, and explain said so, while dispatcher.platform_default still advised
    DeepEP (audit). With the memory facts the rule keeps quiet there, and still advises it where it fits."""
    from moetune.layout.knobs import Knobs
    from moetune.layout.layout import Layout
    from moetune.layout.validate import Workload
    from moetune.planner.estimate import estimate
    from moetune.planner.memory_facts import memory_facts
    from moetune.planner.rule_findings import findings
    from moetune.specs.hardware import load_gpu
    from moetune.specs.registry import load_model

    knobs = Knobs(precision="fp8-blockwise", recompute="selective", recompute_modules=frozenset({"layernorm",
                  "moe_act"}), dispatcher="alltoall", cuda_graph_scope=("attn", "moe_router", "moe_preprocess"),
                  ep_overlap=True)
    tight = estimate(load_model("qwen2-57b-a14b"), load_gpu("h100"),
                     Layout(world_size=24, tp=2, pp=3, vpp=2, ep=8, account_for_embedding=True,
                            account_for_loss=True), Workload(seq_length=4096, global_batch_size=960), knobs)
    assert tight.fits and memory_facts(tight)["fits_with_default_dispatcher"] is False
    assert "dispatcher.platform_default" not in {f.rule for f in findings(tight)}
    roomy = estimate(load_model("qwen3-30b-a3b"), load_gpu("h100"), Layout(world_size=32, ep=16),
                     Workload(seq_length=4096), Knobs(dispatcher="alltoall"))
    assert roomy.peak_bytes < 0.9 * roomy.gpu.capacity_bytes
    assert memory_facts(roomy)["fits_with_default_dispatcher"] is True
    assert "dispatcher.platform_default" in {f.rule for f in findings(roomy)}


# Megatron Bridge @067f987 perf_recipes/deepseek/gb300/deepseek_v3.py
# deepseek_v3_pretrain_128gpu_gb300_fp8mx_hsdp_config
# runs Megatron FSDP with ddp.num_distributed_optimizer_instances=4 and outer_dp_sharding_strategy=optim (EP 32, EDP
# 4); the same hybrid sharding on a model that runs here. The fit probe of other layouts took ones the copies do not
# split (EDP 1 at EP 16): the memory wall divided by zero there (a RuntimeWarning on check's stderr, their weights
# sized at nothing).
@pytest.mark.filterwarnings("error::RuntimeWarning")
def test_fit_probe_keeps_to_layouts_the_optimizer_copies_split(capsys):
    from moetune.planner.fit_steps import smallest_fitting_layout

    hsdp = ["ddp.use_megatron_fsdp=true", "ddp.data_parallel_sharding_strategy=optim_grads_params",
            "ddp.num_distributed_optimizer_instances=2", "ddp.outer_dp_sharding_strategy=optim",
            "ddp.use_distributed_optimizer=true", "model.expert_model_parallel_size=8",
            "model.tensor_model_parallel_size=2", "model.sequence_parallel=true"]
    code, found = _findings(capsys, *hsdp)
    assert code == 0 and "fit.does_not_fit" not in found
    config = load_config(sets=hsdp + ["train.global_batch_size=64", "model.seq_length=4096"], gpu="h100", gpus=16)
    e = estimate(load_model("qwen3-30b-a3b"), load_gpu("h100"), *from_config(config))
    smallest = smallest_fitting_layout(e)
    assert smallest is not None and smallest.layout.edp % 2 == 0 and (smallest.layout.dp * smallest.layout.cp) % 2 == 0
