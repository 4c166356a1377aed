"""Why `plan` found nothing: one line naming the pinned value (or the batch size) at fault and the rule it breaks
when no layout is legal, instead of a generic "check your flags"; and when legal candidates exist but none fits,
what stops the lightest of them (nothing_fits: GPU memory, host memory, or the pinned knobs' prerequisites).

The search drops illegal layouts silently (enumerate.py); when nothing is left, this re-asks the layout rules
(layout/validate.py, pipeline.py) about the user's pins one at a time, so the message quotes the same rule
`estimate` would quote for that layout. Each pin set is enumerated once (_Enumerated): whether it leaves a layout and
which DPs it leaves at any batch size come from the same pass.
"""

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from moetune.errors import MoetuneError
from moetune.layout.dsa_split import dsa_heads_refusal
from moetune.layout.knobs import CP1_COMM_TYPES
from moetune.layout.layout import Layout
from moetune.layout.ranks import job_gpu
from moetune.layout.validate import Workload, sequence_refusal, validate_shapes, validate_workload
from moetune.planner.enumerate import (
    MBS_CHOICES,
    bridge_refuses_vpp,
    enumerate_layouts,
    splits_for,
    tp_choices,
    tp_cp_sizes,
)
from moetune.specs.hardware import GpuSpec
from moetune.specs.model import ModelSpec
from moetune.walls.cp_legal import a2a_cp_limit, cp_exchange_exists, exchanges_that_run
from moetune.walls.flops import kv_groups_per_rank

if TYPE_CHECKING:  # search.py imports this module, so importing it back at run time would be circular
    from moetune.planner.search import PlanResult

LAYOUT_KEYS = ("tp", "cp", "pp", "vpp", "ep", "etp")


@dataclass(slots=True)
class _Enumerated:
    """The legal layouts of each pin set, enumerated once however many reasons ask: those the global batch allows,
    and those it alone rules out (enumerate_layouts checks the batch last, so together they are the layouts of any
    batch: _gbs_reason's DPs)."""
    spec: ModelSpec
    gpu: GpuSpec
    world: int
    wl: Workload
    seen: dict = field(default_factory=dict)

    def __call__(self, pins: dict) -> tuple[list[Layout], set[Layout]]:
        key = tuple(sorted(pins.items()))
        if key not in self.seen:
            excluded: set[Layout] = set()
            self.seen[key] = enumerate_layouts(self.spec, self.gpu, self.world, self.wl, pins, excluded), excluded
        return self.seen[key]


def _rule_broken(spec: ModelSpec, world: int, wl: Workload, pins: dict) -> str | None:
    """The layout rule these pins break on their own (the other dimensions at 1, PP micro-batches so that an interleaved
    schedule is judged on its layers, not on a batch the user never gave), or None when some completion
    could be legal. The layer split is judged on every split a pinned PP (and VPP) is searched with (splits_for with
    its balanced string), which leaves none only where the stages outnumber what they can hold."""
    vpp = pins.get("vpp", 1)
    if bridge_refuses_vpp(spec, vpp):
        return (f"{spec.name} is a Mamba hybrid: Megatron Bridge's HybridModelProvider refuses virtual pipeline "
                "stages (hybrid_provider.py); drop --fix vpp")
    try:
        lay = Layout(world_size=world, **{**pins, "vpp": vpp})
        validate_shapes(spec, lay)
        validate_workload(lay, Workload(seq_length=wl.seq_length, micro_batch_size=1,
                                        global_batch_size=lay.dp * lay.pp), spec)
    except MoetuneError as err:
        return as_plan_flags(str(err))
    if lay.pp > 1 and not splits_for(spec, lay.pp, vpp, balanced=True):
        # worded for plan: a pinned PP (and VPP) is tried with every split estimate's flags would offer and a balanced
        # layout string (enumerate._splits), which places the layers wherever every stage can hold one
        stages = lay.pp * vpp
        return (f"PP {lay.pp} x VPP {vpp} = {stages} stages for {spec.name}'s {spec.num_layers} layers: choose "
                f"--fix pp (and vpp) with at most {spec.num_layers} stages")
    return None


# estimate's layout flags in a layout refusal, as plan pins them: "choose an --ep that divides it" -> "choose a
# --fix ep=N that divides it", "use --tp 1" -> "use --fix tp=1" (plan takes the sizes as --fix pins)
_LAYOUT_FLAG = re.compile(r"(?:\b(an?) )?--(tp|cp|pp|vpp|ep|etp|mbs)(?![-\w])( \d+)?")


