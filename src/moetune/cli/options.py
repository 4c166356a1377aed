"""Options shared by estimate, plan and explain: the model, cluster, layout, workload and knobs."""

import functools
import re

import click

from moetune.errors import MoetuneError
from moetune.files import FileTable, read_toml
from moetune.layout.knobs import (
    CP_COMM_TYPES,
    CUDA_GRAPH_SCOPES,
    DISPATCHERS,
    DROPLESS_IMBALANCE,
    OFFLOAD_MODULES,
    PRECISIONS,
    TUNED_FLEX_SMS,
    Knobs,
    parse_modules,
    parse_offload_modules,
)
from moetune.layout.layout import Layout
from moetune.layout.pipeline import parse_pipeline_layout
from moetune.layout.validate import Workload
from moetune.planner.defaults import default_dispatcher, default_precision, platform_defaults
from moetune.specs.hardware import GpuSpec


def layout_options(func):
    opts = [
        click.option("--gpu", default=None, help="Catalog GPU (h100, gb200, ...) or a cluster .toml file. Required."),
        click.option("--gpus", type=click.IntRange(min=1), default=None, help="World size. Required."),
        click.option("--tp", type=click.IntRange(min=1), default=1, show_default=True),
        click.option("--cp", type=click.IntRange(min=1), default=1, show_default=True),
        click.option("--pp", type=click.IntRange(min=1), default=1, show_default=True),
        click.option("--vpp", type=click.IntRange(min=1), default=None, help="Virtual pipeline size."),
        click.option("--ep", type=click.IntRange(min=1), default=1, show_default=True),
        click.option("--etp", type=click.IntRange(min=1), default=1, show_default=True),
        click.option("--first-stage-layers", type=click.IntRange(min=0), default=None),
        click.option("--last-stage-layers", type=click.IntRange(min=0), default=None),
        click.option("--pipeline-layout", default=None, help='Megatron layout string, e.g. "Et*4|(t*4|)*14tmL".'),
        click.option("--mtp-layers", type=click.IntRange(min=0), default=None,
                     help="MTP depth trained (mtp_num_layers; default: the model's config.json, 0 to train without)."),
        click.option("--account-for-embedding", is_flag=True, help="account_for_embedding_in_pipeline_split."),
        click.option("--account-for-loss", is_flag=True, help="account_for_loss_in_pipeline_split."),
        click.option("--no-sequence-parallel", is_flag=True, help="Turn sequence parallel off (on when TP>1)."),
        click.option("--seq", type=click.IntRange(min=1), default=4096, show_default=True),
        click.option("--mbs", type=click.IntRange(min=1), default=1, show_default=True),
        click.option("--gbs", type=click.IntRange(min=1), default=None, help="Global batch (default MBS*DP*PP)."),
    ]
    return functools.reduce(lambda f, o: o(f), reversed(opts), func)


