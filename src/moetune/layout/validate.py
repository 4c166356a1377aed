"""Legality of a layout for a given model and workload; each failure names the rule it breaks.

The divisibility rules are the ones Megatron-Core asserts when it builds the model
(transformer_config.py __post_init__, attention.py, moe/experts.py, parallel_state.py) and that
Megatron-LM's arguments.py checks for the batch.
"""

from dataclasses import dataclass

from moetune.errors import MoetuneError
from moetune.layout.chunked_attention import chunk_refusal
from moetune.layout.dsa_split import dsa_heads, dsa_pipeline_split, refuse_unpriced
from moetune.layout.knobs import Knobs
from moetune.layout.layout import Layout
from moetune.layout.pipeline import pipeline_chunks
from moetune.memo import remembered
from moetune.specs.model import ModelSpec

# Bounds that keep a workload's token counts inside 64-bit arithmetic: 8M-token sequences, 64M sequences a batch
MAX_SEQ = 2 ** 23
MAX_BATCH = 2 ** 26


@dataclass(kw_only=True, slots=True, frozen=True)
class Workload:
    """What one training iteration processes."""

    seq_length: int = 4096
    micro_batch_size: int = 1
    global_batch_size: int | None = None  # None: one micro-batch per DP rank per pipeline stage (m = PP)

    def __post_init__(self) -> None:
        for name in ("seq_length", "micro_batch_size"):
            if getattr(self, name) < 1:
                raise MoetuneError(f"{name} ({getattr(self, name)}) must be at least 1")
        if self.global_batch_size is not None and self.global_batch_size < 1:
            raise MoetuneError(f"global_batch_size ({self.global_batch_size}) must be at least 1")
        for name, most in (("seq_length", MAX_SEQ), ("micro_batch_size", MAX_BATCH),
                           ("global_batch_size", MAX_BATCH)):
            if (getattr(self, name) or 0) > most:
                raise MoetuneError(f"{name} ({getattr(self, name):,}) is past the {most:,} moetune plans for: "
                                   "lower it (a digit too many?)")

    def gbs(self, layout: Layout) -> int:
        if self.global_batch_size is not None:
            return self.global_batch_size
        return self.micro_batch_size * layout.dp * layout.pp

    def num_microbatches(self, layout: Layout) -> int:
        return self.gbs(layout) // (self.micro_batch_size * layout.dp)


def tokens_per_gpu(global_batch: float, seq_length: float, step_seconds: float, gpus: float) -> float:
    """Tokens a GPU trains a second: global batch x sequence / step seconds / GPUs, as Megatron Bridge's performance
    summaries count tokens/s/GPU (a log's step, a runs CSV's step_time_s, a sweep's timed median alike)."""
    return global_batch * seq_length / step_seconds / gpus


def ep_first_sizes(experts: int, ep: int, etp: int) -> tuple[int, int]:
    """The seeds' EP-first split of the same EP x ETP expert ranks (seeds/000 Parallel Folding: EP before extra TP for
    experts): the largest EP that divides the experts and the ranks, the rest as ETP (EP2 x ETP8 of Mixtral's 8
    experts: EP8 x ETP2)."""
    ranks = ep * etp
    best = max(d for d in range(1, min(experts, ranks) + 1) if experts % d == 0 and ranks % d == 0)
    return best, ranks // best


def interleaves(pp: int, vpp: int, microbatches: int) -> bool:
    """Megatron's interleaved schedule runs micro-batches in groups of microbatch_group_size_per_vp_stage (default PP)
    and refuses a last group shorter than PP (megatron/core/pipeline_parallel/schedules.py,
    forward_backward_pipelining_with_interleaving): with VPP, the micro-batch count must be a multiple of PP."""
    return vpp == 1 or microbatches % pp == 0


def _require(ok: bool, message: str, same_as: tuple[str, ...] = (), flags_fix: str = "", file_fields: str = "") -> None:
    if not ok:
        raise MoetuneError(message, same_as=same_as, flags_fix=flags_fix, file_fields=file_fields)