def as_plan_flags(message: str) -> str:
    """A layout refusal written for estimate's flags, with plan's --fix pins in their place."""
    def pin(m: re.Match) -> str:
        return f"{'a ' if m.group(1) else ''}--fix {m.group(2)}={m.group(3).strip() if m.group(3) else 'N'}"
    return _LAYOUT_FLAG.sub(pin, message)


def _cp_reason(spec: ModelSpec, gpu: GpuSpec, world: int, pins: dict, fixed: dict) -> str | None:
    """Why pinned CP has no exchange Megatron runs (walls/context_parallel.py), or None when some TP gives it one."""
    cp, kind = pins.get("cp", 1), fixed.get("cp_comm_type", "auto")
    tps = [pins["tp"]] if "tp" in pins else tp_choices(gpu, world)
    domain = job_gpu(gpu, world).nvlink_domain
    if cp == 1 or any(cp_exchange_exists(spec, cp, tp, domain, kind) for tp in tps):
        return None
    # the most KV groups a rank of these TPs holds, and the largest CP their head split allows (one group a rank
    # past the groups, so no CP over 1 there)
    groups, limit = max(kv_groups_per_rank(spec.kv_groups, tp) for tp in tps), max(a2a_cp_limit(spec, tp) for tp in tps)
    if spec.softmax_sinks:
        return _sinks_reason(spec, pins, kind, groups, limit,
                             a2a_runs=any(cp_exchange_exists(spec, cp, tp, domain, "a2a") for tp in tps))
    need = f"CP {cp} needs at least {cp} of them" if kind == "a2a" else "an a2a group of 2 needs at least 2 of them"
    return (f"cp_comm_type {kind} splits each TP rank's {groups} KV groups (or fewer) over CP (rule cp.a2a_heads): "
            f"{need}; use {exchanges_that_run(spec, cp, tps, domain, kind)}")


def _sinks_reason(spec: ModelSpec, pins: dict, kind: str, groups: int, limit: int, a2a_runs: bool) -> str:
    """Attention sinks run CP over a2a alone: a pinned other exchange is the fault where a2a would run this CP (it
    had been told the KV groups limit CP, which they did not), else a2a's head split is."""
    cp, pinned = pins.get("cp", 1), kind not in ("auto", "a2a")
    sinks = (f"{spec.name}'s attention sinks run context parallel only over a2a (Transformer Engine; rule "
             f"cp.sinks_need_a2a){f', not the pinned {kind}' if pinned else ''}")
    if pinned and a2a_runs:
        return f"{sinks}; drop --fix cp_comm_type={kind} (plan picks a2a) or pin a2a"
    smaller_tp = " or a smaller --fix tp" if pins.get("tp", 1) > 1 else ""
    return (f"{sinks}{', and a2a' if pinned else ', which'} splits each TP rank's {groups} KV groups (or fewer) "
            f"over CP: CP {cp} needs at least {cp} of them; use CP <= {limit}{smaller_tp}")


def _pins_text(pins: dict) -> str:
    """The pins as a user types them: parse_fix's lists, tuples (a graph scope) and sets (recompute modules) comma-
    joined, a switch lower case (--fix cuda_graph_scope=attn,moe_router --fix ep_overlap=true)."""
    return " ".join(f"--fix {k}={_typed(v)}" for k, v in pins.items())


def _typed(value) -> str:
    if isinstance(value, list | tuple):
        return ",".join(_typed(v) for v in value)
    if isinstance(value, set | frozenset):
        return ",".join(sorted(map(str, value)))
    return str(value).lower() if isinstance(value, bool) else str(value)


def _gbs_reason(layouts: _Enumerated, fixed: dict, pins: dict) -> str | None:
    """The batch-size reason, when the pins have legal layouts once any GBS is allowed."""
    allowed, excluded = layouts(pins)
    dps = sorted({lay.dp for lay in [*allowed, *excluded]})
    if not dps:
        return None
    mbs = [fixed["mbs"]] if "mbs" in fixed else list(MBS_CHOICES)
    where = f" with {_pins_text(pins)}" if pins else ""  # cp_comm_type among them, when pinned
    return (f"global batch size ({layouts.wl.global_batch_size}) is divisible by no DP x micro-batch size{where} (DP "
            f"{', '.join(map(str, dps))}; MBS {', '.join(map(str, mbs))}); choose a GBS one of them divides")


