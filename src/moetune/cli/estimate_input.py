"""What the commands build from their flags or a --config: the layout, workload and knobs of one configuration (the
platform's defaults where a flag is left out) and its estimate, the user's memory overheads file and the MTP depth
trained."""

import json
from dataclasses import replace
from pathlib import Path

from moetune.cli.flag_checks import hcp_needs_a2a_p2p, scope_words
from moetune.cli.options import config_words, flags_the_config_replaces, given
from moetune.configio.cluster import config_gpu
from moetune.configio.release_context import current
from moetune.errors import MoetuneError
from moetune.files import FileTable, read_toml
from moetune.layout.dp_sharding import fsdp_optimizer_refusal
from moetune.layout.knobs import CP1_COMM_TYPES, TUNED_FLEX_SMS, Knobs
from moetune.layout.layout import Layout, check_vpp_one
from moetune.layout.modules import parse_modules, parse_offload_modules
from moetune.layout.param_gather import FP8_PARAM_PRECISIONS
from moetune.layout.validate import Workload
from moetune.planner.defaults import default_dispatcher, default_precision, default_scope
from moetune.planner.from_json import is_saved_result
from moetune.specs.hardware import GpuSpec
from moetune.specs.model import ModelSpec
from moetune.walls.compute import router_dtype_defaulted, router_dtype_or_plan
from moetune.walls.cp_legal import dsa_exchange_refusal


def kw_release(kw: dict) -> str | None:
    """The release --megatron-core / --megatron-bridge name (checked), or None (also where a command has neither):
    the command's reading's where it opened one from those options (estimate), which checked it then
    (configio/release_context.py reading), else the options' own, checked here (explain, memory)."""
    if (read := current()) is not None:
        return read.release
    from moetune.cli.release_check import checked_release
    return checked_release(kw.get("megatron_core"), kw.get("megatron_bridge"))


def estimate_from_config(model: str, kw: dict):
    """The estimate of a launch config (layout, batch and knobs as Megatron would run it) on MODEL."""
    from moetune.configio.load import load_config
    from moetune.planner.estimate import estimate
    from moetune.planner.from_config import from_config, trained_model
    from moetune.planner.model_fields import architecture_conflicts
    from moetune.specs.registry import load_model
    from moetune.walls.efficiency import load_efficiency_file

    clash = flags_the_config_replaces()
    if clash:
        given = [flag for flag, on in (("--config", kw.get("configs")), ("--mlm-args", kw.get("mlm_args") is not None),
                                       ("--set", kw.get("sets")), ("--script-args", kw.get("script_args") is not None))
                 if on]
        raise MoetuneError(f"{clash[0]}: with {' and '.join(given)} the layout and knobs are a config's (its Megatron "
                           f"names); drop {clash[0]} and give it as --set KEY=VALUE too (e.g. --set "
                           "model.pipeline_model_parallel_size=8), or drop the config options for the flags alone")
    from moetune.planner import to_config as result_config
    # a saved plan or estimate reads as its config, as check, emit and diagnose read it
    config = load_config(list(kw["configs"]), sets=list(kw["sets"]), mlm_args=kw["mlm_args"], gpu=kw["gpu"],
                         gpus=kw["gpus"], script_args=kw.get("script_args"), from_result=result_config)
    if "cluster.gpu" not in config:
        raise MoetuneError("the config does not say which GPU: pass --gpu (e.g. --gpu h100)")
    spec = load_model(model)
    if conflicts := architecture_conflicts(spec, config):  # the estimate is MODEL's: a config of another is an error
        raise MoetuneError(f"the config describes another model than {model}: {'; '.join(conflicts[:3])}; pass the "
                           "MODEL the config trains")
    spec = trained_model(spec, config)
    gpu, overheads = config_gpu(config), load_overheads(kw["overheads"])
    eff = load_efficiency_file(kw["efficiency"], gpu.key)
    try:  # a layout or knob Megatron refuses, worded for the config's names (the checks word them for flags)
        layout, workload, knobs = from_config(config, spec)
        if (release := kw_release(kw)) is not None:  # nothing defaulted: a knob the config sets must run there
            from moetune.planner.release_fit import for_release
            knobs, spec = for_release(spec, gpu, knobs, release, [], config_source(kw, config))
        if kw["token_imbalance"] is not None:
            knobs = replace(knobs, token_imbalance=kw["token_imbalance"])
        result = estimate(spec, gpu, layout, workload, knobs, overheads, efficiency_overrides=eff)
    except MoetuneError as err:
        raise MoetuneError(config_words(str(err), config)) from None
    result.defaulted = []  # nothing takes moetune's platform defaults: Megatron's own stand where the config is silent
    result.source_config = config
    return result