def knob_options(func):
    opts = [
        click.option("--precision", type=click.Choice(PRECISIONS), default=None,
                     help="Default: the platform's FP8 recipe (Hopper fp8-blockwise, Blackwell mxfp8, A100 bf16)."),
        click.option("--recompute", type=click.Choice(["none", "selective", "full"]), default="none",
                     show_default=True),
        click.option("--recompute-modules", default=None,
                     help="Comma list: layernorm,core_attn,moe_act,mlp,moe,shared_experts,mla_up_proj."),
        click.option("--no-distributed-optimizer", is_flag=True),
        click.option("--optimizer", type=click.Choice(["adam", "muon"]), default="adam", show_default=True,
                     help="muon: Megatron's emerging optimizer (one momentum buffer on linear weights), sharded "
                          "layer-wise unless --no-distributed-optimizer (dist_muon, Kimi-K2's recipes)."),
        click.option("--optimizer-offload", type=float, default=0.0, show_default=True,
                     help="Fraction of optimizer states offloaded to CPU."),
        click.option("--offload-modules", default=None,
                     help=f"Fine-grained activation offloading, comma list of {', '.join(OFFLOAD_MODULES)}."),
        click.option("--bf16-grads", is_flag=True, help="Main grads in BF16 (grad_reduce_in_fp32=False)."),
        click.option("--bf16-moments", is_flag=True, help="Adam moments in BF16 (DeepSeek-V3 recipes)."),
        click.option("--dispatcher", type=click.Choice(DISPATCHERS), default=None,
                     help="Default: deepep on H100/B200, hybridep on GB200/GB300, alltoall on A100 or EP=1."),
        click.option("--flex-num-sms", type=click.IntRange(1, 160), default=None,
                     help="SMs of the DeepEP / HybridEP kernels (moe_deepep_num_sms / moe_hybridep_num_sms). "
                          "Default: 32 for hybridep (Megatron Bridge perf recipes), 20 for deepep."),
        click.option("--cuda-graph-scope", default=None,
                     help=f"Comma list of {', '.join(CUDA_GRAPH_SCOPES)}, or 'none'. "
                          "Default: attn,moe_router,moe_preprocess on Hopper/Blackwell."),
        click.option("--ep-overlap", is_flag=True, help="overlap_moe_expert_parallel_comm."),
        click.option("--delay-wgrad", is_flag=True, help="delay_wgrad_compute."),
        click.option("--tp-comm-overlap", is_flag=True, help="tp_comm_overlap."),
        click.option("--fp8-output-proj", is_flag=True,
                     help="model.fp8_output_proj: the LM head under MXFP8 (else BF16 whatever the recipe)."),
        click.option("--cp-comm-type", type=click.Choice((*CP_COMM_TYPES, "auto")), default=None,
                     help="How CP ranks exchange attention inputs (model.cp_comm_type). Default: auto, the legal "
                          "one that costs least, as plan picks (Megatron's own default is p2p)."),
        click.option("--hcp-a2a-size", type=click.IntRange(1), default=None,
                     help="a2a+p2p: the a2a group (hierarchical_context_parallel_sizes[0]). Default: the largest "
                          "the heads allow inside the NVLink domain."),
        click.option("--no-overlap-grad-reduce", is_flag=True,
                     help="ddp.overlap_grad_reduce=False: the DP gradient reduce-scatter runs after the backward."),
        click.option("--no-overlap-param-gather", is_flag=True,
                     help="ddp.overlap_param_gather=False: the DP parameter all-gather runs before the forward."),
        click.option("--efficiency", type=click.Path(dir_okay=False), default=None,
                     help="TOML overriding efficiency.toml constants."),
        click.option("--routing", type=click.Choice(["dropless", "force-balance"]), default="dropless",
                     show_default=True),
        click.option("--token-imbalance", type=float, default=None,
                     help=f"Dropless: busiest expert rank's tokens / mean (default {DROPLESS_IMBALANCE} from EP 8 "
                          "up, from the published force-balance/dropless A/B pairs; less at smaller EP)."),
        click.option("--overheads", type=click.Path(dir_okay=False), default=None,
                     help="TOML overriding memory_overheads.toml figures."),
    ]
    return functools.reduce(lambda f, o: o(f), reversed(opts), func)


def config_options(func):
    """estimate/explain from a launch config instead of the layout and knob flags."""
    opts = [
        click.option("--config", "configs", multiple=True, type=click.Path(dir_okay=False),
                     help="Take the layout, batch and knobs from a config instead of their flags: a Bridge YAML, "
                          "dotted overrides, Megatron-LM arguments or a MODEL_ARGS YAML, read as `check` reads it "
                          "(repeatable; Megatron's defaults where it is silent)."),
        click.option("--mlm-args", default=None, help="Megatron-LM arguments, with or instead of --config."),
        click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
                     help="Dotted override of the config, e.g. model.expert_model_parallel_size=8 (repeatable)."),
    ]
    return functools.reduce(lambda f, o: o(f), reversed(opts), func)


# The layout and knob options a config replaces (click keeps a decorated function's options in __click_params__);
# the cluster, the constants files and the dropless factor are not in a config, so those flags apply beside it
_REPLACED_BY_CONFIG = frozenset(p.name for p in layout_options(knob_options(lambda: None)).__click_params__) - {
    "gpu", "gpus", "efficiency", "overheads", "token_imbalance"}


def given(name: str) -> bool:
    """Whether the option was typed on the command line (not its default); False outside a click command."""
    ctx = click.get_current_context(silent=True)
    return ctx is not None and ctx.get_parameter_source(name) == click.core.ParameterSource.COMMANDLINE


def _flags_the_config_replaces(also: frozenset = frozenset()) -> list[str]:
    """The layout and knob flags (and `also`) given on the command line."""
    params = click.get_current_context().command.params
    return [p.opts[0] for p in params if p.name in _REPLACED_BY_CONFIG | also and given(p.name)]


def flags_a_saved_result_replaces() -> list[str]:
    """Layout, knob and cluster flags given beside a saved plan/estimate, which holds all of them."""
    return _flags_the_config_replaces(frozenset({"gpu", "gpus"}))