def _tp_fits_query_groups(spec: ModelSpec, tp: int) -> None:
    """TP must divide the KV groups or be a multiple of them (transformer_config.py asserts one or the other): past
    them, Megatron-Core core_v0.16.0 and later (f7dfb99795) give each rank one group's K and V (walls/flops.py
    kv_groups_per_rank)."""
    g, fix = spec.num_query_groups, "choose a --tp that divides it or is a multiple of it"
    if spec.qk_layernorm == "full":  # no TP past the groups (below): a multiple is no fix
        fix = f"choose a --tp that divides it: {spec.name}'s key norm spans all heads, which moetune keeps within them"
    _require(g % tp == 0 or tp % g == 0, f"num_query_groups ({g}) must be a multiple or a divisor of TP ({tp}); {fix}",
             ("shape.query_groups_vs_tp",))
    # One norm over all heads' keys (MiniMax-M2) is split over TP by groups; a rank holding a copy of one group has no
    # shard of it that Megatron-Core defines, so moetune keeps such a model's TP within its groups
    _require(tp <= g or spec.qk_layernorm != "full",
             f"TP ({tp}) > num_query_groups ({g}) on {spec.name}, whose key norm spans all heads: moetune does not "
             "model how Megatron-Core shards it there; choose a --tp that divides num_query_groups")


def _divides(a: int, a_name: str, b: int, b_name: str, fix: str, same_as: str | None = None) -> None:
    """`same_as`: the config-only rule (rules.yaml) that says this fault where the config states the shape."""
    _require(b % a == 0, f"{b_name} ({b}) must be divisible by {a_name} ({a}); {fix}", (same_as,) if same_as else ())


def validate_model_layout(spec: ModelSpec, layout: Layout) -> None:
    """Model-shape rules: heads, groups, experts and FFN widths vs TP/EP/ETP; layers vs PP x VPP."""
    validate_shapes(spec, layout)
    pipeline_chunks(layout, spec.num_layers, spec.mtp_num_layers)  # raises on layers vs PP x VPP
    dsa_pipeline_split(spec, layout)
    dsa_heads(spec, layout)  # Hopper's FlashMLA head groups; estimate checks the GPU's own


def mamba_cp_refusal(heads: int, groups: int, tp: int, cp: int) -> str | None:
    """Why CP cannot split a Mamba-2 mixer of `heads` heads in `groups` groups at this TP, or None: Megatron-Core
    runs CP over it as an all-to-all of whole heads per TP rank, and its groups split over CP or replicate across it
    (megatron/core/ssm/mamba_context_parallel.py asserts). None too where TP does not divide them (its own rule)."""
    if cp == 1 or heads % tp or groups % tp:
        return None
    h, g = heads // tp, groups // tp
    if h % cp:
        return f"mamba heads per TP rank ({h}) must be divisible by CP ({cp})"
    return None if g % cp == 0 or cp % g == 0 else \
        f"mamba groups per TP rank ({g}) and CP ({cp}) must divide one or the other"


