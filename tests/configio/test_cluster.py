"""The run's GPU as a config states it (configio/cluster.py)."""

import pytest

from moetune.configio import load_config
from moetune.configio.cluster import config_gpu
from moetune.errors import MoetuneError
from moetune.rules import derive


def test_a_configs_own_domain_reaches_the_rules_and_the_estimate_alike():
    """--set cluster.nvlink_domain=72 on B200s: the rules' platform and the estimate's GPU are one machine (check had
    read the override, estimate the catalog's 8-GPU node: they named different default dispatchers)."""
    config = load_config(sets=["cluster.nvlink_domain=72", "model.num_moe_experts=64",
                               "model.expert_model_parallel_size=16"], gpu="b200", gpus=64)
    gpu = config_gpu(config)
    assert (gpu.nvlink_domain, gpu.gpus_per_node) == (72, 8)
    assert derive(config)["recommended_backend"] == "hybridep"  # the NVL72 platform row, as the estimate defaults it
    assert config_gpu(load_config(sets=["model.num_moe_experts=64"], gpu="b200", gpus=64)).nvlink_domain == 8


@pytest.mark.parametrize(("gpu", "sets", "domain"), [
    ("h100", ["cluster.gpus_per_node=4"], 4), ("h100", ["cluster.gpus_per_node=4", "cluster.nvlink_domain=8"], 8),
    ("gb200", ["cluster.gpus_per_node=2"], 72)])
def test_a_configs_smaller_node_of_a_board_gpu_is_its_nvlink_domain(gpu, sets, domain):
    """--set cluster.gpus_per_node=4 on H100s (as emit's partial-node error suggests): HGX NVLink stops at the node,
    where the catalog's 8-GPU domain had stayed and spanned two nodes; a named domain, and NVL72's, stand."""
    config = load_config(sets=[*sets, "model.num_moe_experts=64"], gpu=gpu, gpus=16)
    assert config_gpu(config).nvlink_domain == domain


def test_an_override_that_splits_a_node_is_refused_in_one_line():
    config = load_config(sets=["cluster.nvlink_domain=12"], gpu="b200", gpus=64)
    divide = r"^cluster.nvlink_domain=12: .*nvlink_domain \(12\) and gpus_per_node \(8\) must divide one another"
    with pytest.raises(MoetuneError, match=divide):
        config_gpu(config)


def test_a_files_topology_stays_with_the_gpu_it_names(tmp_path):
    """emit writes cluster.gpus_per_node and nvlink_domain beside cluster.gpu; a GB200 plan's file re-pointed with
    --gpu b200 had priced B200s as a 72-GPU rack (0.81 s a step where B200s take 1.88 s)."""
    emitted = tmp_path / "overrides.txt"
    emitted.write_text("cluster.gpu=gb200\ncluster.gpus_per_node=4\ncluster.nvlink_domain=72\n"
                       "model.num_moe_experts=128\nmodel.expert_model_parallel_size=16\n")
    gpu = config_gpu(load_config([emitted], gpu="b200", gpus=64))
    assert (gpu.key, gpu.nvlink_domain, gpu.gpus_per_node) == ("b200", 8, 8)
    same = config_gpu(load_config([emitted], gpu="gb200", gpus=64))
    assert (same.nvlink_domain, same.gpus_per_node) == (72, 4)


def test_a_saved_estimate_keeps_the_topology_its_config_gave(tmp_path, capsys):
    """`estimate --json` of B200s a config puts in a 72-GPU domain records the GPU's figures (gpu_spec), as it does a
    cluster file's: its name alone had reloaded the catalog's 8-GPU node, and explain --plan read another machine."""
    import json

    from moetune.cli.main import main
    args = ["estimate", "qwen3-30b-a3b", "--gpu", "b200", "--gpus", "64", "--set",
            "model.expert_model_parallel_size=16", "--set", "cluster.nvlink_domain=72", "--json"]
    assert main(args) == 0
    saved = tmp_path / "run.json"
    saved.write_text(capsys.readouterr().out)
    assert json.loads(saved.read_text())["gpu_spec"]["nvlink_domain"] == 72
    assert main(["explain", "--plan", str(saved), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["default_mappings"]["platform"] == "blackwell-nvl72"


def test_a_cluster_file_named_by_another_path_is_the_same_gpu(tmp_path, monkeypatch):
    """emit writes a cluster file's absolute path; --gpu naming the same file relatively is the same GPU, whose
    topology the file's keys keep (they had been dropped as another GPU's)."""
    (tmp_path / "cl").mkdir()
    cluster = tmp_path / "cl" / "b.toml"
    cluster.write_text('gpu = "b200"\n')
    emitted = tmp_path / "overrides.txt"
    emitted.write_text(f"cluster.gpu={cluster}\ncluster.nvlink_domain=72\ncluster.gpus_per_node=4\n"
                       "model.num_moe_experts=64\n")
    monkeypatch.chdir(tmp_path)
    assert config_gpu(load_config([emitted], gpu="cl/b.toml", gpus=64)).nvlink_domain == 72
