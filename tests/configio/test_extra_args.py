"""Flags an entry point adds on top of Megatron-LM's parser (extra_args_provider: ModelOpt's add_modelopt_args,
Pai-Megatron-Patch's get_patch_args) read as that entry point takes them (configio/extra_args.py)."""

from pathlib import Path

import pytest

from moetune.configio import load_config
from moetune.configio.mlm import parse_mlm
from moetune.errors import MoetuneError
from moetune.rules import evaluate

FIXTURES = Path(__file__).resolve().parent / "fixtures"
GPTOSS = FIXTURES / "mlm_gptoss_02_train.sh"  # pretrain_gpt.py with two ModelOpt flags, ModelOpt left off


def test_gptoss_example_reads_its_modelopt_flags_and_ignores_them():
    config = load_config([GPTOSS], gpu="h100", gpus=8)
    # PP_SIZE=${WORLD_SIZE} (8 GPUs x 1 node), TP_SIZE=1, EP_SIZE=1; --sequence-parallel drops at TP 1 (validate_args)
    assert [config[f"model.{k}_model_parallel_size"] for k in ("pipeline", "tensor", "expert")] == [8, 1, 1]
    assert config["model.sequence_parallel"] is False
    assert config["mixed_precision.fp8"] == "hybrid" and config["mixed_precision.fp8_param_gather"] is True
    assert config["model.recompute_granularity"] == "selective"  # --recompute-activations
    assert config["model.num_layers"] == 12 and config["model.num_moe_experts"] == 4
    assert not any("local_attention" in k or "gpt_oss" in k for k in config)  # read and ignored
    # its 12 layers on PP 8 stop Megatron-LM's validate_args (the layer count divides by the PP size)
    assert "pipeline.layers_divisible" in {f.rule for f in evaluate(config)}


def test_a_flag_that_turns_modelopt_on_is_refused():
    with pytest.raises(MoetuneError, match="--modelopt-enabled turns ModelOpt on .* moetune does not price"):
        load_config(mlm_args="--num-layers 2 --modelopt-enabled")


@pytest.mark.parametrize(("line", "says"), [
    # pretrain_vlm.py passes no add_modelopt_args (Megatron-LM@d98e8a6)
    ("python pretrain_vlm.py --num-layers 2 --enable-gpt-oss", "--enable-gpt-oss is a ModelOpt flag"),
    # a flag no parser adds: the line it always gave
    ("python pretrain_gpt.py --num-layers 2 --enable-gpt-os", "unknown Megatron-LM argument --enable-gpt-os; did you"),
    # Megatron-LM's examples/multimodal/train.py adds a --freeze-LM of its own (as Pai does): a script moetune does
    # not know keeps the unknown-argument line, never "a Pai-Megatron-Patch flag"
    ("python examples/multimodal/train.py --num-layers 2 --freeze-LM", "unknown Megatron-LM argument --freeze-LM; not"),
    ("python other.py --num-layers 2 --export-kd-teacher-load /t", "unknown Megatron-LM argument --export-kd-teacher"),
])
def test_an_extra_flag_the_entry_point_does_not_take_says_whose_it_is(tmp_path, line, says):
    script = tmp_path / "t.sh"
    script.write_text(line + "\n")
    with pytest.raises(MoetuneError, match=says) as err:
        load_config([script])
    assert ("ModelOpt" in str(err.value)) == ("ModelOpt" in says) and "Pai" not in str(err.value)


@pytest.mark.parametrize("entry", ["pretrain_gpt.py", "pretrain_mamba.py", None])  # None: bare arguments
def test_the_entry_points_that_add_modelopt_flags_take_them(tmp_path, entry):
    script = tmp_path / "t.sh"
    script.write_text(f"torchrun {entry or ''} --num-layers 2 --export-force-local-attention --enable-gpt-oss\n")
    assert load_config([script])["model.num_layers"] == 2