def gdn_cp_refusal(key_heads: int, value_heads: int, tp: int, cp: int) -> str | None:
    """Why CP cannot split a gated delta-net mixer at this TP, or None: each TP rank's key and value heads split over
    CP (megatron/core/ssm/gated_delta_net/common.py)."""
    if cp == 1 or key_heads % tp or value_heads % tp:
        return None
    for heads, name in ((key_heads, "linear_num_key_heads"), (value_heads, "linear_num_value_heads")):
        if (heads // tp) % cp:
            return f"{name} per TP rank ({heads // tp}) must be divisible by CP ({cp})"
    return None


def _linear_mixer_cp(spec: ModelSpec, layout: Layout) -> None:
    """Mamba-2 and gated delta-net layers run CP as an all-to-all over their heads (the two refusals above, which the
    config rules cp.mamba_heads and cp.gdn_heads ask too, through rules/derive.py)."""
    fix = "choose a --cp that divides it (or a smaller --tp, which leaves more heads on each rank)"
    why = (spec.mamba and mamba_cp_refusal(spec.mamba.num_heads, spec.mamba.n_groups, layout.tp, layout.cp)) or (
        spec.gdn and gdn_cp_refusal(spec.gdn.num_key_heads, spec.gdn.num_value_heads, layout.tp, layout.cp))
    _require(not why, f"{why}; {fix}")


def validate_shapes(spec: ModelSpec, layout: Layout) -> None:
    """The divisibility rules of validate_model_layout, without the pipeline split."""
    tp_fix = "choose a --tp that divides it"
    if spec.tp1_only and layout.tp > 1:
        raise MoetuneError(f"TP ({layout.tp}) > 1 on {spec.name}: {spec.tp1_only}; use --tp 1")
    _divides(layout.tp, "TP", spec.num_attention_heads, "num_attention_heads", tp_fix, "shape.heads_divisible_by_tp")
    if spec.attention not in ("mla",):
        _tp_fits_query_groups(spec, layout.tp)
    if spec.num_dense_layers:
        _divides(layout.tp, "TP", spec.ffn_hidden_size, "ffn_hidden_size", tp_fix, "shape.ffn_divisible_by_tp")
    if spec.moe_shared_expert_intermediate_size:
        _divides(layout.tp, "TP", spec.moe_shared_expert_intermediate_size, "shared expert width", tp_fix,
                 "shape.shared_expert_divisible_by_tp")
    if spec.gdn:
        _divides(layout.tp, "TP", spec.gdn.num_key_heads, "linear_num_key_heads", tp_fix)
    if spec.mamba:
        _divides(layout.tp, "TP", spec.mamba.num_heads, "mamba_num_heads", tp_fix)
        _divides(layout.tp, "TP", spec.mamba.n_groups, "mamba n_groups", tp_fix)
    _linear_mixer_cp(spec, layout)
    if spec.num_moe_layers:
        _divides(layout.ep, "EP", spec.num_moe_experts, "num_moe_experts", "choose an --ep that divides it",
                 "scale.experts_divisible")
        _divides(layout.etp, "ETP", spec.moe_ffn_hidden_size, "moe_ffn_hidden_size", "choose an --etp that divides it",
                 "shape.moe_ffn_divisible_by_etp")
        if layout.etp > 1 and (spec.add_proj_bias or spec.add_mlp_bias):  # Megatron's add_bias_linear
            raise MoetuneError(
                f"ETP ({layout.etp}) > 1 on {spec.name}, whose linear layers have biases: Megatron-Core supports "
                "biases in MoE layers only at ETP 1 (transformer_config.py); use --etp 1 (EP for the experts)"
            )
        if layout.tp > 1 and not layout.sp:
            raise MoetuneError(
                f"TP ({layout.tp}) > 1 with MoE layers needs sequence parallel (Megatron-Core asserts it); turn it "
                "on (model.sequence_parallel=true, or drop --no-sequence-parallel)"
            )
    elif layout.ep > 1:
        raise MoetuneError(f"ep ({layout.ep}) > 1 but {spec.name} has no MoE layers; use --ep 1")


def validate_workload(layout: Layout, workload: Workload, spec: ModelSpec | None = None) -> None:
    """Batch and sequence rules: GBS vs MBS x DP, sequence vs TP (sequence parallel) and 2 x CP; with `spec`, its
    chunked attention's CP rule too (layout/chunked_attention.py chunk_refusal)."""
    gbs, mbs, seq, dp = workload.gbs(layout), workload.micro_batch_size, workload.seq_length, layout.dp
    if gbs % (mbs * dp):  # each message built only where it is raised: the planner validates every layout
        _require(False, f"global batch size ({gbs}) must be divisible by micro batch size x DP ({mbs} x {dp} = "
                        f"{mbs * dp})", same_as=("batch.gbs_divisible",), flags_fix="change --gbs or --mbs",
                 file_fields="workload (global_batch_size, micro_batch_size)")
    m = workload.num_microbatches(layout)
    if not interleaves(layout.pp, layout.vpp, m):
        _require(False, f"the number of micro-batches ({m} = GBS {gbs} / (MBS x DP) {mbs * dp}) "
                        f"must be a multiple of PP ({layout.pp}) with VPP > 1 (Megatron's interleaved schedule)",
                 flags_fix="change --gbs or --mbs, or drop --vpp",
                 file_fields="workload (global_batch_size, micro_batch_size) or layout's vpp")
    why = sp_refusal(seq, layout.tp, layout.cp, layout.sp)
    _require(not why, why or "", same_as=("sp.seq_divisible_by_tp",))
    why = cp_chunk_refusal(seq, layout.cp)
    _require(not why, why or "", same_as=("longctx.cp_seq_divisible",))
    why = spec and chunk_refusal(spec, seq, layout.cp)
    _require(not why, why or "")


def sequence_refusal(seq: int, tp: int, cp: int, sp: bool) -> str | None:
    """Megatron's sequence rules for TP x CP, one line (None: they hold): sp_refusal, then cp_chunk_refusal."""
    return sp_refusal(seq, tp, cp, sp) or cp_chunk_refusal(seq, cp)


def sp_refusal(seq: int, tp: int, cp: int, sp: bool) -> str | None:
    """With sequence parallelism TP divides the sequence and each CP rank's seq/CP tokens (mappings.py)."""
    if sp and seq % tp:
        return f"sequence length ({seq}) must be divisible by TP (sequence parallel) ({tp}); change --seq or --tp"
    if sp and cp > 1 and (seq // cp) % tp:
        return (f"tokens per CP rank (seq/CP) ({seq // cp}) must be divisible by TP (sequence parallel) ({tp}); "
                "change --seq, --cp or --tp")
    return None


def cp_chunk_refusal(seq: int, cp: int) -> str | None:
    """2 x CP divides the sequence (load-balanced causal CP chunks, Megatron Bridge's ConfigContainer.validate)."""
    if cp > 1 and seq % (2 * cp):
        return (f"sequence length ({seq}) must be divisible by 2 x CP (load-balanced causal CP chunks) ({2 * cp}); "
                "change --seq or --cp")
    return None


# The (model, layout, workload) triples validate passed: the checks read nothing else, so one that passed passes again,
# and the planner's re-split estimates a layout again under each knob set it weighs (92 distinct of a DeepSeek-V3
# plan's 254 estimates). A refusal is not remembered (memo.remembered keeps nothing where the check raises): it is
# raised again, the same, every time it is asked.
_VALID: dict = {}


def validate(spec: ModelSpec, layout: Layout, workload: Workload) -> None:
    remembered(_VALID, (spec, layout, workload), lambda: _validate(spec, layout, workload), 4096)


def _validate(spec: ModelSpec, layout: Layout, workload: Workload) -> bool:
    refuse_unpriced(spec)
    validate_model_layout(spec, layout)
    validate_workload(layout, workload, spec)
    return True


def validate_optimizer_copies(layout: Layout, knobs: Knobs) -> None:
    """The distributed optimizer's copies (num_distributed_optimizer_instances) must split DP x CP and EDP evenly:
    parallel_state.py initialize_model_parallel asserts it."""
    if (n := knobs.num_distributed_optimizer_instances) > 1:
        for group, size in (("DP x CP", layout.dp * layout.cp), ("EDP", layout.edp)):
            if size % n:
                raise MoetuneError(f"num_distributed_optimizer_instances ({n}) must divide {group} ({size}): each "
                                   "copy of the distributed optimizer takes an equal share of those ranks")


def validate_knobs(spec: ModelSpec, layout: Layout, knobs: Knobs) -> None:
    """Knob settings Megatron refuses for this model and layout (each knob's own range is checked in Knobs)."""
    validate_optimizer_copies(layout, knobs)
    if knobs.hcp_a2a_size is not None and layout.cp == 1:
        raise MoetuneError(f"hierarchical CP sizes (a2a group {knobs.hcp_a2a_size}) need CP > 1; drop --hcp-a2a-size "
                           "and --cp-comm-type a2a+p2p, or set --cp")
    if knobs.dispatcher == "deepep" and layout.ep * layout.etp == 1 and spec.num_moe_experts:
        raise MoetuneError("DeepEP needs expert ranks to send to: Megatron-Core asserts ETP x EP > 1 "
                           "(moe/token_dispatcher.py); use --dispatcher alltoall at EP 1, or --ep > 1")
    if "mla_up_proj" in knobs.effective_modules and spec.mla is None:
        raise MoetuneError(f"recompute module mla_up_proj needs multi-latent attention; {spec.name} has none "
                           "(Megatron-Core refuses it, transformer_config.py): drop it")
    if knobs.token_imbalance is not None and layout.ep > 1 and knobs.token_imbalance > layout.ep:
        raise MoetuneError(f"token_imbalance ({knobs.token_imbalance:g}) cannot exceed EP ({layout.ep}): the busiest "
                           f"of {layout.ep} expert ranks holds at most every token, {layout.ep}x the mean")
