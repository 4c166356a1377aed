"""Derived facts about the cluster a config runs on: the data-parallel sizes and micro-batches of its world, its
nodes, and the TP and EP groups that leave the job's NVLink domain. Read by rules/derive.py, which assembles every
``derived.*`` fact."""

from __future__ import annotations

import math
from typing import Any

from moetune.configio.finalize import data_parallel_size
from moetune.layout.ranks import ep_group_in_domain, hybridep_spans, in_domain_eps, job_nvlink_domain, members_in_domain
from moetune.rules.derive_layers import value
from moetune.specs.platform import spanning_backend


def cluster_facts(config: dict[str, Any], d: dict[str, Any]) -> None:
    """The world's data-parallel sizes, micro-batches and nodes, and the groups that leave the job's NVLink domain."""
    world = config.get("cluster.num_gpus")
    if world:
        d["world_size"] = world = int(world)
        expert = d["etp"] * d["ep"] * d["pp"]
        if dp := data_parallel_size(config):
            d["data_parallel_size"] = dp
        if world % expert == 0:
            d["expert_data_parallel_size"] = world // expert
        gbs, mbs = value(config, "train.global_batch_size"), value(config, "train.micro_batch_size")
        dp = d.get("data_parallel_size")
        if gbs and mbs and dp and gbs % (mbs * dp) == 0:
            d["num_microbatches"] = gbs // (mbs * dp)
        if "gpus_per_node" in d:
            d["num_nodes"] = math.ceil(world / d["gpus_per_node"])
            d["multi_node"] = world > d["gpus_per_node"]
    if "nvlink_domain" in d:
        # The job's NVLink domain in consecutive ranks (Slurm segments on NVL72 racks: 64 for 256 GB200s).
        domain = d["nvlink_domain"]
        if "world_size" in d and "gpus_per_node" in d:
            domain = job_nvlink_domain(d["world_size"], d["gpus_per_node"], d["nvlink_domain"])
        d["job_nvlink_domain"] = domain
        d["tp_crosses_nvlink"] = bool(members_in_domain(d["tp"], 1, domain) < d["tp"])
        d["ep_crosses_nvlink"] = not ep_group_in_domain(d["ep"], d["etp"], domain)
        d["ep_in_domain"] = _largest_ep_in_domain(config, d, domain)
        # Megatron-Bridge scripts/performance/utils/utils.py apply_target_topology_environment: EP itself, at most the
        # domain (8 on HGX; on NVL72 Bridge refuses EP > 72, and a job's Slurm segment can hold fewer: 64 of 256 GB200)
        d["hybridep_ranks_per_domain"] = min(d["ep"], domain)
        d["hybridep_spans"] = hybridep_spans(d["ep"], d["etp"], d["nvlink_domain"], domain)
        if "recommended_backend" in d:  # (none without cluster.gpu: a rule asking for it stays undecided)
            # None where alltoall is the one to run (EP 1, or no flex backend spans this EP): the seeds' bring-up
            # dispatcher is then the start (its fixes had sent a user from one refused backend to the other)
            d["recommended_backend"] = spanning_backend(d["recommended_backend"], d["ep"], d["hybridep_spans"],
                                                        d["deepep_supported"])
        # the flex backend that spans an EP group leaving the domain: the platform's, else DeepEP where Bridge runs it
        d["ep_remedy_backend"] = d.get("recommended_backend") or ("deepep" if d.get("deepep_supported") else None)


def _largest_ep_in_domain(config: dict[str, Any], d: dict[str, Any], domain: int) -> int:
    """The largest EP, up to the configured one, whose every group lies in one NVLink domain of the job, divides
    the experts and tiles the ranks (1 when none does)."""
    experts = int(value(config, "model.num_moe_experts", 0) or 0)
    return next(in_domain_eps(d["ep"], d["etp"], domain, experts, d.get("world_size") or 0, d["pp"]), 1)
