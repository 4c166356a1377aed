"""configio/normalize.py: one source's assignments resolved to a config."""

import pytest

from moetune.configio import load_config


@pytest.mark.parametrize(("dist", "expected"), [(True, False), (False, True)])
def test_comm_overlap_dp_settings_apply_only_with_the_distributed_optimizer(dist, expected):
    """Bridge copies comm_overlap's DP overlap onto ddp only with the distributed optimizer (training/comm_overlap.py);
    Kimi-K2's Muon recipes set comm_overlap.overlap_grad_reduce False beside ddp.overlap_grad_reduce True, which had
    been refused as contradictory (check audit). Both switches are given: Bridge turns both on when either is."""
    flag = str(dist).lower()
    config = load_config(sets=["comm_overlap.overlap_grad_reduce=false", "ddp.overlap_grad_reduce=true",
                               f"ddp.use_distributed_optimizer={flag}", f"optimizer.use_distributed_optimizer={flag}"])
    assert config["ddp.overlap_grad_reduce"] is expected


@pytest.mark.parametrize(("optimizer", "expected"), [("adam", False), ("dist_muon", True)])
def test_a_silent_distributed_optimizer_is_the_recipes(optimizer, expected):
    """A switch the config leaves out is its recipe's, as planner/from_config.py reads it: on with Adam's recipes, off
    with Muon's (its OptimizerConfig leaves Megatron's False); it had stopped the load with an error line."""
    config = load_config(sets=["comm_overlap.overlap_grad_reduce=false", "ddp.overlap_grad_reduce=true",
                               f"optimizer.optimizer={optimizer}"])
    assert config["ddp.overlap_grad_reduce"] is expected


def test_a_later_comm_overlap_value_does_not_apply_without_the_distributed_optimizer(tmp_path):
    """The two used to be one name, so an override's comm_overlap value replaced ddp's even where an earlier source
    turned the distributed optimizer off, and Bridge then ignores it."""
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("ddp:\n  use_distributed_optimizer: false\n  overlap_grad_reduce: false\n"
                      "optimizer:\n  use_distributed_optimizer: false\n")
    config = load_config([recipe], sets=["comm_overlap.overlap_grad_reduce=true"])
    assert config["ddp.overlap_grad_reduce"] is False


@pytest.mark.parametrize(("gpus", "expected"), [(16, True), (2, False)])
def test_a_comm_overlap_section_turns_dp_overlap_on_where_dp_exceeds_one(gpus, expected):
    """Bridge's CommOverlapConfig with the distributed optimizer writes its own DP overlap onto ddp: on for DP > 1
    where the section leaves it unset, whatever ddp said (training/comm_overlap.py _get_optimizer_overlap_cfgs)."""
    config = load_config(sets=["comm_overlap.tp_comm_overlap=false", "ddp.use_distributed_optimizer=true",
                               "ddp.overlap_grad_reduce=false", "model.tensor_model_parallel_size=2"], gpus=gpus)
    assert config["ddp.overlap_grad_reduce"] is expected
    assert config["ddp.overlap_param_gather"] is expected


def test_without_a_comm_overlap_section_ddp_stands():
    config = load_config(sets=["ddp.use_distributed_optimizer=true", "ddp.overlap_grad_reduce=false"], gpus=16)
    assert config["ddp.overlap_grad_reduce"] is False


def test_a_saved_estimate_keeps_its_dp_overlap_through_the_comm_overlap_section(tmp_path, capsys):
    """A planned config carries a comm_overlap section, which Bridge lets turn DP overlap on where it leaves it unset:
    an estimate saved with --no-overlap-grad-reduce had read back with the overlap on (so check missed the warning)."""
    from moetune.cli.main import main
    job = ["qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--ep", "8", "--gbs", "512"]
    assert main(["estimate", *job, "--no-overlap-grad-reduce", "--json"]) == 0
    saved = tmp_path / "estimate.json"
    saved.write_text(capsys.readouterr().out)
    main(["check", str(saved), "--json"])
    import json
    assert "overlap.grad_reduce" in {f["rule"] for f in json.loads(capsys.readouterr().out)["findings"]}


def test_bridge_runs_megatron_fsdp_from_the_dist_switch_too(tmp_path):
    """Bridge's ConfigContainer.validate takes dist.use_megatron_fsdp or ddp.use_megatron_fsdp and sets both
    (training/config.py _validate_and_apply_megatron_fsdp_configs @067f987): a recipe naming only dist's had been read
    as Megatron's DDP, so the rules that ask either FSDP stayed silent (env.fsdp_connections here)."""
    from moetune.configio.finalize import fsdp_impl
    from moetune.rules import evaluate
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("dist:\n  use_megatron_fsdp: true\nmodel:\n  num_moe_experts: 64\n")
    config = load_config([recipe], sets=["env.CUDA_DEVICE_MAX_CONNECTIONS=1"], gpu="h100", gpus=8)
    assert config["ddp.use_megatron_fsdp"] is True and fsdp_impl(config) == "Megatron-FSDP"
    assert "env.fsdp_connections" in {f.rule for f in evaluate(config)}
    assert fsdp_impl({"dist.use_megatron_fsdp": True}) == "Megatron-FSDP"
    assert fsdp_impl({"dist.use_megatron_fsdp": False}) == ""
