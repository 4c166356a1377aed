"""One configuration in, every wall out: the function behind ``moetune estimate``."""

from dataclasses import dataclass, field, fields

from moetune.configio.names import LAUNCHER
from moetune.layout.dsa_split import dsa_heads, refuse_unpriced
from moetune.layout.gemm_shapes import Widths, validate_gemm_shapes
from moetune.layout.knobs import Knobs
from moetune.layout.layout import Layout
from moetune.layout.ranks import groups_leaving_domain, job_nvlink_domain
from moetune.layout.validate import Workload, validate, validate_knobs
from moetune.memo import remembered
from moetune.specs.hardware import GpuSpec, catalog_unchanged
from moetune.specs.model import ModelSpec
from moetune.walls.context_parallel import resolve_auto
from moetune.walls.efficiency import efficiency
from moetune.walls.memory import StageMemory, memory_peaks, memory_wall
from moetune.walls.step import step_seconds, step_time

# Estimate field -> the result key naming the user's file it came from (one map: results, from_json, plan)
USER_FILE_KEYS = {"efficiency_overrides": "efficiency_file", "overheads": "overheads_file"}


def user_files(efficiency_overrides, overheads) -> dict[str, str | None]:
    """The user's files in use, by what they hold: efficiency_file, overheads_file (absolute paths; None for
    constants a saved result carried without its file's name)."""
    tables = {"efficiency_overrides": efficiency_overrides, "overheads": overheads}
    return {USER_FILE_KEYS[k]: getattr(table, "path", None) for k, table in tables.items() if table}


