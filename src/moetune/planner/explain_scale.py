"""explain's Scale section (seeds/000 Phase 2): the two Parallel Folding meshes of one configuration and what its
scale costs, in its own numbers: groups that leave the NVLink domain, the CP exchange and the seeds' 4K-shard CP
advice (each alternative layout re-estimated, not asserted), the pipeline ranks' split, the EP-first layout, and the
platform's default dispatcher where it does not fit.
"""

from dataclasses import replace

from moetune.errors import MoetuneError
from moetune.layout.cp_sizing import LONG_CONTEXT, SEED_CP_GUESS, SHARD_TOKENS, shard_cp
from moetune.layout.ranks import groups_leaving_domain, members_in_domain
from moetune.planner.defaults import default_dispatcher
from moetune.planner.ep_domain import ep_domain_note, ep_domain_text, segment_note
from moetune.planner.ep_first import ep_first_note
from moetune.planner.estimate import Estimate
from moetune.planner.moves import knobs_for, margin_gib
from moetune.planner.pipeline_balance import move_note, ranks_note
from moetune.planner.rule_findings import cp_sizing
from moetune.rules.derive_layers import attention_facts
from moetune.units import GIB
from moetune.walls.attention_rate import ring_slowdown
from moetune.walls.compute import rates
from moetune.walls.context_parallel import ring_ranks
from moetune.walls.cp_legal import EXCHANGE_WORDS, exchange_text, refusal_at_cp
from moetune.walls.model_state import inner_divisors
from moetune.words import words


def scale(e: Estimate, found: list | None = None) -> dict:
    lay = e.layout
    leaving = groups_leaving_domain(lay, e.job_domain)
    notes = []
    if note := segment_note(e):
        notes.append(note)
    if leaving.get("tp", 0) > 0:
        notes.append(f"TP{lay.tp} leaves the {e.job_domain}-GPU NVLink domain: keep TP inside it "
                     "(seeds/000 Phase 2)")
    if leaving.get("ep", 0) > 0:
        notes.append(f"{100 * leaving['ep']:.0f}% of EP{lay.ep} peers are outside the NVLink domain: the "
                     "all-to-all rides the NIC (seeds/000 Phase 2: hot communication inside the fast interconnect)")
        if e.time and (near := ep_domain_note(e, found)):
            notes.append(ep_domain_text(e, near))
    seq = e.workload.seq_length
    if note := _cp_sizing_note(e):
        notes.append(note)
    if lay.cp > 1:
        exposed = (e.time or {}).get("exposed_collectives", {}).get("cp")
        linear = " (with the Mamba/gated delta-net layers' own all-to-alls)" if e.model.mamba or e.model.gdn else ""
        notes.append(f"CP{lay.cp} exchanges attention inputs by cp_comm_type {exchange_text(e.knobs, lay.cp)}: "
                     f"{EXCHANGE_WORDS.get(e.knobs.cp_comm_type, e.knobs.cp_comm_type)}"
                     + (f"; {exposed:.2f} s a step left exposed{linear}" if exposed is not None else "")
                     + _ring_text(e)
                     + " (walls/context_parallel.py; `--cp-comm-type auto` picks the legal one that costs least)")
    if leaving.get("cp", 0) > 0 and (note := _cp_outside_note(e)):
        notes.append(note)
    if lay.pp > 1 and e.time:
        notes.append(ranks_note(e.model, e.layout, e.time))
        if move := move_note(e):
            notes.append(move)
    if lay.etp > 1 and not (lay.ep == 1 and e.knobs.routing == "dropless") and (note := ep_first_note(e)):
        notes.append(note)  # (dropless on EP 1: the routing note weighs the EP-first layout, with its imbalance)
    if note := _default_dispatcher_note(e):
        notes.append(note)
    if note := _fsdp_note(e):
        notes.append(note)
    if lay.dp == 1 and seq >= 32768:
        notes.append("DP is squeezed to 1: long-context scaling becomes brittle (seeds/002 § Keep DP alive if "
                     "possible, rule longctx.dp_squeezed)")
    return {"attention_mesh": f"TP{lay.tp} x CP{lay.cp} x DP{lay.dp} x PP{lay.pp}",
            "moe_mesh": f"ETP{lay.etp} x EP{lay.ep} x EDP{lay.edp} x PP{lay.pp}", "vpp": lay.vpp,
            "pipeline_split": lay.split_text() or "even",
            "groups_leaving_nvlink_domain": leaving, "notes": notes}


