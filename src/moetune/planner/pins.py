"""Pinned knobs (plan --fix) that cannot run together, or not as the search prices them: one error line naming the
pins, where the search would find nothing and blame memory or the batch."""

from moetune.errors import MoetuneError
from moetune.layout.dp_sharding import fsdp_optimizer_refusal
from moetune.layout.knobs import Knobs
from moetune.layout.layout import Layout
from moetune.layout.modules import unsaved_offloads
from moetune.specs.model import ModelSpec


def pins_agree(spec: ModelSpec, fixed: dict, routing: str, token_imbalance: float | None = None) -> None:
    """One error line for pins that cannot run together (_pins_run) or not under this routing (a full-iteration graph
    on a dropless MoE, a measured dropless factor under force-balanced routing or above a pinned EP)."""
    _pins_run(fixed)
    _full_iteration_routing(spec, fixed, routing)
    Knobs(routing=routing, token_imbalance=token_imbalance)  # its range and routing, in estimate's words (knob_checks)
    if token_imbalance is not None and 1 < fixed.get("ep", 1) < token_imbalance:
        raise MoetuneError(f"--token-imbalance {token_imbalance:g} with --fix ep={fixed['ep']}: the busiest of "
                           f"{fixed['ep']} expert ranks holds at most every token, {fixed['ep']}x the mean; pass the "
                           "factor measured at this EP, or drop the pin")


def carries(layouts: list[Layout], token_imbalance: float | None) -> list[Layout]:
    """The layouts whose busiest expert rank can hold a measured dropless factor: at most EP x the mean (every token;
    layout/validate.py validate_knobs refuses more), so a factor of 3 leaves EP 2 out; EP 1 pays none."""
    if token_imbalance is None:
        return layouts
    kept = [lay for lay in layouts if lay.ep == 1 or lay.ep >= token_imbalance]
    if layouts and not kept:
        raise MoetuneError(f"--token-imbalance {token_imbalance:g} exceeds the EP of every legal layout (at most "
                           f"{max(lay.ep for lay in layouts)}): the busiest of EP expert ranks holds at most EP x the "
                           "mean; pass the factor your router measured")
    return kept


def _full_iteration_routing(spec: ModelSpec, fixed: dict, routing: str) -> None:
    """A pinned full-iteration graph on a dropless MoE is one line: its MoE layers capture only with static expert
    shapes, which Bridge's recipes get from a per-rank token budget (moe_expert_rank_capacity_factor 1.5, emitted with
    it) that drops the tokens past it (transformer_config.py), so the run would not be the dropless one priced; the
    seeds keep full-iteration graphs for drop-and-pad or static-shape experiments (knob_grid searches them only
    force-balanced)."""
    scopes = fixed.get("cuda_graph_scope")
    whole = bool(scopes) and all("full_iteration" in s for s in scopes)
    if routing != "dropless" or not spec.num_moe_layers or not whole:
        return
    raise MoetuneError("--fix cuda_graph_scope=full_iteration under --routing dropless: a full-iteration graph "
                       "captures MoE layers only with static expert shapes, a per-rank token budget "
                       "(moe_expert_rank_capacity_factor 1.5) that drops the tokens past it, so the run would not be "
                       "dropless (seeds/000 CUDA Graphs For MoE); pass --routing force-balance to plan it, or pin the "
                       "TE-scoped graphs (attn,moe_router,moe_preprocess)")


def _pins_run(fixed: dict) -> None:
    """Pinned knobs that cannot run together: one error line naming the pair (the search would find nothing and
    blame memory or the batch)."""
    if fixed.get("delay_wgrad") is True and fixed.get("ep_overlap") == [False]:
        raise MoetuneError("--fix delay_wgrad=true needs EP overlap (Megatron-Core: overlap_moe_expert_parallel_comm "
                           "must be enabled when enabling delay_wgrad_compute, transformer_config.py); drop --fix "
                           "ep_overlap=false or the delay_wgrad pin")
    if fixed.get("tp_comm_overlap") is True and fixed.get("tp") == 1:
        raise MoetuneError("--fix tp_comm_overlap=true needs TP > 1 (Megatron Bridge turns it off at TP 1 and "
                           "Megatron-LM refuses it without sequence parallelism); drop --fix tp=1 or the overlap pin")
    if fixed.get("ep_overlap") == [True] and fixed.get("pp", 1) > 1 and fixed.get("vpp") == 1:
        raise MoetuneError(f"--fix ep_overlap=true with pp={fixed['pp']} needs VPP > 1 (seeds/003 Prerequisites: with "
                           "PP, virtual_pipeline_model_parallel_size must be set; Megatron-Core asserts it) but "
                           "--fix vpp=1 is pinned; drop one of the pins")
    if why := fsdp_optimizer_refusal(fixed.get("megatron_fsdp"), fixed.get("optimizer", "adam")):
        raise MoetuneError(f"--fix megatron_fsdp={fixed['megatron_fsdp']} with optimizer={fixed['optimizer']}: {why}; "
                           "drop one of the pins")
    offload = fixed.get("offload_modules", frozenset())
    if offload and fixed.get("recompute") == "full":
        raise MoetuneError("--fix offload_modules with recompute=full: full recompute keeps only layer inputs, so "
                           "there is nothing fine-grained to offload; drop one of the pins")
    if inside := unsaved_offloads("selective", fixed.get("recompute_modules", ()), offload):
        raise MoetuneError(f"--fix offload_modules={','.join(inside)} with the 'moe' recompute module: recomputing the "
                           "whole MoE layer saves nothing inside it to offload (Megatron-Core asserts, "
                           "transformer_config.py); drop one of the pins")
    if fixed.get("ep") != 1:
        return
    for key, needs in (("dispatcher", ("deepep", "hybridep")), ("ep_overlap", (True,))):
        pinned = [v for v in fixed.get(key, []) if v in needs]
        if pinned and len(pinned) == len(fixed[key]):
            raise MoetuneError(f"--fix {key}={str(pinned[0]).lower()} needs EP > 1 (expert ranks to exchange tokens "
                               f"with) but --fix ep=1 is pinned; drop one of the pins")
