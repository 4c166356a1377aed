"""ERNIE-4.5's router as Megatron builds it: HF adds moe_statics.e_score_correction_bias to softmax scores,
Megatron-Core takes an expert bias only beside a sigmoid (or sqrtsoftplus) score (transformer_config.py), and
Megatron Bridge's ernie_45_bridge.py sets sigmoid + moe_router_enable_expert_bias. A plan's overrides go over that
provider, so they must not turn the score back to softmax under the provider's expert bias (Megatron-Core refuses
the pair)."""

import json

from moetune.cli.main import main


def test_plan_overrides_over_bridge_ernie_provider_pass_megatron_core(shared_data, tmp_path, capsys):
    config = str(shared_data / "models" / "ernie-4.5-300b-a47b.config.json")
    plan = tmp_path / "plan.json"
    assert main(["plan", config, "--gpu", "b200", "--gpus", "128", "--gbs", "1024", "--top", "1", "--fix", "tp=2",
                 "--fix", "pp=4", "--fix", "ep=8", "--fix", "etp=1", "--fix", "precision=mxfp8", "--json"]) == 0
    plan.write_text(capsys.readouterr().out)
    assert main(["emit", str(plan), "--out", str(tmp_path / "run")]) == 0
    capsys.readouterr()
    overrides = (tmp_path / "run" / "overrides.txt").read_text()
    assert "model.moe_router_score_function=sigmoid" in overrides
    assert "model.moe_router_enable_expert_bias=true" in overrides
    # the provider's own expert bias under the plan's overrides: Megatron-Core's TransformerConfig accepts the pair
    main(["check", str(tmp_path / "run" / "overrides.txt"), "--set", "model.moe_router_enable_expert_bias=true",
          "--gpu", "b200", "--gpus", "128", "--json"])
    found = json.loads(capsys.readouterr().out)["findings"]
    assert [f["rule"] for f in found if f["severity"] == "error"] == []