def _fsdp_note(e: Estimate) -> str | None:
    """Under Megatron FSDP, what it shards over which ranks and what its per-micro-batch collectives cost this run;
    under its hybrid sharding the strategy shards within each copy's ranks, and outer optim spreads the optimizer
    state over all of them (walls/model_state.py inner_divisors, optimizer_divisors); where a copy's EDP is 1 the
    experts' share is held whole (a group of one shards nothing: layout/dp_sharding.py)."""
    strategy, knobs = e.knobs.fsdp_strategy, e.knobs
    if strategy is None:
        return None
    copies, expert = knobs.num_distributed_optimizer_instances, inner_divisors(e.layout, knobs)[1]
    what = fsdp_shards(knobs, e.layout)
    whole = f"; at EDP {'1' if copies == 1 else f'/ {copies} = 1'} each rank keeps its experts' share whole, so only " \
        "the dense part is sharded" if strategy.sharded() and expert == 1 and e.model.num_moe_experts else ""
    cost = ""
    if e.time and (strategy.weights or strategy.grads):
        dp = "dp_grad_reduce_param_gather"
        each = "weight gathers and gradient reduce-scatters" if strategy.weights else "gradient reduce-scatters"
        # the step's DP figure (walls/iteration.py dp_raw_seconds) holds the once-a-step collectives too: the weights'
        # gather under optim_grads, the embedding's and output layer's under optim_grads_params, between copies
        cost = (f"; its {each} run every micro-batch beside compute; with what it runs once a step, "
                f"{e.time['collectives'][dp]:.2f} s a step, {e.time['exposed_collectives'][dp]:.2f} s exposed")
    return f"Megatron FSDP {e.knobs.megatron_fsdp} {what}{whole}{cost} (walls/iteration.py, walls/overlap.py)"


def fsdp_shards(knobs, layout=None) -> str:
    """What Megatron FSDP shards over which ranks: DP x CP (experts over EDP), or under its hybrid sharding
    (num_distributed_optimizer_instances N > 1) each copy's DP x CP / N (experts over EDP / N), outer optim the
    optimizer state over all of them (walls/model_state.py inner_divisors, optimizer_divisors). With `layout` the
    groups' sizes too; without (plan's rows share one strategy, not one layout) their names alone."""
    copies = knobs.num_distributed_optimizer_instances
    dense, expert = inner_divisors(layout, knobs) if layout else (None, None)

    def size(n, per: str) -> str:  # ' / N = n' within a copy, ' n' over all, nothing without a layout
        return f"{per}{' =' if per and n is not None else ''}{'' if n is None else f' {n}'}"

    per = f" / {copies}" if copies > 1 else ""
    over = f"over DP x CP{size(dense, per)} (experts over EDP{size(expert, per)})"
    sharded = knobs.fsdp_strategy.sharded()
    what = (f"shards the {words(sharded)} {f'within each of its {copies} copies, ' if copies > 1 else ''}{over}"
            if sharded else "shards nothing (no_shard)")
    if copies > 1 and knobs.outer_dp_sharding_strategy == "optim":
        total = f"DP x CP {layout.dp * layout.cp} (EDP {layout.edp})" if layout else "DP x CP (experts over EDP)"
        what += f", and outer optim the optimizer state over all {total}"
    return what