# estimate's flags, as a config names them (layout/validate.py words its fixes for the command line)
FLAG_KEYS = {"--pipeline-layout": "model.pipeline_model_parallel_layout",
             "--first-stage-layers": "model.num_layers_in_first_pipeline_stage",
             "--last-stage-layers": "model.num_layers_in_last_pipeline_stage",
             "--hcp-a2a-size": "model.hierarchical_context_parallel_sizes", "--tp": "model.tensor_model_parallel_size",
             "--cp": "model.context_parallel_size", "--pp": "model.pipeline_model_parallel_size",
             "--vpp": "model.virtual_pipeline_model_parallel_size", "--ep": "model.expert_model_parallel_size",
             "--etp": "model.expert_tensor_parallel_size", "--gbs": "train.global_batch_size",
             "--mbs": "train.micro_batch_size", "--seq": "model.seq_length",
             "--account-for-embedding": "model.account_for_embedding_in_pipeline_split",
             "--account-for-loss": "model.account_for_loss_in_pipeline_split",
             "--no-sequence-parallel": "model.sequence_parallel=false",
             "--optimizer-offload": "optimizer.optimizer_offload_fraction",
             "--no-distributed-optimizer": "optimizer.use_distributed_optimizer=false",
             "--optimizer": "optimizer.optimizer",
             "--recompute-modules": "model.recompute_modules", "--cp-comm-type": "model.cp_comm_type",
             "--mtp-layers": "model.mtp_num_layers"}


def config_words(message: str) -> str:
    """A layout error worded for flags, with the config's names instead (check reads configs, not flags)."""
    return re.sub(r"--[a-z0-9-]+", lambda m: FLAG_KEYS.get(m.group(0), m.group(0)), message)


def estimate_from_config(model: str, kw: dict):
    """The estimate of a launch config (layout, batch and knobs as Megatron would run it) on MODEL."""
    from dataclasses import replace

    from moetune.configio.load import load_config
    from moetune.planner.estimate import estimate
    from moetune.planner.from_config import from_config, trained_model
    from moetune.planner.model_fields import architecture_conflicts
    from moetune.specs.hardware import load_gpu
    from moetune.specs.registry import load_model
    from moetune.walls.efficiency import load_efficiency_file

    clash = _flags_the_config_replaces()
    if clash:
        raise MoetuneError(f"{clash[0]}: the layout and knobs come from --config / --mlm-args; drop {clash[0]} or "
                           "override the config with --set KEY=VALUE")
    config = load_config(list(kw["configs"]), sets=list(kw["sets"]), mlm_args=kw["mlm_args"], gpu=kw["gpu"],
                         gpus=kw["gpus"])
    if "cluster.gpu" not in config:
        raise MoetuneError("the config does not say which GPU: pass --gpu (e.g. --gpu h100)")
    spec = load_model(model)
    if conflicts := architecture_conflicts(spec, config):  # the estimate is MODEL's: a config of another is an error
        raise MoetuneError(f"the config describes another model than {model}: {'; '.join(conflicts[:3])}; pass the "
                           "MODEL the config trains")
    spec = trained_model(spec, config)
    gpu, overheads, eff = load_gpu(str(config["cluster.gpu"])), load_overheads(kw["overheads"]), \
        load_efficiency_file(kw["efficiency"])
    try:  # a layout or knob Megatron refuses, worded for the config's names (the checks word them for flags)
        layout, workload, knobs = from_config(config)
        if kw["token_imbalance"] is not None:
            knobs = replace(knobs, token_imbalance=kw["token_imbalance"])
        result = estimate(spec, gpu, layout, workload, knobs, overheads, efficiency_overrides=eff)
    except MoetuneError as err:
        raise MoetuneError(config_words(str(err))) from None
    result.defaulted = []  # nothing takes moetune's platform defaults: Megatron's own stand where the config is silent
    return result


def require_cluster(kw: dict) -> None:
    for flag in ("gpu", "gpus"):
        if kw.get(flag) is None:
            raise MoetuneError(f"--{flag} is required (e.g. --gpu h100 --gpus 64)")


def build_layout(kw: dict) -> Layout:
    require_cluster(kw)
    vpp = kw["vpp"]
    if kw["pipeline_layout"] and vpp == 1:  # Layout reads vpp 1 as unset; given, it must agree with the layout
        stages = len(parse_pipeline_layout(kw["pipeline_layout"]))
        if stages != kw["pp"]:
            raise MoetuneError(f"--vpp 1 contradicts --pipeline-layout ({stages} stages over --pp {kw['pp']}); "
                               "drop --vpp")
    return Layout(
        world_size=kw["gpus"], tp=kw["tp"], cp=kw["cp"], pp=kw["pp"], vpp=vpp or 1, ep=kw["ep"], etp=kw["etp"],
        sequence_parallel=False if kw["no_sequence_parallel"] else None,
        first_stage_layers=kw["first_stage_layers"], last_stage_layers=kw["last_stage_layers"],
        pipeline_layout=kw["pipeline_layout"], account_for_embedding=kw["account_for_embedding"],
        account_for_loss=kw["account_for_loss"],
    )