def config_source(kw: dict, config: dict):
    """The config's inputs (its files, --mlm-args, --set) as a refusal names what set its knobs: their fields, or a
    Megatron-LM launch's arguments (release_fit.KnobSource)."""
    from moetune.configio.names import is_megatron_lm, names
    from moetune.planner.release_fit import KnobSource

    inputs = [str(f) for f in kw["configs"]] + ["--mlm-args"] * (kw["mlm_args"] is not None) + \
        ["--set"] * bool(kw["sets"])
    where = f"{', '.join(inputs[:-1])} or {inputs[-1]}" if len(inputs) > 1 else inputs[0]
    if not is_megatron_lm(config):
        return KnobSource(subject=f"the config ({where}) sets", change=f"those fields in {where}",
                          holds=frozenset(config))

    def argument(name: str) -> str:  # 'FIELD' or 'FIELD=VALUE' as the launch's argument, where Megatron-LM has one
        field, _, value = name.partition("=")
        flag = names().mlm_flag(field)
        return f"{flag} {value}".strip() if flag else name
    return KnobSource(subject=f"the launch ({where}) sets", change=f"those arguments in {where}", spell=argument,
                      holds=frozenset(config))


def require_cluster(kw: dict) -> None:
    for flag in ("gpu", "gpus"):
        if kw.get(flag) is None:
            raise MoetuneError(f"--{flag} is required (e.g. --gpu h100 --gpus 64)")


def build_layout(kw: dict) -> Layout:
    require_cluster(kw)
    vpp = kw["vpp"]
    if kw["pipeline_layout"] and vpp == 1:  # Layout reads vpp 1 as unset; given, it must agree with the layout
        check_vpp_one(kw["pipeline_layout"], kw["pp"])
    return Layout(
        world_size=kw["gpus"], tp=kw["tp"], cp=kw["cp"], pp=kw["pp"], vpp=vpp or 1, ep=kw["ep"], etp=kw["etp"],
        sequence_parallel=False if kw["no_sequence_parallel"] else None,
        first_stage_layers=kw["first_stage_layers"], last_stage_layers=kw["last_stage_layers"],
        pipeline_layout=kw["pipeline_layout"], account_for_embedding=kw["account_for_embedding"],
        account_for_loss=kw["account_for_loss"],
    )


def build_workload(kw: dict) -> Workload:
    return Workload(seq_length=kw["seq"], micro_batch_size=kw["mbs"], global_batch_size=kw["gbs"])


def _megatron_fsdp_clashes(kw: dict) -> None:
    """--megatron-fsdp beside a flag Megatron refuses it with, as one line."""
    if kw["megatron_fsdp"] and kw["no_distributed_optimizer"]:  # Knobs turns it on as Megatron does; a flag is read
        raise MoetuneError("--megatron-fsdp runs the distributed optimizer (Megatron-LM and Bridge turn it on under "
                           "Megatron FSDP): drop --no-distributed-optimizer")
    if why := fsdp_optimizer_refusal(kw["megatron_fsdp"], kw["optimizer"]):  # as plan refuses the two pins
        raise MoetuneError(f"--megatron-fsdp with --optimizer {kw['optimizer']}: {why}; drop one of them")


