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


def test_an_override_that_splits_a_node_is_refused_in_one_line():
    config = load_config(sets=["cluster.nvlink_domain=12"], gpu="b200", gpus=64)
    divide = r"^cluster.nvlink_domain=12: .*nvlink_domain \(12\) and gpus_per_node \(8\) must divide one another"
    with pytest.raises(MoetuneError, match=divide):
        config_gpu(config)