@dataclass(kw_only=True, slots=True)
class Estimate:
    model: ModelSpec
    gpu: GpuSpec
    layout: Layout
    workload: Workload
    knobs: Knobs
    stages: list[StageMemory]
    time: dict | None = None  # filled by the time model
    # knobs left to the platform defaults, and global_batch_size where it was left to MBS x DP x PP
    defaulted: list[str] = field(default_factory=list)
    # the user's memory overheads and efficiency constants, kept so that what-if variants (explain's Retune moves,
    # the BF16 twin, the smallest fitting layout) are estimated under the same files as this one
    overheads: dict | None = None
    efficiency_overrides: dict | None = None
    # the launch config this configuration was read from (estimate/explain --config): its rules read it as `check`
    # does, fields the layout and knobs do not carry included (a variant is another configuration, without it)
    source_config: dict | None = field(default=None, repr=False, compare=False)
    # facts derived from this estimate alone that several readers ask (rule_findings.cp_sizing: up to a dozen
    # validations), keyed by the fact's name alone; not an init field, so dataclasses.replace gives a copy with other
    # parts (another GPU: cp_sizing reads its NVLink domain) a memo of its own, never this one's answers
    memo: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def variant(self, *, layout: Layout | None = None, workload: Workload | None = None,
                knobs: Knobs | None = None, gpu: GpuSpec | None = None, with_memory: bool = True) -> "Estimate":
        """This configuration with the given parts replaced, estimated under the same user files (with_memory=False:
        the time alone, as `estimate` has it)."""
        return estimate(self.model, gpu or self.gpu, layout or self.layout, workload or self.workload,
                        knobs or self.knobs, self.overheads, efficiency_overrides=self.efficiency_overrides,
                        with_memory=with_memory)

    @property
    def efficiency(self) -> dict[str, float]:
        """The efficiency constants this estimate used (shipped, with the user's file on top)."""
        return efficiency(self.gpu.key, self.efficiency_overrides)

    @property
    def user_files(self) -> dict[str, str | None]:
        return user_files(self.efficiency_overrides, self.overheads)

    @property
    def launcher(self) -> str:
        """The frontend that runs this configuration: "megatron-lm" where it was read from Megatron-LM arguments (its
        config's cluster.launcher; a saved result's "launcher", planner/from_json.py saved_launcher), else "bridge"."""
        return (self.source_config or {}).get(LAUNCHER) or "bridge"

    @property
    def peak_bytes(self) -> int:
        return max(s.total for s in self.stages)

    @property
    def worst_stage(self) -> int:
        return max(self.stages, key=lambda s: s.total).stage

    @property
    def host_peak_bytes(self) -> int:
        return max((s.host_bytes for s in self.stages), default=0)

    @property
    def host_fits(self) -> bool:
        """What the optimizer's CPU offload keeps on the host fits the host memory of a GPU (unknown: assumed)."""
        return _host_fits(self.host_peak_bytes, self.gpu)

    @property
    def fits(self) -> bool:
        return self.fits_on(self.gpu)

    def fits_on(self, gpu: GpuSpec) -> bool:
        """Whether this estimate's peak fits `gpu`'s memory (plan: the search's budget, the GPU less --headroom) and
        its offloaded optimizer states the host memory of this estimate's GPU."""
        return fits_memory(self.peak_bytes, self.host_peak_bytes, gpu, self.gpu)

    @property
    def job_domain(self) -> int:
        """Consecutive ranks that share an NVLink domain in this job (layout/ranks.py job_nvlink_domain)."""
        return job_nvlink_domain(self.layout.world_size, self.gpu.gpus_per_node, self.gpu.nvlink_domain)

    def workload_json(self) -> dict:
        """The batch priced: sequence, micro- and global batch, and the micro-batches a step on each DP rank."""
        wl, lay = self.workload, self.layout
        return {"seq_length": wl.seq_length, "micro_batch_size": wl.micro_batch_size, "global_batch_size": wl.gbs(lay),
                "num_microbatches": wl.num_microbatches(lay)}

    def to_json(self) -> dict:
        lay = self.layout
        out = {
            "model": self.model.name,
            "model_source": self.model.name if self.model.source.startswith("built-in") else self.model.source,
            "gpu": self.gpu.ref,
            "gpus": lay.world_size,
            # recorded so that a saved result read back (explain --plan, check, emit, diagnose --plan) words its fixes
            # for the launch that runs it, and its rules weigh it as they weighed it here
            "launcher": self.launcher,
            "layout": lay.as_dict(),
            "pipeline": {"first_stage_layers": lay.first_stage_layers, "last_stage_layers": lay.last_stage_layers,
                         "pipeline_layout": lay.pipeline_layout, "account_for_embedding": lay.account_for_embedding,
                         "account_for_loss": lay.account_for_loss, "sequence_parallel": lay.sp,
                         "mtp_num_layers": self.model.mtp_num_layers, "vocab_divisor": self.model.vocab_divisor},
            "workload": self.workload_json(),
            "knobs": knobs_json(self.knobs, self.layout.ep),
            "stages": [
                {"stage": s.stage, "params": s.params, "in_flight_microbatches": s.in_flight_microbatches,
                 "bytes": {**s.items, "total": s.total}, "host_bytes": s.host_bytes}
                for s in self.stages
            ],
            "rank_order": "tp-cp-ep-dp-pp",
            "nvlink": {"domain": self.gpu.nvlink_domain, "job_domain": self.job_domain,
                       "groups_leaving_domain": groups_leaving_domain(lay, self.job_domain)},
            "memory": {
                "peak_bytes": self.peak_bytes, "capacity_bytes": self.gpu.capacity_bytes,
                "fits": self.fits, "worst_stage": self.worst_stage,
                # the optimizer's CPU offload, per GPU's share of the host (capacity null: not known)
                "host_peak_bytes": self.host_peak_bytes, "host_capacity_bytes": self.gpu.host_capacity_bytes,
                "host_fits": self.host_fits,
            },
        }
        # a cluster file's figures, so an edited or moved file cannot change them, or a catalog GPU a config's own
        # topology changed (configio/cluster.py): its name alone would reload the catalog's
        if self.gpu.ref != self.gpu.key or not catalog_unchanged(self.gpu):
            out["gpu_spec"] = {f.name: getattr(self.gpu, f.name) for f in fields(self.gpu)}
        if self.time is not None:
            out["time"] = self.time
        if self.defaulted:
            out["defaulted"] = self.defaulted
        # the user's files travel with the result, so `explain --plan` and `emit` rebuild it under the same numbers
        if self.efficiency_overrides:
            out["efficiency_overrides"] = self.efficiency_overrides
        if self.overheads:
            out["overheads"] = self.overheads
        return {**out, **self.user_files}


