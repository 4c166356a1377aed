"""The emitted files: valid Python and bash, Megatron names only, the right node count and environment."""

import contextlib
import io
import json
import os
import re
import shutil
import subprocess

import pytest
from bridge_sections import fields_of
from emit_plans import PLANS

from moetune.cli.main import main
from moetune.configio import load_config
from moetune.configio.names import PASSTHROUGH, names
from moetune.emit import FILES, emit_all
from moetune.emit.environment import environment
from moetune.errors import MoetuneError


def plan(name, **changes):
    return load_config(sets=[f"{k}={json.dumps(v) if not isinstance(v, str) else v}"
                             for k, v in {**PLANS[name], **changes}.items()])


@pytest.fixture(scope="module")
def dsv3():
    return emit_all(plan("dsv3_gb200_hybridep"))


def test_all_files(dsv3):
    assert set(dsv3) == set(FILES)


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
@pytest.mark.parametrize("fname", ["env.sh", "torchrun.sh", "numa_bind.sh", "sbatch.sh"])
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


def test_b300_gets_the_nccl_setting_its_recipes_set():
    """Megatron Bridge's B300 recipes set NCCL_IGNORE_CPU_AFFINITY=1 (its NeMo 26.06 B300 regression fix); B200's
    do not."""
    sets = ["model.num_moe_experts=64", "model.expert_model_parallel_size=8"]
    assert environment(load_config(sets=sets, gpu="b300", gpus=16))["NCCL_IGNORE_CPU_AFFINITY"][0] == 1
    assert "NCCL_IGNORE_CPU_AFFINITY" not in environment(load_config(sets=sets, gpu="b200", gpus=16))


@pytest.mark.parametrize(("value", "why"), [(1, "fine-grained activation offloading with Transformer Engine >= 2.10"),
                                            (0, "given")])
def test_a_planned_env_value_keeps_its_reason(value, why):
    """A planned config carries NVTE_CPU_OFFLOAD_V1 itself (to_config, for check's rule), which env.sh had labelled
    "given" as if the user had set it; a value of the user's own stays theirs."""
    env = environment(load_config(sets=["model.fine_grained_activation_offloading=true",
                                        "model.offload_modules=[core_attn]", f"env.NVTE_CPU_OFFLOAD_V1={value}"],
                                  gpu="h100", gpus=8))
    assert env["NVTE_CPU_OFFLOAD_V1"] == (value, why)


@pytest.mark.parametrize(("sets", "expected"), [
    (["model.tensor_model_parallel_size=2", "model.sequence_parallel=true"], 1),  # TP overlap on Hopper
    (["model.tensor_model_parallel_size=1"], 8),
    (["env.CUDA_DEVICE_MAX_CONNECTIONS=4"], 4),  # the user's own value stays
    # DeepEP at TP2 without EP overlap: 1 still (Bridge's overrides.py sets 1 before the flex backend's 32, and
    # Megatron-LM asserts it; NVIDIA's DeepSeek-V3 H100 HybridEP recipe at TP2 runs with 1)
    (["model.tensor_model_parallel_size=2", "model.sequence_parallel=true", "model.num_moe_experts=64",
      "model.moe_token_dispatcher_type=flex", "model.moe_flex_dispatcher_backend=deepep"], 1),
    (["model.num_moe_experts=64", "model.moe_token_dispatcher_type=flex",
      "model.moe_flex_dispatcher_backend=deepep"], 32),
])
def test_cuda_device_max_connections(sets, expected):
    env = environment(load_config(sets=sets, gpu="h100", gpus=8))
    assert env["CUDA_DEVICE_MAX_CONNECTIONS"][0] == expected


@pytest.mark.parametrize("fsdp", ["dist.use_torch_fsdp2=true", "ddp.use_megatron_fsdp=true"])
def test_neither_fsdp_is_given_one_connection(fsdp):
    """Both FSDPs assert CUDA_DEVICE_MAX_CONNECTIONS != 1 (Megatron-LM arguments.py:622-623 and :687-688
    @core_v0.16.0), and validate_args only warns about TP/CP beside them: TP2 on Hopper keeps CUDA's 8, in env.sh
    and in torchrun.sh's Megatron-LM branch alike."""
    from moetune.emit.launch import mlm_connections
    config = load_config(sets=["model.tensor_model_parallel_size=2", "model.sequence_parallel=true", fsdp,
                               "cluster.launcher=megatron-lm"], gpu="h100", gpus=8)
    assert environment(config)["CUDA_DEVICE_MAX_CONNECTIONS"][0] == 8
    assert mlm_connections(config) == ""