def _default_dispatcher_note(e: Estimate) -> str | None:
    """Where a run uses another fused dispatcher than the platform's default and the default does not fit: the
    difference is the buffers moetune charges each (data/memory_overheads.toml, estimates, not measurements), so a
    tight margin should not decide it."""
    default = default_dispatcher(e.gpu, e.layout)  # one that runs here
    if e.knobs.dispatcher == default or not e.model.num_moe_experts or e.layout.ep == 1 or not e.stages \
            or not e.fits:
        return None
    alt = e.variant(knobs=replace(e.knobs, dispatcher=default))
    if alt.fits:
        return None
    over = (alt.peak_bytes - alt.gpu.capacity_bytes) / GIB
    return (f"the platform's {default} does not fit here by {over:.1f} GiB, where {e.knobs.dispatcher} does: the "
            f"difference is the communication buffers moetune charges each (data/memory_overheads.toml, estimates "
            f"from the seeds, not measurements); with so little between them, measure {default} too, or keep a "
            f"margin with `moetune plan --headroom {margin_gib(e.gpu)}`")


# How moetune applies seeds/002's first guess (quoted as the seed writes it: SEED_CP_GUESS)
SHARD_READING = (f"seeds/002 § Start from a 4K shard target: \"{SEED_CP_GUESS}\"; moetune counts the shard as "
                 "TP x CP, since sequence parallelism splits each CP rank's tokens over TP as well (the seed's own "
                 "Qwen3-235B 128K NVL72 recipe trades CP for TP at TP4 x CP4), so it aims at CP ~= seq_len / "
                 "(4096 x TP)")


def _cp_sizing_note(e: Estimate) -> str | None:
    """The long-context CP advice (rule longctx.cp_sizing): the 4K-shard CP among those estimate runs, weighed against
    this run; or, where the shard is past twice 4K and no larger CP runs, why the next one does not. A hybrid's shard
    is weighed by its attention share of the token mixers, as the rule weighs it (cp_sizing.attention_share)."""
    lay, seq = e.layout, e.workload.seq_length
    shard = seq // (lay.cp * lay.tp)
    facts = attention_facts(e.model.attention_mixers)
    share, reading = facts["attention_share"], SHARD_READING + facts["cp_shard_weighing"]
    weighed = share * shard  # the shard's attention tokens: the shard itself for an all-attention stack
    # the shard and its ratio to 4K, with the attention tokens they count where the share weighs them
    tokens = f"{shard:,} tokens per TP x CP shard" + ("" if share == 1 else f" ({weighed:,.0f} weighed)")
    ratio = (lambda x: f"{x:g}") if share == 1 else (lambda x: f"{round(x, 2):g}")  # 150, not .2g's 1.5e+02
    target, under = cp_sizing(e)
    if under:
        return (f"long context: {tokens}; {reading}: here CP{target}, the nearest power of two estimate runs (rule "
                "longctx.cp_sizing)" + _weighed_cp(e, target))
    if lay.cp > 1 and weighed < SHARD_TOKENS:  # past the 4K target the other way: the pick's own trade, weighed
        # a stack with no softmax attention (every mixer Mamba-2 or gated delta-net) weighs its shard at none
        below = f"1/{ratio(SHARD_TOKENS / weighed)} of" if weighed else "no attention tokens against"
        return (f"{'long context' if seq >= LONG_CONTEXT else 'CP'}: {tokens}, "
                f"{below} the seeds' 4K target (seeds/002: \"{SEED_CP_GUESS}\", which "
                f"moetune reads per TP x CP shard as CP ~= seq_len / (4096 x TP){facts['cp_shard_weighing']}: "
                f"CP{target} here); this run's CP{lay.cp} shards finer than that guess"
                + (_weighed_cp(e, target) if target < lay.cp else ""))
    # the sequence and the world alone
    unrestricted = shard_cp(seq, lay.tp, lay.pp, lay.world_size, sp=lay.sp, share=share)
    if seq >= LONG_CONTEXT and weighed > 2 * SHARD_TOKENS and unrestricted > lay.cp:
        why = refusal_at_cp(e.model, lay, e.workload, e.gpu, 2 * lay.cp)
        return (f"long context: {tokens}, {ratio(weighed / SHARD_TOKENS)}x the seeds' 4K; {reading}, "
                f"CP{unrestricted} here, but no CP above {lay.cp} runs on this layout: CP{2 * lay.cp}: {why}")
    return None


