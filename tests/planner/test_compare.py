"""diagnose --plan: predicted vs measured per wall on a real trace; the verdict names the worst wall."""

import json

from moetune.cli.main import main
from moetune.planner.compare import WALLS, compare, measured_walls
from moetune.planner.from_json import estimate_from_json
from moetune.profile.diagnose import diagnose


def test_measured_walls_partition_the_step(shared_data):
    d = diagnose([shared_data / "traces" / "a100_16rank_sendrecv_rank0.json.gz"])
    walls = measured_walls(d)
    assert set(walls) == set(WALLS)
    assert sum(walls.values()) == __import__("pytest").approx(d.step_seconds, rel=1e-9)
    assert walls["communication"] == d.exposed_communication_seconds


def test_verdict_names_the_wall_with_the_largest_error(shared_data, capsys):
    assert main(["estimate", "qwen3-30b-a3b", "--gpu", "a100", "--gpus", "16", "--ep", "16", "--gbs", "256",
                 "--json"]) == 0
    predicted = estimate_from_json(json.loads(capsys.readouterr().out))
    d = diagnose([shared_data / "traces" / "a100_16rank_sendrecv_rank0.json.gz"])
    result = compare(predicted, d)
    errors = {w: abs(v["predicted"] - v["measured"]) for w, v in result["walls"].items()}
    assert result["worst_wall"] == max(errors, key=errors.get)
    assert result["worst_wall"] in result["verdict"]


def test_cli_with_config_tailors_advice_and_compares(shared_data, tmp_path, capsys):
    main(["estimate", "qwen3-30b-a3b", "--gpu", "a100", "--gpus", "16", "--ep", "16", "--gbs", "256", "--json"])
    plan = tmp_path / "plan.json"
    plan.write_text(capsys.readouterr().out)
    trace = str(shared_data / "traces" / "a100_16rank_sendrecv_rank0.json.gz")
    assert main(["diagnose", trace, "--plan", str(plan), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["comparison"]["available"] and set(data["comparison"]["walls"]) == set(WALLS)
    # with the config saying overlap is already on (and shared-expert overlap off), that advice is dropped
    assert main(["diagnose", trace, "--set", "comm_overlap.overlap_moe_expert_parallel_comm=true",
                 "--set", "model.moe_shared_expert_overlap=false",
                 "--set", "model.expert_model_parallel_size=16", "--json"]) == 0
    tailored = json.loads(capsys.readouterr().out)
    assert "comm.ep_overlap" not in {r["rule"] for r in tailored["recommendations"]}