def fits_memory(peak: int, host_peak: int, budget: GpuSpec, gpu: GpuSpec) -> bool:
    """Estimate.fits_on(budget) of an estimate on `gpu` whose largest stage holds `peak` bytes and whose ranks keep at
    most `host_peak` on the host (unknown host memory: assumed to fit), from those figures alone (plan's re-split)."""
    return peak <= budget.capacity_bytes and _host_fits(host_peak, gpu)


def _host_fits(host_peak: int, gpu: GpuSpec) -> bool:
    cap = gpu.host_capacity_bytes
    return cap is None or host_peak <= cap


def knobs_json(k: Knobs, ep: int) -> dict:
    return {
        "precision": k.precision, "recompute": k.recompute, "recompute_modules": sorted(k.effective_modules),
        "distributed_optimizer": k.distributed_optimizer, "optimizer_offload_fraction": k.optimizer_offload_fraction,
        "optimizer": k.optimizer,
        "main_grads_fp32": k.main_grads_fp32, "dispatcher": k.dispatcher, "flex_num_sms": k.num_sms or None,
        "cuda_graph_scope": list(k.cuda_graph_scope), "ep_overlap": k.ep_overlap, "delay_wgrad": k.delay_wgrad,
        # the busiest-rank factor charged, and the user's own (null: moetune's default, which a saved result rebuilt
        # later takes again)
        "routing": k.routing, "token_imbalance": k.imbalance_at(ep), "token_imbalance_set": k.token_imbalance,
        "tp_comm_overlap": k.tp_comm_overlap,
        "adam_moments_bytes": k.adam_moments_bytes, "offload_modules": sorted(k.offload_modules),
        "overlap_grad_reduce": k.overlap_grad_reduce, "overlap_param_gather": k.overlap_param_gather,
        "fp8_output_proj": k.fp8_output_proj, "cp_comm_type": k.cp_comm_type, "hcp_a2a_size": k.hcp_a2a_size,
        "fp8_param_gather": k.fp8_params,  # as sized: the recipe preset's where not given
        "fp4_param_gather": k.fp4_params, "moe_router_dtype": k.moe_router_dtype,
        # the switches as given (null: the preset's, which a move to another recipe takes again), as token_imbalance_set
        "fp8_param_gather_set": k.fp8_param_gather, "fp4_param_gather_set": k.fp4_param_gather,
        "torch_fsdp2": k.torch_fsdp2, "fsdp2_reshard_after_forward": k.fsdp2_reshard_after_forward,
        "megatron_fsdp": k.megatron_fsdp, "hidden_dropout": k.hidden_dropout, "attention_dropout": k.attention_dropout,
        "num_distributed_optimizer_instances": k.num_distributed_optimizer_instances,
        "outer_dp_sharding_strategy": k.outer_dp_sharding_strategy, "fsdp_double_buffer": k.fsdp_double_buffer,
        "suggested_communication_unit_size": k.suggested_communication_unit_size,
        "routed_buffer_factor": k.routed_buffer_factor,
    }


def estimate(model: ModelSpec, gpu: GpuSpec, layout: Layout, workload: Workload | None = None,
             knobs: Knobs | None = None, overheads: dict | None = None, *,
             efficiency_overrides: dict | None = None, with_time: bool = True,
             with_memory: bool = True) -> Estimate:
    """Validate the layout for this model and workload, then compute the memory and time walls (with_memory=False
    leaves `stages` empty: for a caller that needs only the time first, and `fits` is then not known)."""
    workload = workload or Workload()
    knobs, eff = _checked(model, gpu, layout, workload, knobs or Knobs(), efficiency_overrides)
    stages = memory_wall(model, layout, workload, knobs, overheads, arch=gpu.arch) if with_memory else []
    time = step_time(model, layout, workload, knobs, gpu, eff) if with_time else None
    return Estimate(model=model, gpu=gpu, layout=layout, workload=workload, knobs=knobs, stages=stages, time=time,
                    overheads=overheads, efficiency_overrides=efficiency_overrides)