def build_knobs(kw: dict, gpu: GpuSpec, layout: Layout, spec: ModelSpec) -> tuple[Knobs, list[str]]:
    """Knobs from the options; those left out take the platform defaults, and are listed. A graph scope left out is
    defaulted here alone, whole: the model's (defaults.default_scope: a hybrid's Mamba mixers graphed too), narrowed
    to what Megatron takes beside the recompute, which only the finished knobs tell."""
    from moetune.planner.legal import legal_default_scope
    defaulted = []

    def pick(name: str, given, fallback):
        if given is not None:
            return given
        defaulted.append(name)
        return fallback

    precision = pick("precision", kw["precision"], default_precision(gpu))
    # "none": the activations' BF16
    router = kw["moe_router_dtype"]
    router_dtype = router_dtype_or_plan(router is not None, None if router == "none" else router)
    if router_dtype_defaulted(spec, given=router is not None):
        defaulted.append("moe_router_dtype")
    dispatcher = pick("dispatcher", kw["dispatcher"], default_dispatcher(gpu, layout))
    if kw["flex_num_sms"] is not None and dispatcher not in TUNED_FLEX_SMS:
        raise MoetuneError(f"--flex-num-sms sets the SMs of DeepEP/HybridEP kernels; the dispatcher is {dispatcher} "
                           "(NCCL picks its own): drop it or pass --dispatcher deepep/hybridep")
    # a result's own knobs pass again at CP 1 (CP1_COMM_TYPES); another exchange there is a silent no-op
    if kw["cp_comm_type"] not in (None, *CP1_COMM_TYPES) and layout.cp == 1:
        raise MoetuneError(f"--cp-comm-type {kw['cp_comm_type']} sets how context-parallel ranks exchange attention "
                           "inputs; CP is 1 here, with nothing to exchange: drop it or set --cp > 1")
    hcp_needs_a2a_p2p(kw["hcp_a2a_size"], kw["cp_comm_type"], spec, layout)
    if layout.cp > 1 and (why := dsa_exchange_refusal(spec, kw["cp_comm_type"])):
        raise MoetuneError(f"--cp-comm-type {kw['cp_comm_type']} at CP {layout.cp}: {why}; use --cp-comm-type "
                           "all_gather")
    if kw["flex_num_sms"] is None and dispatcher in TUNED_FLEX_SMS:
        defaulted.append("flex_num_sms")  # Knobs.num_sms: the tuned recipes' count
    scope_text = kw["cuda_graph_scope"]
    scopes = (scope_words(scope_text, "--cuda-graph-scope") if scope_text is not None
              else pick("cuda_graph_scope", None, default_scope(spec, gpu)))
    _megatron_fsdp_clashes(kw)
    modules = parse_modules(kw["recompute_modules"])
    recompute = kw["recompute"]
    if modules and recompute == "none":
        if given("recompute"):
            raise MoetuneError("--recompute none with --recompute-modules: modules are recomputed only under "
                               "--recompute selective; drop one of them")
        recompute = "selective"  # naming modules implies selective recompute
    knobs = Knobs(
        precision=precision, recompute=recompute, recompute_modules=modules,
        distributed_optimizer=not kw["no_distributed_optimizer"], optimizer_offload_fraction=kw["optimizer_offload"],
        optimizer=kw["optimizer"], megatron_fsdp=kw["megatron_fsdp"],
        main_grads_fp32=not kw["bf16_grads"], adam_moments_bytes=2 if kw["bf16_moments"] else 4,
        dispatcher=dispatcher, flex_num_sms=kw["flex_num_sms"], cuda_graph_scope=scopes, routing=kw["routing"],
        ep_overlap=kw["ep_overlap"],
        token_imbalance=kw["token_imbalance"],
        delay_wgrad=kw["delay_wgrad"], tp_comm_overlap=kw["tp_comm_overlap"], fp8_output_proj=kw["fp8_output_proj"],
        overlap_grad_reduce=not kw["no_overlap_grad_reduce"], overlap_param_gather=not kw["no_overlap_param_gather"],
        offload_modules=parse_offload_modules(kw["offload_modules"]),
        cp_comm_type=kw["cp_comm_type"] or "auto", hcp_a2a_size=kw["hcp_a2a_size"],
        fp8_param_gather=kw["fp8_param_gather"], fp4_param_gather=kw["fp4_param_gather"],
        moe_router_dtype=router_dtype,
    )
    if scope_text is None:  # the platform's graphs, less what Megatron refuses beside the recompute
        knobs = legal_default_scope(spec, gpu, knobs, kw["seq"])
    if kw["cp_comm_type"] is None and layout.cp > 1:
        defaulted.append("cp_comm_type")  # the legal exchange that costs least (Bridge recipes pick a2a where it runs)
    if kw["fp8_param_gather"] is None and knobs.precision in FP8_PARAM_PRECISIONS:  # NVFP4 takes no FP8 weights
        defaulted.append("fp8_param_gather")  # Knobs.fp8_params: the recipe preset's
    if kw["fp4_param_gather"] is None and knobs.precision == "nvfp4":
        defaulted.append("fp4_param_gather")  # Knobs.fp4_params: the NVFP4 preset's
    return knobs, defaulted