def sequence_note(seq: int, tps: list[int], cps: list[int], world: int) -> str | None:
    """Which of the TP and CP sizes searched (enumerate.tp_cp_sizes, powers of two) the sequence length itself rules
    out by Megatron's sequence rules (layout/validate.py sequence_refusal: 2 x CP divides the sequence; sequence
    parallelism, which MoE layers need at TP > 1, splits each CP rank's seq/CP tokens over TP), and the nearest length
    that allows them all; None where it rules out none. Both rules read the sequence's power-of-two factor alone. Only
    pairs the `world` GPUs hold count: on 16 GPUs CP 512 was never the sequence's to allow (a 1M-token run had been
    told a length that changed nothing)."""
    pairs = [(t, c) for t in tps for c in cps if t * c <= world]
    ruled = [(t, c) for t, c in pairs if sequence_refusal(seq, t, c, t > 1)]
    if not ruled:
        return None
    two = seq & -seq  # the largest power of two dividing the sequence
    if two == 1:
        what = (f"seq {seq:,} is odd, which rules out every CP > 1 (Megatron splits each sequence into 2 x CP chunks) "
                "and every TP > 1 (sequence parallelism, which MoE layers need with TP, splits it over TP)")
    else:
        what = (f"seq {seq:,} has {two} as its largest power-of-two factor, which rules out CP above {two // 2} "
                f"(Megatron splits each sequence into 2 x CP chunks) and TP x CP above {two} (sequence parallelism, "
                "which MoE layers need with TP, splits each CP rank's seq/CP tokens over TP)")
    alone = ": the search had TP1 CP1 alone" if len(ruled) == len(pairs) - 1 else ""
    unit = max(max(2 * c if c > 1 else 1, t * c if t > 1 else 1) for t, c in pairs)
    below = seq // unit * unit
    nearest = min((n for n in (below, below + unit) if n >= unit), key=lambda n: (abs(n - seq), n))
    return (f"{what}{alone}; --seq {nearest} allows TP up to {max(t for t, _ in pairs)} with CP up to "
            f"{max(c for _, c in pairs)}")


def no_layout_reason(spec: ModelSpec, gpu: GpuSpec, world: int, wl: Workload, fixed: dict) -> str:
    """One line: which pin (or the GBS) leaves no legal layout, and why."""
    pins = {k: fixed[k] for k in LAYOUT_KEYS if k in fixed}
    exchange = {"cp_comm_type": fixed["cp_comm_type"]} if "cp_comm_type" in fixed else {}  # enumerate reads it
    layouts = _Enumerated(spec, gpu, world, wl)
    for key, value in pins.items():
        # a VPP is judged on the pinned PP, if any: interleaving is over it (alone, "needs pp > 1" would be wrong)
        alone = {key: value, **({"pp": pins["pp"]} if key == "vpp" and "pp" in pins else {})}
        if layouts({**alone, **exchange})[0]:
            continue
        why = (_rule_broken(spec, world, wl, alone) or _cp_reason(spec, gpu, world, alone, fixed)
               or _gbs_reason(layouts, fixed, {**alone, **exchange})
               or _exchange_reason(layouts, alone, fixed)
               or f"no legal layout of {spec.name} on {world} GPUs has {key}={value}")
        return f"{_pins_text(alone)}: {why}"
    if len(pins) > 1 and not layouts({**pins, **exchange})[0]:
        why = (_rule_broken(spec, world, wl, pins) or _cp_reason(spec, gpu, world, pins, fixed)
               or _gbs_reason(layouts, fixed, {**pins, **exchange}) or "drop one of them")
        return f"{_pins_text(pins)} are each legal but not together on {world} GPUs: {why}"
    return (_gbs_reason(layouts, fixed, {**pins, **exchange})
            or _exchange_reason(layouts, pins, fixed)
            or _dsa_heads_reason(spec, gpu)
            or f"no layout satisfies the model's shapes on {world} GPUs; change --gpus")


def _dsa_heads_reason(spec: ModelSpec, gpu: GpuSpec) -> str | None:
    """Where no TP the search tries gives a DSA model's ranks a head count FlashMLA runs on this GPU, the refusal of
    the first (layout/dsa_split.py dsa_heads_refusal), else None."""
    refusals = [dsa_heads_refusal(spec, tp, gpu.arch) for tp in tp_choices(gpu, gpu.nvlink_domain)]
    return None if None in refusals else refusals[0]


