"""Which context-parallel exchanges Megatron and Transformer Engine run for a layout, and why none does where none
does: the all-to-all's head split, hierarchical CP's a2a group inside NVLink, attention sinks that leave only a2a; and
the names the outputs use for them. walls/context_parallel.py prices the exchanges that run."""

import math
from dataclasses import replace

import numpy as np

from moetune.errors import MoetuneError
from moetune.layout.knobs import Knobs
from moetune.layout.ranks import job_gpu
from moetune.layout.validate import validate
from moetune.specs.model import ModelSpec
from moetune.walls.flops import kv_groups_per_rank


def a2a_splits(heads_tp, groups_tp, size):
    """An all-to-all over `size` CP ranks splits the heads of each TP rank: its heads and KV groups must divide
    (Megatron-Bridge docs/training/hierarchical-context-parallel.md: "CP <= num_kv_heads")."""
    return (heads_tp % size == 0) & (groups_tp % size == 0) & (groups_tp >= size)


def rank_heads(spec: ModelSpec, tp):
    """(heads, KV groups) of one TP rank's attention: what an all-to-all over CP splits (a2a_splits; one KV group a rank
    past the groups: kv_groups_per_rank)."""
    return heads_per_rank(spec.num_attention_heads, spec.kv_groups, np.maximum(tp, 1))


def heads_per_rank(heads: int, kv_groups: int, tp):
    """rank_heads from the counts alone (rules/derive_layers.py reads them from a config, not a ModelSpec)."""
    return heads // tp, kv_groups_per_rank(kv_groups, tp)


def a2a_allows(spec: ModelSpec, size, tp):
    """a2a_splits for this model's heads and the KV groups of a TP rank (rank_heads; so past the groups a group of one
    alone)."""
    return a2a_splits(*rank_heads(spec, tp), size)


def hcp_group_runs(heads_tp, groups_tp, cp, size, tp=1, nvlink_domain: int | None = None):
    """Whether a2a+p2p runs with an a2a group (hierarchical_context_parallel_sizes[0]) of `size` ranks at this CP: the
    group divides CP and Transformer Engine's all-to-all inside it splits each TP rank's heads and KV groups
    (a2a_splits; Megatron-Bridge docs/training/hierarchical-context-parallel.md); given an NVLink domain, its size x
    TP ranks share it too (CP ranks are consecutive after TP in Megatron's order; Transformer Engine's a2a+p2p runs
    the a2a inside a node). A group of 1 leaves the p2p ring alone, one of CP a ring of 1 (plain a2a). Scalars or
    arrays (the planner's layouts); cli/estimate_input.py and rules/derive_layers.py ask here too."""
    checks = hcp_group_checks(heads_tp, groups_tp, cp, size)
    runs = checks["divides"] & checks["splits"]
    return runs if nvlink_domain is None else runs & (size * tp <= nvlink_domain)


def hcp_group_checks(heads_tp, groups_tp, cp, size) -> dict:
    """hcp_group_runs's conditions on the group itself, by name, for a refusal to say which fail: it divides CP, and
    its all-to-all splits each TP rank's heads and KV groups (a2a_splits)."""
    return {"divides": cp % size == 0, "splits": a2a_splits(heads_tp, groups_tp, size)}


def hcp_groups(heads_tp: int, groups_tp: int, cp: int, tp: int = 1, nvlink_domain: int | None = None) -> list[int]:
    """The a2a group sizes a2a+p2p runs with at this CP (hcp_group_runs), ascending, 1 and CP among them where they
    run."""
    return [a for a in range(1, cp + 1) if hcp_group_runs(heads_tp, groups_tp, cp, a, tp, nvlink_domain)]