def load_overheads(path: str | None) -> dict | None:
    """The user's --overheads figures, checked; they remember their file (results record it)."""
    from moetune.walls.overheads import check_overheads
    if not path:
        return None
    where = f"--overheads {path}"
    return FileTable(check_overheads(read_toml(path, "--overheads"), where), where, path)


def with_mtp(spec, depth: int | None):
    """The model trained with --mtp-layers MTP layers (None: its config.json's)."""
    if depth is None:
        return spec
    try:
        return spec.with_mtp(depth)
    except ValueError as err:
        raise MoetuneError(f"--mtp-layers {depth}: {err}") from None


def _not_a_saved_result(model: str) -> None:
    """MODEL a moetune plan or estimate output, which these flags cannot take as a model: one line naming the
    commands that read it (its model_type would otherwise be reported missing, as of a broken Hugging Face config)."""
    if not model.lower().endswith(".json") or not Path(model).is_file():
        return
    try:
        data = json.loads(Path(model).read_text())
    except (OSError, ValueError, RecursionError):
        return  # the model reader says what is wrong with it
    if is_saved_result(data):
        raise MoetuneError(f"{model}: a moetune plan or estimate output, not a model; `explain`, `emit`, `report` and "
                           "`sweep write` read it, and estimate/memory take a model name or a Hugging Face config.json")


def estimate_from_flags(model: str, kw: dict):
    """The estimate behind `estimate` and `explain`: layout, workload and knobs from the shared flags (or from a
    config, estimate_from_config); knobs left out take the platform defaults and are recorded in `defaulted`."""
    _not_a_saved_result(model)
    if kw.get("configs") or kw.get("mlm_args") is not None or kw.get("sets") or kw.get("script_args") is not None:
        return estimate_from_config(model, kw)
    from moetune.planner.estimate import estimate
    from moetune.specs.hardware import load_gpu
    from moetune.specs.registry import load_model
    from moetune.walls.efficiency import load_efficiency_file

    layout = build_layout(kw)
    gpu, spec = load_gpu(kw["gpu"]), with_mtp(load_model(model), kw.get("mtp_layers"))
    knobs, defaulted = build_knobs(kw, gpu, layout, spec)
    if (release := kw_release(kw)) is not None:  # what that release runs of the knobs (release_fit.release_knobs)
        from moetune.planner.release_fit import for_release
        knobs, spec = for_release(spec, gpu, knobs, release, defaulted)
    result = estimate(spec, gpu, layout, build_workload(kw), knobs, load_overheads(kw["overheads"]),
                      efficiency_overrides=load_efficiency_file(kw["efficiency"], gpu.key))
    # the global batch a run leaves out is MBS x DP x PP (Workload.gbs): it sets the micro-batches and so the bubble
    result.defaulted = defaulted + (["global_batch_size"] if kw["gbs"] is None else []) + (
        [] if given("seq") else ["seq_length"])
    return result