def test_ep_overlap_leaves_layernorm_sms_to_the_all_to_all():
    sets = ["model.num_moe_experts=64", "model.expert_model_parallel_size=8",
            "comm_overlap.overlap_moe_expert_parallel_comm=true"]
    env = environment(load_config(sets=sets, gpu="h100", gpus=8))
    assert env["NVTE_FWD_LAYERNORM_SM_MARGIN"][0] == env["NVTE_BWD_LAYERNORM_SM_MARGIN"][0] == 20
    assert "NVTE_FWD_LAYERNORM_SM_MARGIN" not in environment(load_config(sets=sets[:2], gpu="h100", gpus=8))


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


@pytest.fixture(scope="module")
def planned(tmp_path_factory):
    """Plans of three model shapes, emitted: DeepSeek-V3 (MLA, dense first layers, MTP) on 256 H100, Qwen3-30B-A3B
    (GQA) on 16 H100 and the Nemotron-3 Nano hybrid on 16 H100."""
    out = {}
    for model, gpus, gbs in (("deepseek-v3", "256", "4096"), ("qwen3-30b-a3b", "16", "512"),
                             ("nemotron3-nano-30b-a3b", "16", "512")):
        root = tmp_path_factory.mktemp(model)
        text = io.StringIO()
        with contextlib.redirect_stdout(text):
            assert main(["plan", model, "--gpu", "h100", "--gpus", gpus, "--gbs", gbs, "--top", "1", "--json"]) == 0
        (root / "plan.json").write_text(text.getvalue())
        with contextlib.redirect_stdout(io.StringIO()):
            assert main(["emit", str(root / "plan.json"), "--out", str(root / "run")]) == 0
        out[model] = root / "run"
    return out


def _torchrun_argv(run, tmp_path, extra=""):
    """What torchrun.sh hands torchrun for Megatron-LM: a stub prints its arguments one per line."""
    stub = tmp_path / "bin"
    stub.mkdir(exist_ok=True)
    (stub / "torchrun").write_text('#!/bin/bash\nprintf "%s\\n" "$@"\n')
    (stub / "torchrun").chmod(0o755)
    env = {**os.environ, "PATH": f"{stub}:{os.environ['PATH']}", "ENGINE": "megatron-lm", "EXTRA_ARGS": extra}
    done = subprocess.run(["bash", str(run / "torchrun.sh")], env=env, capture_output=True, text=True, check=True)
    return done.stdout.splitlines()


@pytest.mark.skipif(shutil.which("bash") is None or shutil.which("python3") is None, reason="needs bash, python3")
def test_megatron_lm_launch_builds_the_planned_model(planned, tmp_path):
    """Megatron-LM has no recipe behind it: the arguments carry every parameter shape, the switches its own checks
    ask for (arguments.py: --overlap-param-gather needs --use-distributed-optimizer), and reach torchrun unquoted."""
    argv = _torchrun_argv(planned["deepseek-v3"], tmp_path)
    assert argv[argv.index("--moe-layer-freq") + 1] == "([0]*3+[1]*58)"  # three dense layers, then MoE
    layout = argv[argv.index("--pipeline-model-parallel-layout") + 1]
    assert "'" not in layout and layout.startswith("E") and layout.endswith("mL")
    for flag in ("--use-distributed-optimizer", "--untie-embeddings-and-output-weights", "--multi-latent-attention",
                 "--q-lora-rank", "--kv-lora-rank", "--moe-router-enable-expert-bias", "--swiglu",
                 "--qk-layernorm"):  # MLA's q/kv latent norms
        assert flag in argv, flag
    assert argv[argv.index("--position-embedding-type") + 1] == "rope"
    assert argv[argv.index("--vocab-size") + 1] == "129280"
    if "--overlap-param-gather" in argv:
        assert "--overlap-grad-reduce" in argv
    qwen = _torchrun_argv(planned["qwen3-30b-a3b"], tmp_path)
    assert "--group-query-attention" in qwen and qwen[qwen.index("--num-query-groups") + 1] == "4"
    assert "--qk-layernorm" in qwen and qwen[qwen.index("--kv-channels") + 1] == "128"
    assert argv[argv.index("--max-position-embeddings") + 1] == "4096"  # validate_args requires it
    hybrid = _torchrun_argv(planned["nemotron3-nano-30b-a3b"], tmp_path)
    assert hybrid[hybrid.index("--mamba-num-heads") + 1] == "64"  # Megatron's own default would be 84
    assert any(a.endswith("/pretrain_hybrid.py") for a in hybrid) and any(a.endswith("/pretrain_gpt.py") for a in qwen)