def _checked(model: ModelSpec, gpu: GpuSpec, layout: Layout, workload: Workload, knobs: Knobs,
             efficiency_overrides: dict | None, eff: dict | None = None) -> tuple[Knobs, dict]:
    """estimate's checks of the configuration (each raises where Megatron or the GPU refuses it), then its knobs with a
    plan's "auto" CP exchange named, and the efficiency constants in use (`eff`, where the caller holds them)."""
    validate(model, layout, workload)
    refuse_unpriced(model, gpu.arch)
    dsa_heads(model, layout, gpu.arch)  # FlashMLA's head groups on this GPU (validate applied Hopper's)
    gpu.peak_tflops(knobs.precision)  # raises when the GPU has no such Tensor Core format
    validate_knobs(model, layout, knobs)
    validate_gemm_shapes(Widths.of(model), knobs.precision, gpu.arch, seq=workload.seq_length,
                         mbs=workload.micro_batch_size, tp=layout.tp, cp=layout.cp, sp=layout.sp, etp=layout.etp)
    eff = efficiency(gpu.key, efficiency_overrides) if eff is None else eff
    return _resolved(model, layout, workload, knobs, gpu, eff), eff  # a plan's "auto" CP exchange, named


def step_estimate(model: ModelSpec, gpu: GpuSpec, layout: Layout, workload: Workload, knobs: Knobs, *,
                  efficiency_overrides: dict | None = None,
                  eff: dict | None = None) -> tuple[Knobs, float, list[float]]:
    """(knobs as estimate resolves them, step seconds, seconds a micro-batch of each pipeline rank): what
    estimate(..., with_memory=False) gives of this configuration, checked as it checks it, for the planner's re-split
    (planner/resplit.py), which weighs nothing else of each split it tries. `eff`: efficiency(gpu.key,
    efficiency_overrides), where the caller holds it (the search does: Search.eff), so it is not merged again."""
    knobs, eff = _checked(model, gpu, layout, workload, knobs, efficiency_overrides, eff)
    return knobs, *step_seconds(model, layout, workload, knobs, gpu, eff)


def memory_estimate_peaks(model: ModelSpec, gpu: GpuSpec, layout: Layout, workload: Workload, knobs: Knobs,
                          overheads: dict | None) -> tuple[int, int]:
    """(peak bytes, host peak bytes) of estimate(..., overheads, with_time=False), checked as it checks it (the
    shipped efficiency constants resolve "auto"), without its stages' items: for the planner's re-split."""
    knobs, _ = _checked(model, gpu, layout, workload, knobs, None)
    return memory_peaks(model, layout, workload, knobs, overheads, arch=gpu.arch)


# resolve_auto's knobs by all it reads: the model, the layout's world size, TP, CP, EP, ETP and SP (never its pipeline
# split), the sequence and micro-batch, the knobs, GPU and constants. The planner's re-split estimates each split of a
# layout under the knobs as the search left them, and each was a dataclasses.replace (Knobs validates itself) or a
# weighing of the CP exchanges again. A refusal is not remembered (memo.remembered keeps nothing where it raises).
_RESOLVED: dict = {}


def _resolved(model: ModelSpec, layout: Layout, workload: Workload, knobs: Knobs, gpu: GpuSpec, eff: dict) -> Knobs:
    key = (model, layout.world_size, layout.tp, layout.cp, layout.ep, layout.etp, layout.sp, workload.seq_length,
           workload.micro_batch_size, knobs, gpu, tuple(eff.items()))
    return remembered(_RESOLVED, key, lambda: resolve_auto(model, layout, workload, knobs, gpu, eff), 1024)