def hcp_largest_group(heads_tp, groups_tp, cp, tp=1, nvlink_domain: int | None = None):
    """The largest a2a group below CP that a2a+p2p runs with (hcp_group_runs: inside the NVLink domain where one is
    given), among every divisor of CP (CP 12: 2, 3, 4 and 6); 1 where none does. Scalars or arrays (the planner's
    layouts); rules/derive_layers.py suggests this group (cp.hcp_sizes), so the rule and estimate agree."""
    cps = np.asarray(cp)
    best = np.ones_like(cps)
    for a in _group_sizes(cps, nvlink_domain):  # ascending, so the largest that runs is kept
        best = np.where((a < cps) & hcp_group_runs(heads_tp, groups_tp, cps, a, tp, nvlink_domain), a, best)
    return best


def _group_sizes(cps, nvlink_domain: int | None) -> list[int]:
    """The sizes of 2 or more that divide one of these CPs, below it and no wider than the NVLink domain (a group of
    `size` x TP ranks shares it: hcp_group_runs)."""
    cap = nvlink_domain if nvlink_domain is not None else int(np.max(cps, initial=1))
    # a set of the CPs, not np.unique: that asks np.ma.is_masked, whose first call imports numpy.ma (~10 ms of a cold
    # plan, which holds no masked array)
    return sorted({a for c in set(np.ravel(cps).tolist()) for a in range(2, min(c - 1, cap) + 1) if c % a == 0})


def hcp_inner_size(spec: ModelSpec, cp, tp, nvlink_domain: int):
    """The a2a group of a2a+p2p estimate prices: the largest group below CP that runs inside an NVLink domain
    (hcp_largest_group, over this model's heads and KV groups of a TP rank); 1 when none does."""
    return hcp_largest_group(*rank_heads(spec, tp), cp, tp, nvlink_domain)


# DeepSeek Sparse Attention's CP exchanges: all_gather, and Megatron's default p2p standing for it (legal_exchanges)
DSA_EXCHANGES = ("p2p", "all_gather")
DSA_CP_SOURCE = ("Megatron-LM megatron/core/transformer/experimental_attention_variant/dsa.py DSAttention "
                 "@core_v0.19.0 :1808, 'currently supports cp_comm_type=allgather only'")


def dsa_exchange_refusal(spec: ModelSpec, comm_type: str | None) -> str | None:
    """Why an exchange a user named cannot carry DeepSeek Sparse Attention's CP (None where it can: all_gather, or
    none named). A config's absent field reads as p2p and runs all_gather (DSA_EXCHANGES); a flag or pin is what it
    says."""
    if spec.dsa is None or comm_type in (None, "auto", "all_gather"):
        return None
    return f"DeepSeek Sparse Attention runs context parallel over all_gather only ({DSA_CP_SOURCE})"


def legal_exchanges(spec: ModelSpec, cp, tp, nvlink_domain: int) -> dict:
    """Where each exchange runs. Attention sinks (gpt-oss) leave only a2a: Transformer Engine runs them in its fused
    backend alone, which takes CP only with a2a (rules.yaml cp.sinks_need_a2a). DeepSeek Sparse Attention runs
    all_gather alone (Megatron-LM transformer_config.py "DSAttention context parallelism currently supports
    cp_comm_type=allgather only"), which Megatron Bridge's GLM-5 provider sets over Megatron's default p2p
    (glm5_bridge.py): p2p stands for it (context_parallel.resolve_auto)."""
    if spec.dsa is not None:
        return {t: np.full(np.shape(cp), t in DSA_EXCHANGES) for t in ("p2p", "a2a", "a2a+p2p", "all_gather")}
    ring = np.full(np.shape(cp), not spec.softmax_sinks)
    return {"p2p": ring, "a2a": a2a_allows(spec, cp, tp),
            "a2a+p2p": ring & (hcp_inner_size(spec, cp, tp, nvlink_domain) > 1)}


def exchanges_that_run(spec: ModelSpec, cp: int, tps, nvlink_domain: int, refused: str) -> str:
    """The exchanges other than `refused` that run at this CP with one of `tps` (legal_exchanges), as a refusal offers
    them ("p2p or a2a+p2p"; "" where none does): past the KV groups neither a2a nor a2a+p2p's a2a group runs."""
    legal = [legal_exchanges(spec, cp, tp, nvlink_domain) for tp in tps]
    return " or ".join(t for t in legal[0] if t != refused and any(bool(runs[t]) for runs in legal))