def test_emitted_overrides_keep_the_sequence_and_the_rng_tracker(planned):
    text = (planned["deepseek-v3"] / "overrides.txt").read_text()
    assert "dataset.seq_length=4096" in text and "model.seq_length=4096" in text
    if "model.cuda_graph_impl=transformer_engine" in text:
        assert "model.use_te_rng_tracker=true" in text and "rng.te_rng_tracker=true" in text


def test_gb200_sbatch_asks_for_rack_segments(tmp_path, capsys):
    """256 GB200 in 4-GPU nodes: 64 nodes in segments of 16 (64 GPUs in one NVL72 rack), as moetune placed them."""
    assert main(["plan", "qwen3-30b-a3b", "--gpu", "gb200", "--gpus", "256", "--gbs", "4096", "--top", "1",
                 "--json"]) == 0
    (tmp_path / "p.json").write_text(capsys.readouterr().out)
    assert main(["emit", str(tmp_path / "p.json"), "--out", str(tmp_path / "run")]) == 0
    sbatch = (tmp_path / "run" / "sbatch.sh").read_text()
    assert "#SBATCH --segment=16" in sbatch and "#SBATCH --nodes=64" in sbatch
    assert "--segment" not in emit_all(plan("dsv3_gb200_hybridep", **{"cluster.gpu": "h100"}))["sbatch.sh"]


def test_a_training_length_in_samples_unsets_the_recipes_iterations():
    files = emit_all(plan("dsv3_gb200_hybridep", **{"train.train_samples": 585937500}))
    assert "train.train_samples=585937500" in files["overrides.txt"]
    assert "train.train_iters=null" in files["overrides.txt"]


@pytest.mark.skipif(shutil.which("bash") is None or shutil.which("python3") is None, reason="needs bash, python3")
def test_model_args_reach_megatron_lm_as_a_shell_reads_them(planned, tmp_path):
    """EXTRA_ARGS (the model's MODEL_ARGS) keep their quoting: the ModelZoo writes --moe-layer-freq quoted."""
    argv = _torchrun_argv(planned["qwen3-30b-a3b"], tmp_path, "--rotary-base 1000000 --moe-layer-freq '([1]*48)'")
    assert argv[-4:] == ["--rotary-base", "1000000", "--moe-layer-freq", "([1]*48)"]
    assert "" not in _torchrun_argv(planned["qwen3-30b-a3b"], tmp_path)  # no empty argument without EXTRA_ARGS


