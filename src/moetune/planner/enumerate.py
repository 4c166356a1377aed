"""Every legal folded layout for a world size: what the planner crosses with its knob sets (knob_grid.py).

Layouts: TP and ETP powers of two that divide heads / groups / FFN widths and stay inside the NVLink
domain (seeds/000 Phase 2: "keep the hot communication path inside the fast interconnect"); CP powers
of two up to seq/1024; PP any divisor of the world; VPP where the layers allow; EP any divisor of
the expert count. Layers that do not split evenly get Megatron's uneven first/last stages or
account_for_embedding/loss or a layout string (whichever Megatron accepts first; a plain pipeline nothing else
splits gets a balanced string). Illegal ones are dropped silently here
(the user did not ask for them); `validate` explains any layout a user names.
"""

from itertools import product

from moetune.errors import MoetuneError
from moetune.layout.dsa_split import dsa_heads_refusal, index_group_counts, keeps_index_groups, shares_index
from moetune.layout.knobs import CP1_COMM_TYPES
from moetune.layout.layout import Layout, layout_stages, parse_pipeline_layout, write_pipeline_layout
from moetune.layout.pipeline import check_placement, pipeline_chunks
from moetune.layout.ranks import job_gpu
from moetune.layout.validate import Workload, validate_shapes, validate_workload
from moetune.planner.layout_stamp import stamp
from moetune.specs.hardware import GpuSpec
from moetune.specs.model import ModelSpec
from moetune.walls.cp_legal import cp_exchange_exists

VPP_CHOICES = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32)
MBS_CHOICES = (1, 2, 4, 8)


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _pow2(limit: int) -> list[int]:
    return [1 << i for i in range(limit.bit_length()) if 1 << i <= limit]


def tp_choices(gpu: GpuSpec, world: int) -> list[int]:
    """TP sizes the search tries: powers of two inside the NVLink domain (and the job), at most 8."""
    return _pow2(min(gpu.nvlink_domain, world, 8))