def build_workload(kw: dict) -> Workload:
    return Workload(seq_length=kw["seq"], micro_batch_size=kw["mbs"], global_batch_size=kw["gbs"])


def build_knobs(kw: dict, gpu: GpuSpec, layout: Layout) -> tuple[Knobs, list[str]]:
    """Knobs from the options; those left out take the platform defaults, and are listed."""
    defaults, defaulted = platform_defaults(gpu), []

    def pick(name: str, given, fallback):
        if given is not None:
            return given
        defaulted.append(name)
        return fallback

    precision = pick("precision", kw["precision"], default_precision(gpu))
    dispatcher = pick("dispatcher", kw["dispatcher"], default_dispatcher(gpu, layout.ep))
    if kw["flex_num_sms"] is not None and dispatcher not in TUNED_FLEX_SMS:
        raise MoetuneError(f"--flex-num-sms sets the SMs of DeepEP/HybridEP kernels; the dispatcher is {dispatcher} "
                           "(NCCL picks its own): drop it or pass --dispatcher deepep/hybridep")
    if kw["flex_num_sms"] is None and dispatcher in TUNED_FLEX_SMS:
        defaulted.append("flex_num_sms")  # Knobs.num_sms: the tuned recipes' count
    scope_text = kw["cuda_graph_scope"]
    scopes = (scope_words(scope_text, "--cuda-graph-scope") if scope_text is not None
              else pick("cuda_graph_scope", None, tuple(defaults["cuda_graph_scope"])))
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
        optimizer=kw["optimizer"],
        main_grads_fp32=not kw["bf16_grads"], adam_moments_bytes=2 if kw["bf16_moments"] else 4,
        dispatcher=dispatcher, flex_num_sms=kw["flex_num_sms"], cuda_graph_scope=scopes, routing=kw["routing"],
        ep_overlap=kw["ep_overlap"],
        token_imbalance=kw["token_imbalance"],
        delay_wgrad=kw["delay_wgrad"], tp_comm_overlap=kw["tp_comm_overlap"], fp8_output_proj=kw["fp8_output_proj"],
        overlap_grad_reduce=not kw["no_overlap_grad_reduce"], overlap_param_gather=not kw["no_overlap_param_gather"],
        offload_modules=parse_offload_modules(kw["offload_modules"]),
        cp_comm_type=kw["cp_comm_type"] or "auto", hcp_a2a_size=kw["hcp_a2a_size"],
    )
    if kw["cp_comm_type"] is None and layout.cp > 1:
        defaulted.append("cp_comm_type")  # the legal exchange that costs least (Bridge recipes pick a2a where it runs)
    return knobs, defaulted


def scope_words(text: str, flag: str) -> tuple[str, ...]:
    """CUDA-graph scopes as typed ("attn,moe_router" or "attn moe_router"); "none" alone is no graph."""
    words = text.replace(",", " ").split()
    if "none" in words and len(words) > 1:
        raise MoetuneError(f"{flag} {text}: 'none' turns CUDA graphs off; give it alone or drop it")
    return tuple(w for w in words if w != "none")


def load_overheads(path: str | None) -> dict | None:
    """The user's --overheads figures, checked; they remember their file (results record it)."""
    from moetune.walls.memory import check_overheads
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


def estimate_from_flags(model: str, kw: dict):
    """The estimate behind `estimate` and `explain`: layout, workload and knobs from the shared flags (or from a
    config, estimate_from_config); knobs left out take the platform defaults and are recorded in `defaulted`."""
    if kw.get("configs") or kw.get("mlm_args") is not None or kw.get("sets"):
        return estimate_from_config(model, kw)
    from moetune.planner.estimate import estimate
    from moetune.planner.legal import legal_default_scope
    from moetune.specs.hardware import load_gpu
    from moetune.specs.registry import load_model
    from moetune.walls.efficiency import load_efficiency_file

    layout = build_layout(kw)
    gpu, spec = load_gpu(kw["gpu"]), with_mtp(load_model(model), kw.get("mtp_layers"))
    knobs, defaulted = build_knobs(kw, gpu, layout)
    if "cuda_graph_scope" in defaulted:  # the platform's graphs, less what Megatron refuses beside the recompute
        knobs = legal_default_scope(spec, gpu, knobs, kw["seq"])
    result = estimate(spec, gpu, layout, build_workload(kw), knobs, load_overheads(kw["overheads"]),
                      efficiency_overrides=load_efficiency_file(kw["efficiency"]))
    result.defaulted = defaulted
    return result