def _exchange_reason(layouts: _Enumerated, pins: dict, fixed: dict) -> str | None:
    """Why a pinned cp_comm_type leaves nothing where the layout pins alone leave layouts: one other than p2p asks for
    CP > 1 (enumerate.tp_cp_sizes), which the search tries up to seq/1024, each CP with an exchange that runs it (the
    smallest CP's refusal, _cp_reason, where it has one). p2p asks nothing of CP (layout/knobs.py CP1_COMM_TYPES:
    Megatron-Core checks the exchange only at CP > 1), so it is not said to; no plan is known to reach here with p2p
    pinned (a CP 1 layout stands beside any other, and _cp_reason and _gbs_reason answer first)."""
    kind, spec, gpu, world, wl = fixed.get("cp_comm_type"), layouts.spec, layouts.gpu, layouts.world, layouts.wl
    if kind is None or not layouts(pins)[0]:
        return None
    cps = tp_cp_sizes(gpu, world, wl.seq_length, pins)[1]
    if kind in CP1_COMM_TYPES:
        return (f"--fix cp_comm_type={kind}: no legal layout at CP {', '.join(map(str, cps))} runs it; drop the pin "
                "(plan picks each layout's exchange)")
    cps = [c for c in cps if c > 1]
    if cps and (refusal := _cp_reason(spec, gpu, world, {**pins, "cp": cps[0]}, fixed)):
        return refusal
    where = (f"no legal layout at CP {', '.join(map(str, cps))} runs it" if cps else
             f"the search tries CP up to seq/1024, 1 at seq {wl.seq_length:,}")
    return (f"--fix cp_comm_type={kind} asks for CP > 1 (at CP 1 nothing is exchanged) and {where}; drop the pin "
            "(plan picks each layout's exchange)")


def nothing_fits(result: "PlanResult", pins: dict | None = None) -> str:
    """Why no candidate fits, with the least memory any of them needs; the user's --fix pins named first among the
    remedies, since they narrowed the search that found nothing."""
    # not "lower the global batch": the lightest candidate already runs one sequence a micro-batch, and the search
    # has tried every layout of these GPUs
    state = result.lightest_state_gib
    stuck = state is not None and state > result.capacity_gib - result.headroom_gib  # whatever the sequence
    fix = (f"loosen {_pins_text(pins)}, " if pins else "") + "add GPUs" + ("" if stuck else " or shorten the sequence")
    if result.sequence_note:  # the length itself shut out TP and CP, which would shard the activations
        fix = f"{result.sequence_note}; or " + (f"loosen {_pins_text(pins)}, " if pins else "") + "add GPUs"
    if result.lightest_peak_gib is None:
        return fix
    kept = f", {result.headroom_gib:g} of them kept free" if result.headroom_gib else ""
    host, host_cap = result.lightest_host_gib, result.host_capacity_gib
    if result.lightest_peak_gib <= result.capacity_gib - result.headroom_gib and host_cap and host > host_cap:
        return (f"the lightest candidate ({result.lightest}) fits the GPU at "
                f"{result.lightest_peak_gib:.0f} GiB of {result.capacity_gib:.0f}{kept}, but its offloaded optimizer "
                f"state needs {host:.0f} GiB of host memory per GPU of {host_cap:.0f} (data/hardware.toml "
                f"host_memory_gib; a cluster file with host_memory_gib sets yours); {fix}")
    if result.lightest_peak_gib <= result.capacity_gib - result.headroom_gib and not result.memory_fits:
        return (f"the lightest bound ({result.lightest}, no dispatcher buffers or CUDA-graph pools) needs "
                f"{result.lightest_peak_gib:.0f} GiB per GPU of {result.capacity_gib:.0f}{kept}, but no searched "
                f"knob set fits: each adds memory to it (a dispatcher's buffers, graph pools, lighter recompute); "
                f"{fix}")
    if result.lightest_peak_gib <= result.capacity_gib - result.headroom_gib:  # memory is not what excludes them
        nvl72 = "HybridEP on NVL72 needs every EP group inside one of the job's NVLink domains (`moetune explain` " \
            "names the domain), " if result.nvl72 else ""
        shapes = f"{result.gemm_note}; " if result.gemm_note else ""  # e.g. FP8 at an odd sequence (gemm_shapes.py)
        return (f"candidates fit in memory (the lightest, {result.lightest}, needs {result.lightest_peak_gib:.0f} GiB "
                f"per GPU of {result.capacity_gib:.0f}{kept}) but each breaks a prerequisite of the pinned knobs: "
                f"{shapes}{nvl72}flex dispatchers and EP overlap need EP > 1, EP overlap needs VPP with PP; loosen "
                "--fix")
    alone = (f"; its weights, gradients and optimizer state alone need {state:.0f} GiB at the least on any layout, "
             "which no shorter sequence lowers") if stuck else ""
    return (f"the lightest candidate ({result.lightest}) needs "
            f"{result.lightest_peak_gib:.0f} GiB per GPU of {result.capacity_gib:.0f}{kept}{alone}; {fix}")