def _mtp_layout(num_layers: int, mtp: int, chunks: int) -> str | None:
    """A pipeline_model_parallel_layout for MTP models, as the DeepSeek-V3 recipes write them: every chunk but the
    last full, the remainder beside the MTP layers and loss ("Et*4|(t*4|)*14tmL" for PP2 x VPP8, the GB300
    verification card's); where no layers remain for the last chunk, the embedding, MTP layers and loss count as
    layers and everything splits evenly ("Et|(tt|)*30mL" for PP8 x VPP4)."""
    if chunks < 2:
        return None
    per = -(-num_layers // chunks)
    rest = num_layers - per * (chunks - 1)
    if rest > 0:
        return write_pipeline_layout([per] * (chunks - 1) + [rest], mtp)
    units = num_layers + 1 + mtp + 1
    per = units // chunks
    if units % chunks or per - 1 - mtp < 0:
        return None
    return write_pipeline_layout([per - 1] + [per] * (chunks - 2) + [per - 1 - mtp], mtp)


def pipeline_variants(num_layers: int, pp: int, vpp: int, mtp: int = 0, balanced: bool = False) -> list[dict]:
    """Ways Megatron can split the layers over PP x VPP: even, embedding/loss as layers, uneven ends, and for
    MTP models a layout string placing the embedding, MTP and loss. Where none of the flags splits the layers
    (uneven ends must be whole multiples of VPP), a layout string with the remainder on the last chunk, as
    Megatron Bridge's Kimi-K2 recipe writes for 61 layers over PP4 x VPP4: "Et*4|(t*4|)*14tL"; where none places
    them over a pipeline without VPP, or with VPP where `balanced` asks (a VPP the user pinned, a single move), a
    balanced string (_balanced_layout)."""
    chunks = pp * vpp
    layout = _mtp_layout(num_layers, mtp, chunks) if mtp and pp > 1 else None
    if layout:
        return [{"pipeline_layout": layout}]
    if num_layers % chunks == 0:
        return [{}]
    if (num_layers + 2) % chunks == 0:
        return [{"account_for_embedding": True, "account_for_loss": True}]
    even = [{"pipeline_layout": text}] if (text := _even_ranks_layout(num_layers, pp, vpp)) else []
    if pp >= 3:
        per_chunk = -(-num_layers // chunks)
        middle = (pp - 2) * vpp * per_chunk
        rest = num_layers - middle
        for first in range(vpp, vpp * per_chunk + 1, vpp):
            last = rest - first
            if 0 < last <= vpp * per_chunk and last % vpp == 0:
                return [{"first_stage_layers": first, "last_stage_layers": last}, *even]
    layout = _mtp_layout(num_layers, 0, chunks) if pp > 1 else None
    found = [{"pipeline_layout": layout}, *even] if layout else even
    return found or (_balanced_layout(num_layers, chunks, mtp) if vpp == 1 or balanced else [])


def _balanced_layout(num_layers: int, chunks: int, mtp: int) -> list[dict]:
    """The last resort where no split above places the layers (61 over PP25: every stage full but the last leaves it
    none, and 64 units do not divide by 25): stages of the floor and the ceiling of the mean, the larger from the second
    stage on, so the first and last, which hold the embedding and the MTP layers and loss, take the smaller where the
    remainder allows ("Ett|(t*3|)*11(tt|)*12ttmL"); the search's re-split moves layers from there
    (planner/resplit.py). None (an empty list) where a stage would hold no layer. With VPP only where asked
    (pipeline_variants `balanced`): the full search over every VPP stays within its time (bench/bench_plan.py: 1.2 s
    for DeepSeek-V3 on 1,024 H100 with them, 0.85 s without)."""
    base, extra = divmod(num_layers, chunks)
    if chunks < 2 or base == 0:
        return []
    counts = [base + (1 <= i <= extra) for i in range(chunks)] if extra < chunks - 1 else \
        [base + (i < extra) for i in range(chunks)]
    return [{"pipeline_layout": write_pipeline_layout(counts, mtp)}]


def _even_ranks_layout(num_layers: int, pp: int, vpp: int) -> str | None:
    """A layout string giving every pipeline rank the same layers where they divide over PP but not over PP x VPP
    (36 layers over PP4 x VPP6: 9 a rank, in virtual stages of 2, 2, 2, 1, 1, 1): the uneven-ends split puts 6 on
    the end ranks and 12 in the middle, so a micro-batch or knob set the middle ranks cannot hold would be pruned
    before the re-split could even them out (planner/resplit.py rebalance_best re-splits only what fits)."""
    if pp < 2 or vpp < 2 or num_layers % pp or num_layers % (pp * vpp) == 0 or num_layers // pp < vpp:
        return None
    per_rank = num_layers // pp
    base, extra = divmod(per_rank, vpp)
    return write_pipeline_layout([base + (v < extra) for v in range(vpp) for _ in range(pp)], 0)


def pinned_split(spec: ModelSpec, text: str, fixed: dict) -> None:
    """Check a layout string pinned with `--fix pipeline_layout=...`: it places this model's layers, MTP layers,
    embedding and loss (the checks `estimate` makes), and its stage count is PP x VPP of any pinned PP / VPP."""
    parsed = parse_pipeline_layout(text)
    stages = len(parsed)
    if bridge_refuses_vpp(spec, max(fixed.get("vpp", 1), stages // fixed.get("pp", stages))):
        raise MoetuneError(f"--fix pipeline_layout has {stages} stages, but {spec.name} is a Mamba hybrid, which "
                           "Megatron Bridge runs without VPP: give one stage per pipeline rank")
    # at one stage a rank (VPP 1): whether MTP sits in its rank's last virtual stage is asked of each layout (_split_ok)
    check_placement(parsed, stages, spec.num_layers, spec.mtp_num_layers, named="--fix pipeline_layout:")
    pp, vpp = fixed.get("pp"), fixed.get("vpp")
    if stages < 2:
        raise MoetuneError("--fix pipeline_layout has 1 stage, which is no pipeline: drop it (or --fix pp=1), "
                           "or split the string into PP x VPP stages with '|'")
    if (pp and stages % pp) or (pp and vpp and pp * vpp != stages) or (vpp and stages % vpp):
        raise MoetuneError(f"--fix pipeline_layout has {stages} stages: it needs PP > 1 with PP x VPP = {stages}"
                           + (f" (pinned PP {pp}, VPP {vpp or 'any'})" if pp or vpp else "")
                           + "; fix the string or the pinned pp/vpp")


def bridge_refuses_vpp(spec: ModelSpec, vpp: int) -> bool:
    """A Mamba hybrid (Nemotron-H) on VPP > 1: Megatron Bridge's HybridModelProvider asserts "Virtual pipeline model
    parallelism is temporarily unsupported in Hybrid models" (models/hybrid/hybrid_provider.py provide)."""
    return spec.mamba is not None and vpp > 1


def splits_for(spec: ModelSpec, pp: int, vpp: int, balanced: bool = False) -> list[dict]:
    """pipeline_variants for this model (`balanced`: with a balanced layout string as the last resort at any VPP),
    none where Bridge refuses the VPP (bridge_refuses_vpp). A Mamba hybrid's split is written as '|' separators in
    hybrid_layer_pattern, which Megatron-Core's HybridModel reads in place of a layout string (planner/config_map.py
    hybrid_fields)."""
    if bridge_refuses_vpp(spec, vpp):
        return []
    if pp > 1 and shares_index(spec):  # DSA index sharing: groups kept whole
        counts = index_group_counts(spec, pp * vpp)
        return [{"pipeline_layout": write_pipeline_layout(counts, spec.mtp_num_layers)}] if counts else []
    return pipeline_variants(spec.num_layers, pp, vpp, spec.mtp_num_layers, balanced)


def _splits(spec: ModelSpec, pp: int, vpp: int, fixed: dict) -> list[dict]:
    """splits_for (balanced at a pinned VPP), or the pinned layout string where its stage count is PP x VPP."""
    if "pipeline_layout" not in fixed:
        return splits_for(spec, pp, vpp, balanced="vpp" in fixed)
    stages = layout_stages(fixed["pipeline_layout"])
    legal = pp > 1 and pp * vpp == stages and not bridge_refuses_vpp(spec, vpp)
    return [{"pipeline_layout": fixed["pipeline_layout"]}] if legal else []


def tp_cp_sizes(gpu: GpuSpec, world: int, seq: int, fixed: dict) -> tuple[list[int], list[int]]:
    """The TP and CP sizes the search tries, pins honoured: TP powers of two inside the NVLink domain (tp_choices; one
    pinned tp_comm_overlap on asks for TP > 1: Megatron Bridge turns it off at TP 1), CP powers of two up to
    seq/1024 (a pinned cp_comm_type other than p2p asks for CP > 1: at CP 1 there is nothing to exchange, and
    estimate refuses another --cp-comm-type there; layout/knobs.py CP1_COMM_TYPES)."""
    tps = [fixed["tp"]] if "tp" in fixed else tp_choices(gpu, world)
    tps = [t for t in tps if t > 1 or fixed.get("tp_comm_overlap") is not True]
    cps = [fixed["cp"]] if "cp" in fixed else _pow2(max(1, seq // 1024))
    return tps, [c for c in cps if c > 1 or fixed.get("cp_comm_type", "auto") in CP1_COMM_TYPES]


def enumerate_layouts(spec: ModelSpec, gpu: GpuSpec, world: int, wl: Workload, fixed: dict,
                      gbs_excluded: set | None = None) -> list[Layout]:
    """Every legal layout, honouring `fixed` layout fields (tp, cp, pp, vpp, ep, etp, pipeline_layout). The global
    batch is checked last: otherwise legal layouts it rules out (GBS not a multiple of DP) go to `gbs_excluded`.
    In TP, CP, PP, VPP, EP, ETP order (the ranking breaks exact ties by it), each split innermost."""
    tps, cps, pps, vpps, eps, etps = _sizes(spec, gpu, world, wl.seq_length, fixed)
    judge = _Judge(spec, world, job_gpu(gpu, world).nvlink_domain, wl.seq_length, fixed)
    gbs = wl.global_batch_size
    out = []
    for tp, cp, pp in product(tps, cps, pps):
        if world % (tp * cp * pp):
            continue
        dp = world // (tp * cp * pp)
        experts = [(ep, etp) for ep, etp in product(eps, etps) if not world % (ep * etp * pp)]
        for vpp in (v for v in vpps if v == 1 or pp > 1):  # parallel_state.py: interleaving needs PP > 1
            if not experts or not judge.exchange(cp, tp):
                continue
            if not (templates := [t for t in judge.templates(pp, vpp) if judge.sequence(t, tp, cp, dp)]):
                continue
            for ep, etp in experts:
                if not judge.shapes(templates[0], tp, cp, ep, etp):
                    continue
                for template in templates:
                    lay = stamp(template, tp, cp, ep, etp)
                    if gbs is not None and gbs % dp:
                        if gbs_excluded is not None:
                            gbs_excluded.add(lay)
                        continue
                    out.append(lay)
    return out


def _sizes(spec: ModelSpec, gpu: GpuSpec, world: int, seq: int, fixed: dict) -> tuple[list[int], ...]:
    """The TP, CP, PP, VPP, EP and ETP sizes the search crosses, pins honoured; a pinned size below 1 none (Layout
    refuses it whatever the rest)."""
    def choice(name, values):
        return [fixed[name]] if name in fixed else values

    tps, cps = tp_cp_sizes(gpu, world, seq, fixed)
    tps = [t for t in tps if dsa_heads_refusal(spec, t, gpu.arch) is None]
    pps = choice("pp", [p for p in _divisors(world) if p <= spec.num_layers])
    vpps = choice("vpp", list(VPP_CHOICES))
    eps = choice("ep", [e for e in _divisors(spec.num_moe_experts or 1) if world % e == 0])
    etps = choice("etp", tp_choices(gpu, world))
    return tuple([v for v in values if v >= 1] for values in (tps, cps, pps, vpps, eps, etps))


class _Judge:
    """enumerate_layouts' verdicts, each asked once of the few sizes it reads (a few dozen verdicts cover ~6k
    layouts): the CP exchange of (CP, TP), the splits Megatron accepts at (PP, VPP), the shapes of (TP, CP, EP, ETP),
    and the sequence rules of (DP, PP, VPP, TP, CP, SP), which validate_workload reads alone of the layout (with the
    probe, the model and the sequence, the same for every layout here; the global batch is checked apart)."""

    def __init__(self, spec: ModelSpec, world: int, job_domain: int, seq: int, fixed: dict):
        self.spec, self.world, self.job_domain, self.fixed = spec, world, job_domain, fixed
        self.probe = Workload(seq_length=seq, micro_batch_size=1)
        self._exchanges: dict[tuple, bool] = {}
        self._templates: dict[tuple, list[Layout]] = {}
        self._shapes: dict[tuple, bool] = {}
        self._sequences: dict[tuple, bool] = {}

    def exchange(self, cp: int, tp: int) -> bool:
        """A CP exchange runs (walls/context_parallel.py)."""
        if (cp, tp) not in self._exchanges:
            self._exchanges[(cp, tp)] = cp_exchange_exists(self.spec, cp, tp, self.job_domain,
                                                           self.fixed.get("cp_comm_type", "auto"))
        return self._exchanges[(cp, tp)]

    def templates(self, pp: int, vpp: int) -> list[Layout]:
        """The splits tried at (PP, VPP) (_splits) that Layout and Megatron accept, each as a layout of TP, CP, EP
        and ETP 1: Layout's other checks read those sizes only through the meshes' divisibility, which the
        enumeration asks itself, and the split's through none (_split_ok)."""
        if (pp, vpp) not in self._templates:
            found = []
            for extra in _splits(self.spec, pp, vpp, self.fixed):
                try:
                    template = Layout(world_size=self.world, pp=pp, vpp=vpp, **extra)
                except MoetuneError:
                    continue
                if _split_ok(self.spec, template):
                    found.append(template)
            self._templates[(pp, vpp)] = found
        return self._templates[(pp, vpp)]

    def shapes(self, template: Layout, tp: int, cp: int, ep: int, etp: int) -> bool:
        """Heads, groups, experts and widths (and linear heads over CP) divide (validate_shapes)."""
        if (key := (tp, cp, ep, etp)) not in self._shapes:
            self._shapes[key] = _shapes_ok(self.spec, stamp(template, tp, cp, ep, etp))
        return self._shapes[key]

    def sequence(self, template: Layout, tp: int, cp: int, dp: int) -> bool:
        """The probe (micro-batch 1, no global batch) passes validate_workload."""
        if (key := (dp, template.pp, template.vpp, tp, cp, tp > 1)) not in self._sequences:
            lay = stamp(template, tp, cp, 1, 1)
            self._sequences[key] = _sequence_ok(self.spec, lay, self.probe)
        return self._sequences[key]


def _shapes_ok(spec: ModelSpec, lay: Layout) -> bool:
    try:
        validate_shapes(spec, lay)
    except MoetuneError:
        return False
    return True


def _sequence_ok(spec: ModelSpec, lay: Layout, probe: Workload) -> bool:
    try:
        validate_workload(lay, probe, spec)
    except MoetuneError:
        return False
    return True


def _split_ok(spec: ModelSpec, lay: Layout) -> bool:
    try:
        pipeline_chunks(lay, spec.num_layers, spec.mtp_num_layers)
    except MoetuneError:
        return False
    if not keeps_index_groups(spec, lay):  # DSA index sharing: every chunk starts on a computing layer
        return False
    return True