PAI_QWEN3 = FIXTURES / "pai_run_mcore_qwen3.sh"  # Pai-Megatron-Patch: the layout in $1 .. $27, Pai's flags on top
# examples/qwen3/README.md's pretraining example (Qwen3-30B-A3B, dlc: NNODES=$WORLD_SIZE, GPUS_PER_NODE from the pod)
PAI_README_ARGS = ("dlc A3B 1 8 1e-5 1e-6 128 128 bf16 4 2 1 1 4 true true true false sel false 100000 "
                   "/mnt/qwen-datasets/mmap_qwen3_datasets_text_document "
                   "/mnt/qwen-datasets/mmap_qwen3_datasets_text_document "
                   "/mnt/qwen-ckpts/Qwen3-30B-A3B-to-mcore 10000 100 /mnt/logs/output_mcore_qwen3_pretrain").split()
PAI_ENV = {"WORLD_SIZE": "4", "RANK": "0", "KUBERNETES_CONTAINER_RESOURCE_GPU": "8", "MASTER_ADDR": "h",
           "MASTER_PORT": "1"}


def test_pai_qwen3_script_reads_with_its_readme_arguments():
    read = {a.key: a.value for a in parse_mlm(PAI_QWEN3.read_text(), str(PAI_QWEN3), PAI_ENV, PAI_README_ARGS)}
    # TP=$10 PP=$11 CP=$12 ETP=$13 EP=$14; SP=true at TP 4; AC=sel; PR=bf16; DO=true
    layout = {k: read[f"model.{k}_parallel_size"] for k in ("tensor_model", "pipeline_model", "context",
                                                             "expert_tensor", "expert_model")}
    assert layout == {"tensor_model": 4, "pipeline_model": 2, "context": 1, "expert_tensor": 1, "expert_model": 4}
    assert read["model.sequence_parallel"] is True and read["model.recompute_granularity"] == "selective"
    assert read["mixed_precision.bf16"] is True and read["ddp.use_distributed_optimizer"] is True
    # the A3B arm: 48 layers, 128 experts, top-8, --moe-layer-freq '([1]*48)'
    assert (read["model.num_layers"], read["model.num_moe_experts"], read["model.moe_router_topk"]) == (48, 128, 8)
    assert read["model.moe_layer_freq"] == [1] * 48
    # $7 SEQ_LEN=128 and $8 PAD_LEN=128 (--max-padding-length, read and ignored); TRAIN_TOKENS / GBS / SEQ_LEN iters
    assert read["model.seq_length"] == 128 and read["train.train_iters"] == 10000 // 8 // 128


def test_pai_cpu_offloading_sets_the_field_megatron_copies_it_to():
    # AC=offload: --cpu-offloading --cpu-offloading-num-layers ${MP_AC_LAYERS}
    args = list(PAI_README_ARGS)
    args[18] = "offload"
    read = {a.key: a.value for a in parse_mlm(PAI_QWEN3.read_text(), str(PAI_QWEN3), PAI_ENV, args)}
    assert read["model.cpu_offloading"] is True and read["model.cpu_offloading_num_layers"] == 1


def test_pai_cpu_offloading_is_a_switch_like_the_rest():
    # store_true in get_patch_args: a value after it is argparse's "unrecognized arguments", not dropped in silence
    with pytest.raises(MoetuneError, match="--cpu-offloading is a switch and takes no value"):
        parse_mlm("python pretrain_qwen.py --cpu-offloading true", "t.sh", {})


