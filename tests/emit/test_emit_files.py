"""The emitted files: valid Python and bash, Megatron names only, the right node count and environment."""

import json
import os
import re
import shutil
import subprocess

import pytest
from emit_plans import PLANS

from moetune.cli.main import main
from moetune.configio import load_config
from moetune.configio.names import PASSTHROUGH, names
from moetune.emit import FILES, emit_all
from moetune.emit.environment import environment


def plan(name, **changes):
    return load_config(sets=[f"{k}={json.dumps(v) if not isinstance(v, str) else v}"
                             for k, v in {**PLANS[name], **changes}.items()])


@pytest.fixture(scope="module")
def dsv3():
    return emit_all(plan("dsv3_gb200_hybridep"))


def test_all_files(dsv3):
    assert set(dsv3) == set(FILES)


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
@pytest.mark.parametrize("fname", ["env.sh", "torchrun.sh", "sbatch.sh"])
def test_shell_scripts_parse(tmp_path, dsv3, fname):
    path = tmp_path / fname
    path.write_text(dsv3[fname])
    assert subprocess.run(["bash", "-n", str(path)], capture_output=True).returncode == 0


def test_env_sh_exports_what_it_says(tmp_path, dsv3):
    (tmp_path / "env.sh").write_text(dsv3["env.sh"])
    env = {k: v for k, v in os.environ.items() if k not in ("NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN",
                                                            "CUDA_DEVICE_MAX_CONNECTIONS", "USE_MNNVL")}
    out = subprocess.run(["bash", "-c", f"source {tmp_path}/env.sh && echo $NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN "
                                        "$CUDA_DEVICE_MAX_CONNECTIONS $USE_MNNVL"],
                         capture_output=True, text=True, env=env).stdout.split()
    assert out == ["64", "32", "1"]


def test_names_are_megatron_names(dsv3):
    # Every `cfg.<section>.<field> =` in the snippet and every dotted override is a Bridge name from the table.
    snippet_names = re.findall(r"cfg\.(\w+)\.(\w+) = ", dsv3["bridge_overrides.py"])
    dotted = [line.split("=", 1)[0] for line in dsv3["overrides.txt"].splitlines()
              if line and not line.startswith(("#", "++env_vars."))]
    for name in [f"{s}.{f}" for s, f in snippet_names] + dotted:
        assert names().get(name) is not None or name.split(".")[0] in PASSTHROUGH, name
    for line in dsv3["megatron_lm_args.txt"].splitlines():
        if line.startswith("--"):
            assert line.split()[0] in names().by_flag, line


@pytest.mark.parametrize(("name", "changes", "nodes", "per_node"), [
    ("dsv3_gb200_hybridep", {}, 64, 4),  # GB200 NVL72: 4 GPUs per compute tray
    ("bringup_h100_alltoall", {}, 1, 8),
    ("bringup_h100_alltoall", {"cluster.num_gpus": 4, "train.global_batch_size": 8}, 1, 4),
    ("longctx_h100_deepep", {}, 1024, 8),
])
def test_node_count(name, changes, nodes, per_node):
    files = emit_all(plan(name, **changes))
    assert f"#SBATCH --nodes={nodes}\n" in files["sbatch.sh"]
    assert f"#SBATCH --gpus-per-node={per_node}\n" in files["sbatch.sh"]
    assert f'NNODES="${{NNODES:-{nodes}}}"' in files["torchrun.sh"]


@pytest.mark.parametrize(("gpu", "sets", "expected"), [
    # Megatron-Bridge scripts/performance/utils/utils.py apply_target_topology_environment: h100 EP32 -> 8,
    # gb200 EP32 -> 32.
    ("h100", {"model.expert_model_parallel_size": 32}, {"NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN": 8,
                                                          "NVLINK_DOMAIN_SIZE": 8, "USE_MNNVL": 0}),
    ("gb200", {"model.expert_model_parallel_size": 32}, {"NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN": 32,
                                                           "NVLINK_DOMAIN_SIZE": 72, "USE_MNNVL": 1}),
])
def test_hybridep_environment(gpu, sets, expected):
    config = load_config(sets=["model.num_moe_experts=64", "model.moe_token_dispatcher_type=flex",
                               "model.moe_flex_dispatcher_backend=hybridep",
                               *[f"{k}={v}" for k, v in sets.items()]], gpu=gpu, gpus=64)
    env = {k: v for k, (v, _) in environment(config).items()}
    assert {k: env[k] for k in expected} == expected
    assert env["CUDA_DEVICE_MAX_CONNECTIONS"] == 32


@pytest.mark.parametrize(("sets", "expected"), [
    (["model.tensor_model_parallel_size=2", "model.sequence_parallel=true"], 1),  # TP overlap on Hopper
    (["model.tensor_model_parallel_size=1"], 8),
    (["env.CUDA_DEVICE_MAX_CONNECTIONS=4"], 4),  # the user's own value stays
])
def test_cuda_device_max_connections(sets, expected):
    env = environment(load_config(sets=sets, gpu="h100", gpus=8))
    assert env["CUDA_DEVICE_MAX_CONNECTIONS"][0] == expected


def test_emit_cli_writes_files(tmp_path, capsys):
    src = tmp_path / "plan.json"
    src.write_text(json.dumps({"config": PLANS["bringup_h100_alltoall"]}))
    out = tmp_path / "out"
    assert main(["emit", str(src), "--out", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == sorted(FILES)
    assert os.access(out / "torchrun.sh", os.X_OK) and os.access(out / "sbatch.sh", os.X_OK)
    capsys.readouterr()
    assert main(["emit", str(src), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert set(data["files"]) == set(FILES) and data["config"]["cluster.num_gpus"] == 8


def test_emit_refuses_rule_errors(tmp_path, capsys):
    args = ["emit", "--set", "model.num_moe_experts=8", "--set", "model.expert_model_parallel_size=2",
            "--set", "comm_overlap.overlap_moe_expert_parallel_comm=true", "--set", "mixed_precision.bf16=true",
            "--set", "model.moe_token_dispatcher_type=allgather", "--gpu", "h100", "--gpus", "8"]
    assert main(args) == 1
    assert "ep_overlap.dispatcher" in capsys.readouterr().err
    assert main([*args, "--allow-errors", "--out", str(tmp_path / "o")]) == 0


def test_emit_needs_the_gpu_count(capsys):
    assert main(["emit", "--set", "model.tensor_model_parallel_size=2"]) == 2
    assert "--gpus" in capsys.readouterr().err


def test_computed_environment_matches_nvidia_gb200_recipe():
    """perf_recipes/deepseek/gb200/deepseek_v3.py writes these four values by hand for EP=64 on GB200."""
    from pathlib import Path

    recipe = load_config([Path(__file__).resolve().parents[1] / "fixtures" / "bridge" /
                          "deepseek_v3_pretrain_256gpu_gb200_bf16.yaml"], gpu="gb200", gpus=256)
    names_ = ("NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN", "NVLINK_DOMAIN_SIZE", "USE_MNNVL",
              "CUDA_DEVICE_MAX_CONNECTIONS")
    without_env = {k: v for k, v in recipe.items() if not k.startswith("env.")}
    computed = {k: v for k, (v, _) in environment(without_env).items()}
    assert {n: computed[n] for n in names_} == {n: recipe[f"env.{n}"] for n in names_}