@pytest.mark.parametrize(("sets", "present", "absent"), [
    # BF16 gradient reduction has a Megatron-LM switch; without it Megatron-LM accumulates in FP32 (arguments.py)
    (["mixed_precision.grad_reduce_in_fp32=false"], ["--grad-reduce-in-bf16"], []),
    # Megatron-LM asserts --overlap-param-gather for its optimizer-step variant: both go when the first cannot
    (["ddp.overlap_param_gather=true", "ddp.overlap_grad_reduce=false",
      "optimizer.overlap_param_gather_with_optimizer_step=true"], [],
     ["--overlap-param-gather", "--overlap-param-gather-with-optimizer-step"]),
    # Megatron FSDP gathers its own shards: the assert accepts it without the distributed optimizer
    (["ddp.overlap_param_gather=true", "ddp.overlap_grad_reduce=true", "ddp.use_megatron_fsdp=true",
      "ddp.use_distributed_optimizer=false", "optimizer.use_distributed_optimizer=false"],
     ["--overlap-param-gather", "--use-megatron-fsdp"], []),
    # Megatron-LM turns sequence parallelism off at TP=1, then asserts it for TP overlap
    (["comm_overlap.tp_comm_overlap=true"], [], ["--tp-comm-overlap"]),
])
def test_megatron_lm_arguments_hold_what_megatron_lm_accepts(sets, present, absent):
    args = emit_all(load_config(sets=["model.num_moe_experts=64", *sets], gpu="h100", gpus=8))["megatron_lm_args.txt"]
    flags = {line.split()[0] for line in args.splitlines() if line.startswith("--")}
    assert set(present) <= flags and not set(absent) & flags
    read_back = load_config(mlm_args=args, gpu="h100", gpus=8)
    if present == ["--grad-reduce-in-bf16"]:
        assert read_back["mixed_precision.grad_reduce_in_fp32"] is False


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
def test_each_rank_runs_bound_to_its_gpu_s_numa_node(tmp_path, dsv3):
    """numa_bind.sh (torchrun --no-python) binds a rank's CPUs and memory to the NUMA node of its GPU, read from the
    GPU's PCI address (seeds/000 Host overhead: CPU affinity); stubs stand in for nvidia-smi and numactl. Without
    them the command runs unbound, and says so."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text('#!/bin/bash\necho "00000000:DB:00.0"\n')
    (bin_dir / "numactl").write_text('#!/bin/bash\necho numactl "$@"\n')
    for stub in bin_dir.iterdir():
        stub.chmod(0o755)
    script = tmp_path / "numa_bind.sh"
    script.write_text(dsv3["numa_bind.sh"])
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "LOCAL_RANK": "5"}
    devices = tmp_path / "pci"  # sysfs as the script reads it: <domain:bus:device.function>/numa_node
    (devices / "0000:db:00.0").mkdir(parents=True)
    (devices / "0000:db:00.0" / "numa_node").write_text("1\n")
    bound = subprocess.run(["bash", str(script), "echo", "train"], env={**env, "PCI_DEVICES": str(devices)},
                           capture_output=True, text=True)
    assert bound.stdout.strip() == "numactl --cpunodebind=1 --membind=1 echo train"
    unknown = subprocess.run(["bash", str(script), "echo", "train"], env={**env, "PCI_DEVICES": str(tmp_path)},
                             capture_output=True, text=True)
    assert unknown.stdout.strip() == "train" and "unbound" in unknown.stderr
    off = subprocess.run(["bash", str(script), "echo", "train"], env={**env, "NUMA_BIND": "0"}, capture_output=True,
                         text=True)
    assert off.stdout.strip() == "train" and off.stderr == ""
    assert '--no-python "$HERE/numa_bind.sh"' in dsv3["torchrun.sh"]
    # the rank's entry of CUDA_VISIBLE_DEVICES is the GPU asked about (nvidia-smi -i takes an index or a UUID)
    (bin_dir / "nvidia-smi").write_text('#!/bin/bash\n[[ "$*" == *"-i GPU-b"* ]] && echo "00000000:DB:00.0"\n')
    visible = subprocess.run(["bash", str(script), "echo", "train"], capture_output=True, text=True,
                             env={**env, "LOCAL_RANK": "1", "CUDA_VISIBLE_DEVICES": "GPU-a,GPU-b",
                                  "PCI_DEVICES": str(devices)})
    assert visible.stdout.strip() == "numactl --cpunodebind=1 --membind=1 echo train"
    (bin_dir / "nvidia-smi").write_text("#!/bin/bash\nexit 9\n")  # a failing nvidia-smi leaves the rank unbound
    failing = subprocess.run(["bash", str(script), "echo", "train"], env={**env, "PCI_DEVICES": str(devices)},
                             capture_output=True, text=True)
    assert failing.returncode == 0 and failing.stdout.strip() == "train" and "unbound" in failing.stderr


def test_full_iteration_graphs_turn_the_loss_nan_check_off(tmp_path):
    """A captured iteration cannot read the loss on the host: Megatron-LM asserts --no-check-for-nan-in-loss-and-grad
    with full-iteration graphs (arguments.py) and Bridge's perf scripts set rerun_state_machine.check_for_nan_in_loss
    False; the emitted launch does both, and check finds nothing to fix in either."""
    with contextlib.redirect_stdout(io.StringIO()) as text:
        assert main(["estimate", "gpt-oss-120b", "--gpu", "gb200", "--gpus", "64", "--ep", "64", "--mbs", "4",
                     "--gbs", "1280", "--precision", "mxfp8", "--dispatcher", "hybridep", "--cuda-graph-scope",
                     "full_iteration", "--routing", "force-balance", "--json"]) == 0
    (tmp_path / "e.json").write_text(text.getvalue())
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["emit", str(tmp_path / "e.json"), "--benchmark", "--out", str(tmp_path / "run")]) == 0
    assert "rerun_state_machine.check_for_nan_in_loss=false" in (tmp_path / "run" / "overrides.txt").read_text()
    assert "--no-check-for-nan-in-loss-and-grad" in (tmp_path / "run" / "megatron_lm_args.txt").read_text()
    for name in ("overrides.txt", "megatron_lm_args.txt"):
        with contextlib.redirect_stdout(io.StringIO()) as out:
            main(["check", str(tmp_path / "run" / name), "--gpu", "gb200", "--gpus", "64", "--json"])
        assert "cudagraph.full_iteration_nan_check" not in {f["rule"] for f in json.loads(out.getvalue())["findings"]}


def _stand_in_bridge(root):
    """A Megatron Bridge checkout and package in miniature: run_recipe.py loads the recipe through
    recipe_runner.load_recipe (as the real one imports it) and prints what the recipe holds then; the recipe has
    comm_overlap None and mixed_precision a preset name, which dotted overrides cannot reach."""
    training = root / "bridge" / "scripts" / "training"
    training.mkdir(parents=True)
    (root / "bridge" / "scripts" / "common").mkdir()
    fields = {s: fields_of(s) for s in ("model", "train", "ddp", "optimizer", "dataset", "rng", "rerun_state_machine",
                                        "checkpoint", "scheduler", "logger", "comm_overlap", "mixed_precision")}
    (root / "fields.json").write_text(json.dumps(fields))  # each section's fields, as its dataclass holds them
    (training / "recipe_runner.py").write_text(
        f"import json, types\nFIELDS = json.load(open({str(root / 'fields.json')!r}))\n"
        "def section(name, **values):\n"
        "    return types.SimpleNamespace(**{**dict.fromkeys(FIELDS[name]), **values})\n"
        "def load_recipe(name, peft_scheme=None):\n"
        "    return types.SimpleNamespace(comm_overlap=None, mixed_precision='bf16_with_mxfp8_mixed', env_vars={},\n"
        "        **{s: section(s) for s in FIELDS if s not in ('comm_overlap', 'mixed_precision')})\n"
        "def apply_cli_overrides(config, cli_overrides):\n"
        "    config.cli = list(cli_overrides)\n"
        "    return config\n"
        "def bootstrap_recipe_environment(config, *, script_path, argv):\n"
        "    config.reexec = script_path  # the real one re-executes script_path once\n"
        "    return config\n")
    (training / "run_recipe.py").write_text(  # the runner's order: load, (canonical topology), CLI overrides, bootstrap
        "import json, sys\n"
        "from recipe_runner import apply_cli_overrides, bootstrap_recipe_environment, load_recipe\n"
        "cfg = load_recipe(sys.argv[sys.argv.index('--recipe') + 1])\n"
        "canonical = getattr(cfg.model, 'expert_model_parallel_size', None)\n"
        "cfg = apply_cli_overrides(cfg, [a for a in sys.argv[1:] if '=' in a])\n"
        "cfg = bootstrap_recipe_environment(cfg, script_path=__file__, argv=sys.argv[1:])\n"
        "print(json.dumps({'canonical': canonical, 'ep': cfg.model.expert_model_parallel_size,\n"
        "                  'fp8': cfg.mixed_precision.fp8, 'reexec': cfg.reexec, 'cli': cfg.cli,\n"
        "                  'overlap': cfg.comm_overlap.overlap_moe_expert_parallel_comm, 'argv': sys.argv[1:]}))\n")
    package = root / "site" / "megatron" / "bridge"
    for sub in ("", "training", "utils"):
        (package / sub).mkdir(parents=True, exist_ok=True)
        (package / sub / "__init__.py").write_text("")
    (root / "site" / "megatron" / "__init__.py").write_text("")
    (package / "training" / "comm_overlap.py").write_text(
        "from recipe_runner import section\n"
        "def CommOverlapConfig(**values):\n"
        "    return section('comm_overlap', **values)\n")
    (package / "training" / "mixed_precision.py").write_text(
        "from recipe_runner import section\n"
        "PRESETS = {'bf16_mixed': (None, None), 'bf16_with_mxfp8_mixed': ('e4m3', 'mxfp8')}\n"
        "def get_mixed_precision_config(name):\n"
        "    fp8, recipe = PRESETS[name]\n"
        "    return section('mixed_precision', fp8=fp8, fp8_recipe=recipe or 'tensorwise', fp4=None)\n")
    return root / "bridge", root / "site"


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
def test_torchrun_applies_the_plan_to_the_recipe_through_bridges_own_runner(tmp_path):
    """torchrun.sh (ENGINE=bridge) runs run_planned.py, which applies bridge_overrides.py to the recipe inside Bridge's
    run_recipe.py, before its CLI overrides and after it recorded the recipe's canonical topology: a BF16 plan over
    an MXFP8 recipe runs BF16, a recipe with no comm_overlap gets the plan's EP overlap, a benchmark recipe's re-exec
    runs run_planned.py again, and the global batch and precision-aware optimizer are named on the command line so
    the runner's benchmark defaults leave them alone."""
    config = {k: v for k, v in plan("dsv3_gb200_hybridep").items() if k != "mixed_precision.fp8_recipe"}
    config["mixed_precision.fp8"] = None  # a BF16 plan
    out = tmp_path / "out"
    out.mkdir()
    for name, text in emit_all(config).items():
        (out / name).write_text(text)
        (out / name).chmod(0o755)
    bridge, site = _stand_in_bridge(tmp_path)
    fake = tmp_path / "bin"
    fake.mkdir()
    # torchrun stand-in: runs the command once, as LOCAL_RANK 0, after the torchrun options (up to --no-python)
    (fake / "torchrun").write_text('#!/usr/bin/env bash\nwhile [[ "$1" != --no-python ]]; do shift; done; shift\n'
                                   'LOCAL_RANK=0 NUMA_BIND=0 exec "$@"\n')
    (fake / "torchrun").chmod(0o755)
    import sys
    env = {**os.environ, "PATH": f"{fake}:{os.environ['PATH']}", "RECIPE": "deepseek_v3_pretrain_config",
           "BRIDGE_DIR": str(bridge), "PYTHONPATH": str(site), "PYTHON": sys.executable, "EXTRA_ARGS": "train.seed=7"}
    run = subprocess.run(["bash", str(out / "torchrun.sh")], capture_output=True, text=True, env=env, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    got = json.loads(run.stdout.strip().splitlines()[-1])
    assert got["canonical"] is None  # the runner records the recipe's own topology before the plan goes on
    assert got["ep"] == 64 and got["fp8"] is None and got["overlap"] is True
    assert got["reexec"] == str((out / "run_planned.py").resolve())  # a benchmark recipe's re-exec keeps the plan
    assert "train.global_batch_size=4096" in got["cli"]
    assert "train.global_batch_size=4096" in got["argv"] and "train.seed=7" in got["argv"]
    assert any(a.startswith("optimizer.use_precision_aware_optimizer=") for a in got["argv"])


def test_overrides_name_what_a_recipe_would_otherwise_keep():
    """A DeepEP plan with EP overlap over a recipe of other settings (Megatron Bridge recipes set
    moe_hybridep_num_sms=16, Kimi-K2's and GLM-4.5's moe_shared_expert_overlap=True, DeepSeek-V3's H100 recipe BF16
    Adam moments, Kimi-K2's Muon): each would break the launch or run another job, so the overrides write them."""
    from moetune.layout.knobs import Knobs
    from moetune.layout.layout import Layout
    from moetune.layout.validate import Workload
    from moetune.planner.config_map import to_config
    from moetune.planner.estimate import estimate
    from moetune.specs.hardware import load_gpu
    from moetune.specs.registry import load_model
    knobs = Knobs(precision="fp8-blockwise", dispatcher="deepep", flex_num_sms=24, ep_overlap=True,
                  recompute="selective", recompute_modules=frozenset({"moe_act"}), optimizer_offload_fraction=1.0,
                  offload_modules=frozenset({"core_attn"}))
    planned = to_config(estimate(load_model("qwen3-30b-a3b"), load_gpu("h100"), Layout(world_size=16, ep=16),
                                 Workload(seq_length=4096, micro_batch_size=1, global_batch_size=256), knobs,
                                 with_time=False))
    lines = set(emit_all(planned)["overrides.txt"].splitlines())
    assert {"model.moe_deepep_num_sms=24", "model.moe_hybridep_num_sms=null", "model.moe_shared_expert_overlap=false",
            "mixed_precision.fp4=null", "optimizer.optimizer=adam", "optimizer.exp_avg_dtype=float32",
            "optimizer.use_precision_aware_optimizer=true",  # the CPU offload's code path (Megatron-LM asserts it)
            "optimizer.main_grads_dtype=float32",  # DeepSeek-V3's H100 recipe holds BF16 main grads
            "comm_overlap.overlap_grad_reduce=true",  # a recipe's CommOverlapConfig value would override ddp's
            "++env_vars.NVTE_CPU_OFFLOAD_V1=1"} <= lines
    # no activation offload: still a list, which Megatron-Core iterates under paged stashing (recipes hold None)
    bare = to_config(estimate(load_model("qwen3-30b-a3b"), load_gpu("h100"), Layout(world_size=16, ep=16),
                              Workload(seq_length=4096, micro_batch_size=1, global_batch_size=256), Knobs(),
                              with_time=False))
    assert "model.offload_modules=[]" in emit_all(bare)["overrides.txt"].splitlines()
    assert "export NVTE_CPU_OFFLOAD_V1" in emit_all(planned)["env.sh"]


def test_emit_refuses_what_megatron_core_refuses(tmp_path, capsys):
    """A plan pinned to FP8 delayed scaling had kept moe_act recompute, which Megatron-Core's TransformerConfig
    refuses ("Delayed scaling does not support moe_act and layernorm recompute"); the planner no longer offers the
    pair (rule fit.delayed_fp8_recompute) and emit refuses it in a config written by hand."""
    plan_json = tmp_path / "p.json"
    assert main(["plan", "mixtral-8x7b", "--gpu", "h100", "--gpus", "32", "--gbs", "512", "--top", "5",
                 "--fix", "precision=fp8-delayed", "--fix", "dispatcher=alltoall", "--json"]) == 0
    plan_json.write_text(capsys.readouterr().out)
    picks = json.loads(plan_json.read_text())["results"]
    assert not any({"moe_act", "layernorm"} & set(r["knobs"]["recompute_modules"]) for r in picks)
    assert main(["emit", str(plan_json), "--set", "model.recompute_granularity=selective",
                 "--set", "model.recompute_modules=[moe_act]", "--out", str(tmp_path / "o")]) == 1
    assert "fit.delayed_fp8_recompute" in capsys.readouterr().err


def test_megatron_lm_arguments_carry_the_routers_pre_softmax(tmp_path, capsys):
    """DeepSeek-V2-Lite's router (norm_topk_prob false) is --moe-router-pre-softmax; Qwen3-30B-A3B's is not."""
    for model, expected in (("deepseek-v2-lite", True), ("qwen3-30b-a3b", False)):
        saved = tmp_path / f"{model}.json"
        assert main(["estimate", model, "--gpu", "h100", "--gpus", "8", "--ep", "8", "--gbs", "64", "--json"]) == 0
        saved.write_text(capsys.readouterr().out)
        assert main(["emit", str(saved), "--out", str(tmp_path / model)]) == 0
        capsys.readouterr()
        args = (tmp_path / model / "megatron_lm_args.txt").read_text().split("\n")
        assert ("--moe-router-pre-softmax" in args) is expected
        # neither scales its top-k weights: DeepSeek-V2-Lite's routed_scaling_factor is 1.0, Qwen3's absent
        assert not any(a.startswith("--moe-router-topk-scaling-factor") for a in args)


def test_a_full_iteration_hybridep_plan_exports_the_cutedsl_switch():
    """A full-iteration graph on HybridEP writes the TE op fuser (config_map.STATIC_EXPERTS), which Megatron-Core
    core_v0.19.0 on refuses over GLU experts without NVTE_CUTEDSL_FUSED_GROUPED_MLP > 0 (experts.py:398-399; rule
    env.op_fuser_cutedsl): the plan's overrides and env.sh carry it, as Bridge's op-fuser recipes' env_vars do; a
    non-gated model (Nemotron-3-Nano) gets the weighted squared ReLU in its place, and no graph neither."""
    from moetune.layout.knobs import Knobs
    from moetune.layout.layout import Layout
    from moetune.layout.validate import Workload
    from moetune.planner.config_map import to_config
    from moetune.planner.estimate import estimate
    from moetune.specs.hardware import load_gpu
    from moetune.specs.registry import load_model

    def planned(model, scope):
        knobs = Knobs(precision="mxfp8", dispatcher="hybridep", cuda_graph_scope=scope, routing="force-balance")
        return to_config(estimate(load_model(model), load_gpu("gb200"), Layout(world_size=8, ep=8),
                                  Workload(seq_length=4096, micro_batch_size=1, global_batch_size=256), knobs,
                                  with_time=False))

    files = emit_all(planned("qwen3-30b-a3b", ("full_iteration",)))
    assert "++env_vars.NVTE_CUTEDSL_FUSED_GROUPED_MLP=1" in files["overrides.txt"].splitlines()
    assert 'export NVTE_CUTEDSL_FUSED_GROUPED_MLP="${NVTE_CUTEDSL_FUSED_GROUPED_MLP:-1}"' in files["env.sh"]
    nano = planned("nemotron3-nano-30b-a3b", ("full_iteration",))
    assert "env.NVTE_CUTEDSL_FUSED_GROUPED_MLP" not in nano and nano["model.use_fused_weighted_squared_relu"]
    assert "NVTE_CUTEDSL_FUSED_GROUPED_MLP" not in emit_all(planned("qwen3-30b-a3b", ()))["env.sh"]


@pytest.mark.parametrize(("release", "runner", "mode", "env"), [
    (None, "import recipe_runner", True, True), ("0.6.0", "import recipe_runner", True, True),
    ("0.5.1", "omegaconf_utils as omegaconf_utils", False, False),
    ("0.3.1", "omegaconf_utils as omegaconf_utils", True, False),
    ("0.2.0", "sys.exit(", False, False)])
def test_the_bridge_launch_runs_on_the_release_it_targets(release, runner, mode, env, tmp_path):
    """Bridge's scripts/training/recipe_runner.py, ConfigContainer.env_vars and run_recipe.py's --mode arrive in
    v0.6.0 (--mode was in v0.3.x too; run_recipe.py itself in v0.3.0): a launch emitted for v0.4.2 had raised
    ModuleNotFoundError, passed --mode to a parser without it, and set cfg.env_vars on a config that lacks it."""
    from moetune.configio.release_context import reading
    with reading(release, "bridge"):
        files = emit_all(plan("dsv3_gb200_hybridep"))
    assert runner in files["run_planned.py"] and ("--mode pretrain" in files["torchrun.sh"]) is mode
    assert ("env_vars" in files["bridge_overrides.py"]) is env and ("++env_vars." in files["overrides.txt"]) is env
    assert ("exit 2" in files["torchrun.sh"]) is (release == "0.2.0")
    compile(files["run_planned.py"], "run_planned.py", "exec")
    if shutil.which("bash"):
        (tmp_path / "torchrun.sh").write_text(files["torchrun.sh"])
        assert subprocess.run(["bash", "-n", str(tmp_path / "torchrun.sh")], capture_output=True).returncode == 0


def test_emits_launch_code_is_named_not_read_as_a_config(tmp_path, dsv3):
    """check of torchrun.sh had refused --recipe as a Megatron-LM argument, sbatch.sh --nodes, and read
    bridge_overrides.py as bash; each of emit's launch files now says what it is and which file to check."""
    from moetune.configio.load import EMIT_LAUNCHERS
    launch = [name for name in FILES if name in EMIT_LAUNCHERS or name.endswith(".py")]
    assert set(launch) >= {"torchrun.sh", "sbatch.sh", "numa_bind.sh", "bridge_overrides.py", "run_planned.py"}
    for name in launch:
        (tmp_path / name).write_text(dsv3[name])
        with pytest.raises(MoetuneError, match="launch code, not a config; check overrides.txt"):
            load_config([tmp_path / name], gpu="gb200", gpus=256)