@pytest.mark.parametrize(("line", "says"), [
    # Pai's Qwen1.5/Qwen2 TransformerConfigs take these fields from args by name: shared experts moetune would miss
    ("python pretrain_mcore_qwen.py --num-layers 2 --enable-shared-expert --shared-moe-ffn-hidden-size 512",
     "--enable-shared-expert sizes the shared experts of Pai's own .* --moe-shared-expert-intermediate-size"),
    ("python pretrain_qwen.py --num-layers 2 --freeze-LM", "--freeze-LM freezes weights"),
    ("python pretrain_gpt.py --num-layers 2 --patch-tokenizer-type Qwen3Tokenizer",
     "--patch-tokenizer-type is a Pai-Megatron-Patch flag .*, which pretrain_gpt.py does not take"),
])
def test_pai_flags_that_would_price_another_run_are_refused(tmp_path, line, says):
    script = tmp_path / "t.sh"
    script.write_text(line + "\n")
    with pytest.raises(MoetuneError, match=says):
        load_config([script])


def test_pai_qwen3_script_reads_with_no_checkpoint_to_load():
    # $24 PRETRAIN_CHECKPOINT_PATH=none: load_option stays unset, and `${pr_options} ${load_option}` gives --bf16 alone
    args = list(PAI_README_ARGS)
    args[23] = "none"
    read = {a.key: a.value for a in parse_mlm(PAI_QWEN3.read_text(), str(PAI_QWEN3), PAI_ENV, args)}
    assert read["mixed_precision.bf16"] is True and read["model.tensor_model_parallel_size"] == 4


PAI_DSV3 = FIXTURES / "pai_run_mcore_deepseek_v3.sh"  # passes Pai's --qk-nope/rope-head-dim, which nothing reads


def test_pai_deepseek_v3_script_reads_with_its_readme_arguments():
    # examples/deepseek_v3/README.md's pretraining example: dsw A37B, TP8 PP8 CP1 ETP1 EP16, AC=sel, offload 1.0
    args = ("dsw A37B 1 8 1e-5 1e-6 1024 1024 bf16 8 8 1 1 16 true true false false sel 1.0 100000 /d /d /ckpt "
            "1000000000 10000 /out").split()
    read = {a.key: a.value for a in parse_mlm(PAI_DSV3.read_text(), str(PAI_DSV3), PAI_ENV, args)}
    assert (read["model.tensor_model_parallel_size"], read["model.pipeline_model_parallel_size"],
            read["model.expert_model_parallel_size"]) == (8, 8, 16)
    assert read["model.num_moe_experts"] == 256 and read["model.moe_layer_freq"] == [0] * 3 + [1] * 58
    assert read["model.recompute_modules"] == ["mla_up_proj", "mlp", "moe"]  # its megatron_options win over sel
    assert read["optimizer.optimizer_offload_fraction"] == 1.0 and read["model.mtp_num_layers"] == 1
    assert "model.qk_head_dim" not in read  # Megatron-LM's default 128 stands: DeepSeek-V3's, as the script meant


def test_entry_point_table_names_known_providers_and_real_files():
    """data/extra_args_entries.csv: each provider is one configio/extra_args.py names, and each entry point is a file
    of the repository at the commit it cites (checked where the mirror of that repository is on this machine)."""
    import subprocess

    from moetune.configio.extra_args import ENTRIES, PROVIDERS
    from moetune.configio.names import data_csv

    rows = list(data_csv("extra_args_entries.csv"))
    assert len(rows) == len(ENTRIES) == 64 and all(p in PROVIDERS for ps in ENTRIES.values() for p in ps)
    assert ENTRIES["pretrain_gpt.py"] and not ENTRIES["pretrain_bert.py"]  # add_modelopt_args; none
    mirrors = {"Megatron-LM": "NVIDIA+Megatron-LM", "Pai-Megatron-Patch": "alibaba+Pai-Megatron-Patch"}
    for row in rows:
        name, commit = row["repository"].split("@")
        git = Path("/work/.mirror") / mirrors[name] / "repo"
        assert Path(row["path"]).name == row["entry"]
        if not git.exists():
            continue
        found = subprocess.run(["git", "-C", str(git), "cat-file", "-e", f"{commit}:{row['path']}"], check=False)
        assert found.returncode == 0, (row["entry"], row["path"])