def cp_exchange_exists(spec: ModelSpec, cp: int, tp: int, nvlink_domain: int, comm_type: str) -> bool:
    """Whether a layout has a CP exchange Megatron and Transformer Engine run: `comm_type` itself, or any of
    AUTO_OPTIONS for "auto" (the planner drops the layouts with none)."""
    if cp == 1:
        return True
    legal = legal_exchanges(spec, cp, tp, nvlink_domain)
    if comm_type == "auto":
        return any(bool(v) for v in legal.values())
    return bool(legal.get(comm_type, not spec.softmax_sinks))


def a2a_cp_limit(spec: ModelSpec, tp: int) -> int:
    """The largest CP an all-to-all's head split allows at this TP (a2a_splits): the largest size that divides both the
    heads and the KV groups of a TP rank (one past the groups: kv_groups_per_rank, so no CP over 1 there)."""
    return math.gcd(spec.num_attention_heads // tp, kv_groups_per_rank(spec.kv_groups, max(tp, 1)))


def exchange_refusal(spec: ModelSpec, cp: int, tp: int, nvlink_domain: int) -> str | None:
    """Why no CP exchange runs at this CP and TP, one line (None where `auto` has a legal one: cp_exchange_exists).
    Only attention sinks leave none: they run CP over a2a alone, whose head split caps CP (rule cp.sinks_need_a2a)."""
    if cp_exchange_exists(spec, cp, tp, nvlink_domain, "auto"):
        return None
    limit = a2a_cp_limit(spec, tp)
    smaller_tp = " (or a smaller --tp, which leaves more KV groups on each rank)" if tp > 1 else ""
    return (f"no CP exchange runs at CP {cp} with TP {tp}: {spec.name}'s attention sinks run context parallel only "
            f"over a2a (Transformer Engine; rule cp.sinks_need_a2a), which splits each TP rank's "
            f"{spec.num_attention_heads // tp} heads and {kv_groups_per_rank(spec.kv_groups, tp)} KV groups over CP, "
            f"so CP can be at most {limit} here; use --cp {limit}{' or less' if limit > 1 else ''}{smaller_tp}")


def refusal_at_cp(spec: ModelSpec, layout, workload, gpu, cp: int) -> str | None:
    """Why Megatron refuses this layout at another CP, one line, by the checks estimate applies to a CP layout with
    `auto` (None: it runs): the world holding it, the model's shapes and the workload's sequence and batch rules
    (layout/validate.py validate; linear-attention heads per TP rank divisible by CP among them), then a CP exchange
    that runs in the job's NVLink domain (exchange_refusal)."""
    try:
        other = replace(layout, cp=cp)
        validate(spec, other, workload)
    except MoetuneError as err:
        return str(err)
    return exchange_refusal(spec, cp, layout.tp, job_gpu(gpu, layout.world_size).nvlink_domain)


def cp_runs(spec: ModelSpec, layout, workload, gpu):
    """cp -> whether this layout runs at that CP instead (refusal_at_cp): what the CP advice (layout/validate.py
    shard_cp) names only if it holds."""
    return lambda cp: refusal_at_cp(spec, layout, workload, gpu, cp) is None


EXCHANGE_WORDS = {"p2p": "a p2p ring whose steps overlap the attention (what outlasts it is exposed)",
                  "all_gather": "an all-gather of K,V (not hidden)",
                  "a2a": "all-to-alls that trade sequence chunks for heads (not hidden)",
                  "a2a+p2p": "an a2a inside NVLink, then a p2p ring across"}


def exchange_text(knobs: Knobs, cp: int) -> str:
    """cp_comm_type as Megatron spells it, with a2a+p2p's hierarchical_context_parallel_sizes."""
    if knobs.cp_comm_type == "a2a+p2p" and knobs.hcp_a2a_size:
        return f"a2a+p2p [{knobs.hcp_a2a_size}, {cp // knobs.hcp_a2a_size}]"
    return knobs.cp_comm_type