def _cp_outside_note(e: Estimate) -> str | None:
    """How many CP peers sit outside the job's NVLink domain, what the exchange costs, and why the layout may still
    win: the layouts that keep this CP group inside the domain (less TP, or less CP at this TP), re-estimated."""
    lay, domain, t = e.layout, e.job_domain, e.time
    outside = lay.cp - int(members_in_domain(lay.cp, lay.tp, domain))
    if outside < 1 or t is None:
        return None
    peers = (f"CP{lay.cp}'s one peer sits" if lay.cp == 2 else f"all {outside} of CP{lay.cp}'s peers sit"
             if outside == lay.cp - 1 else f"{outside} of CP{lay.cp}'s {lay.cp - 1} peers sit")
    where = (f"CP{lay.cp} alone is wider than the job's {domain}-GPU NVLink domain" if lay.cp > domain else
             f"TP{lay.tp} x CP{lay.cp} spans {lay.tp * lay.cp} ranks, the job's NVLink domain {domain}")
    total, exposed = t["collectives"].get("cp", 0.0), t["exposed_collectives"].get("cp", 0.0)
    tp_inside = next((lay.tp >> i for i in range(1, lay.tp.bit_length()) if (lay.tp >> i) * lay.cp <= domain), None)
    cp_inside = domain // lay.tp if lay.tp <= domain and 1 <= domain // lay.tp < lay.cp else None
    weighed = "; ".join(w for w in (_weighed_layout(e, tp=tp_inside) if tp_inside else "",
                                    _weighed_layout(e, cp=cp_inside) if cp_inside else "") if w)
    return (f"{peers} outside the NVLink domain ({where}): the cp_comm_type {exchange_text(e.knobs, lay.cp)} "
            f"exchange crosses the NIC, {total:.2f} s a step of which {exposed:.2f} s is exposed "
            f"({exposed / t['step_seconds']:.0%} of the step), counted in the {t['tokens_per_s_per_gpu']:,.0f} "
            "tokens/s/GPU moetune predicts here" + (f"; keeping CP inside the domain, {weighed}" if weighed else ""))


def _weighed(e: Estimate, **change) -> tuple[Estimate, str]:
    """This run re-estimated on another TP or CP (MoetuneError where it is not legal), with its fit in words."""
    layout = replace(e.layout, **change)
    alt = e.variant(layout=layout, knobs=knobs_for(e, layout))
    return alt, "fits" if alt.fits else f"does not fit ({alt.peak_bytes / GIB:.1f} GiB)"


def _weighed_layout(e: Estimate, **change) -> str:
    """This run on another TP or CP, re-estimated: its tokens/s/GPU and whether it fits ("" where it does not run)."""
    try:
        alt, fits = _weighed(e, **change)
    except MoetuneError:
        return ""
    tokens = alt.time["tokens_per_s_per_gpu"]
    return f"TP{alt.layout.tp} x CP{alt.layout.cp} predicts {tokens:,.0f} tokens/s/GPU, {fits}"


def _weighed_cp(e: Estimate, cp: int) -> str:
    """The seeds' first guess re-estimated against this run (a plan may pick less CP because it is faster and fits)."""
    if e.time is None:
        return ""
    try:
        alt, fits = _weighed(e, cp=cp)
    except MoetuneError as err:
        return f"; not legal here: {err}"
    return (f"; moetune predicts CP{cp} at {alt.time['tokens_per_s_per_gpu']:,.0f} tokens/s/GPU, {fits}, against "
            f"{e.time['tokens_per_s_per_gpu']:,.0f} here")


def _ring_text(e: Estimate) -> str:
    """What a p2p ring's chunked attention calls cost (attention_rate.ring_slowdown), or "" without a ring."""
    ring = int(ring_ranks(e.model, e.knobs.cp_comm_type, e.layout.cp, e.layout.tp, e.job_domain, e.knobs.hcp_a2a_size))
    if ring < 2:
        return ""
    slow = ring_slowdown(e.workload.seq_length, ring, rates(e.gpu, e.knobs.precision, e.efficiency))
    return (f"; its ring of {ring} runs the attention in calls of {e.workload.seq_length // (2 * ring):,}-token "
            f"chunks, {slow:.2f}x the time of one call over the sequence")
