"""Options shared by estimate, plan and explain: the model, cluster, layout, workload and knobs."""

import functools
import re

import click

from moetune.configio.layout_map import LAYOUT_FIELDS
from moetune.configio.names import is_megatron_lm, names
from moetune.configio.releases import releases
from moetune.layout.dp_sharding import MEGATRON_FSDP_STRATEGIES
from moetune.layout.imbalance import DROPLESS_IMBALANCE
from moetune.layout.knobs import CP_COMM_TYPES, CUDA_GRAPH_SCOPES, DISPATCHERS, PRECISIONS
from moetune.layout.modules import OFFLOAD_MODULES


class Tokens(click.ParamType):
    """A sequence length as engineers write it: a whole number (32768) or one in K of 1024 tokens (32k, 128K)."""

    name = "tokens"

    def convert(self, value, param, ctx):
        text = str(value).strip()
        if m := re.fullmatch(r"(\d+)([kK]?)", text):
            count = int(m.group(1)) * (1024 if m.group(2) else 1)
            if count >= 1:
                return count
        self.fail(f"{value!r} is not a token count: write a positive whole number (32768) or one in K (32k = 32768)",
                  param, ctx)


TOKENS = Tokens()


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
        click.option("--seq", type=TOKENS, default=4096, show_default=True, help="Sequence length (32768 or 32k)."),
        click.option("--mbs", type=click.IntRange(min=1), default=1, show_default=True),
        click.option("--gbs", type=click.IntRange(min=1), default=None,
                     help="Global batch (default MBS*DP*PP, PP micro-batches a step; Megatron-LM's own is MBS*DP)."),
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
        click.option("--megatron-fsdp", type=click.Choice(list(MEGATRON_FSDP_STRATEGIES)), default=None,
                     help="Megatron FSDP in place of Megatron's DDP, with this data_parallel_sharding_strategy "
                          "(optim_grads_params: weights, gradients and optimizer state sharded, as Bridge's FSDP "
                          "recipes run it). Default: off."),
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
                     help="Default: deepep on H100/B200/B300, hybridep on GB200/GB300 (and Blackwell rack-scale "
                          "cluster files; deepep past their domain where it runs), alltoall on A100, at EP=1 and "
                          "where no flex backend spans the EP group."),
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
        click.option("--fp8-param-gather/--no-fp8-param-gather", default=None,
                     help="mixed_precision.fp8_param_gather: FP8 weights with no BF16 copy. Default: Megatron "
                          "Bridge's preset of the recipe (on for tensorwise, delayed and MXFP8; off for blockwise, "
                          "NVFP4, without the distributed optimizer, and beside an optimizer CPU offload but under "
                          "delayed)."),
        click.option("--fp4-param-gather/--no-fp4-param-gather", default=None,
                     help="mixed_precision.fp4_param_gather: NVFP4 weights with no BF16 copy. Default: Megatron "
                          "Bridge's NVFP4 preset (on, but without the distributed optimizer)."),
        click.option("--moe-router-dtype", type=click.Choice(["fp32", "fp64", "none"]), default=None,
                     help="model.moe_router_dtype: the dtype of the MoE router's logits and probabilities (none: "
                          "the activations' BF16). Default: fp32, as every plan's config sets it (Megatron's own is "
                          "none); biased experts' (gpt-oss) fc2 bias pass runs in it."),
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


def release_options(effect: str):
    """--megatron-core / --megatron-bridge, the same pair in every command that takes a release (configio/releases.py);
    EFFECT: what naming one does in that command."""
    core, bridge = releases().order, releases("bridge").order
    opts = [
        click.option("--megatron-core", "megatron_core", default=None, metavar="X.Y",
                     help=f"The Megatron-Core release the job runs ({', '.join(core)}): {effect}. Default: Megatron-LM "
                          "main's names."),
        click.option("--megatron-bridge", "megatron_bridge", default=None, metavar="X.Y.Z",
                     help=f"The Megatron Bridge release the job runs ({', '.join(bridge)}), its own fields and those "
                          f"of the Megatron-Core it pins: as --megatron-core."),
    ]
    return lambda func: functools.reduce(lambda f, o: o(f), reversed(opts), func)


def script_args_option():
    """--script-args, the same in every command that reads launch scripts (configio/load.py script_arguments)."""
    return click.option("--script-args", default=None, metavar='"ARG ..."',
                        help=SCRIPT_ARGS_HELP)


SCRIPT_ARGS_HELP = ("Arguments of the launch script (.sh) among the inputs, its $1 .. $N, as one string a shell "
                    "splits, e.g. \"dsw A3B 1 8 ...\" (Pai-Megatron-Patch's run_mcore_*.sh take their layout so).")


def config_options(func):
    """estimate/explain from a launch config instead of the layout and knob flags."""
    opts = [
        click.option("--config", "configs", multiple=True, type=click.Path(dir_okay=False),
                     help="Take the layout, batch and knobs from a config instead of their flags: a Bridge YAML, "
                          "dotted overrides, Megatron-LM arguments or a MODEL_ARGS YAML, read as `check` reads it "
                          "(repeatable; Megatron's defaults where it is silent)."),
        click.option("--mlm-args", default=None, help="Megatron-LM arguments, with or instead of --config."),
        script_args_option(),
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


def flags_the_config_replaces(also: frozenset = frozenset()) -> list[str]:
    """The layout and knob flags (and `also`) given on the command line."""
    params = click.get_current_context().command.params
    return [p.opts[0] for p in params if p.name in _REPLACED_BY_CONFIG | also and given(p.name)]


def flags_a_saved_result_replaces() -> list[str]:
    """Layout, knob and cluster flags given beside a saved plan/estimate, which holds all of them."""
    return flags_the_config_replaces(frozenset({"gpu", "gpus"}))


# estimate's flags, as a config names them (layout/validate.py words its fixes for the command line): each layout
# flag is its Layout attribute's name (configio/layout_map.py holds their fields); sequence parallelism has only
# --no-sequence-parallel
FLAG_KEYS = {**{f"--{attr.replace('_', '-')}": name for attr, name in LAYOUT_FIELDS.items()
                if attr != "sequence_parallel"},
             "--hcp-a2a-size": "model.hierarchical_context_parallel_sizes", "--gbs": "train.global_batch_size",
             "--mbs": "train.micro_batch_size", "--seq": "model.seq_length",
             "--no-sequence-parallel": "model.sequence_parallel=false",
             "--optimizer-offload": "optimizer.optimizer_offload_fraction",
             "--no-distributed-optimizer": "optimizer.use_distributed_optimizer=false",
             "--megatron-fsdp": "ddp.data_parallel_sharding_strategy",
             "--optimizer": "optimizer.optimizer", "--dispatcher": "model.moe_token_dispatcher_type",
             "--recompute-modules": "model.recompute_modules", "--cp-comm-type": "model.cp_comm_type",
             "--mtp-layers": "model.mtp_num_layers", "--fp8-param-gather": "mixed_precision.fp8_param_gather",
             "--fp4-param-gather": "mixed_precision.fp4_param_gather", "--moe-router-dtype": "model.moe_router_dtype"}


def _precision_words(m: re.Match) -> str:
    """'--precision P' as the mixed_precision fields that set recipe P (bf16: FP8 and FP4 both off)."""
    from moetune.planner.knob_fields import PRECISION  # the planner's table, imported only for an error's words

    fields = PRECISION.get(m.group(1))
    if fields is None:
        return m.group(0)
    shown = {k: v for k, v in fields.items() if v is not None}
    words = " ".join(f"{k}={'null' if v is None else v}" for k, v in (shown or fields).items())
    return words if shown else f"BF16 ({words})"


def _flags_as(message: str, word_of) -> str:
    """Each of estimate's flags in MESSAGE as word_of(flag) ('' leaves it as written), its article agreeing with the
    new word: "an --ep" is "a model.expert_model_parallel_size", "an --expert-model-parallel-size"."""
    def name(m: re.Match) -> str:
        word = word_of(m.group(2))
        if not word:
            return m.group(0)
        article = m.group(1) and ("an " if word.lstrip("-")[0] in "aeiou" else "a ")
        return (article or "") + word
    return re.sub(r"(?:\b(an?) )?(--[a-z0-9-]+)", name, message)


def config_words(message: str, config: dict | None = None) -> str:
    """A layout error worded for flags, with the config's names instead (check reads configs, not flags): Bridge's
    fields, or where CONFIG was read from Megatron-LM arguments the arguments that set them (mlm_words)."""
    if config is not None and is_megatron_lm(config):
        return mlm_words(message)

    worded = _flags_as(re.sub(r"--precision ([a-z0-9-]+)", _precision_words, message), lambda f: FLAG_KEYS.get(f, ""))
    # a fix that offers the flag "or" the config key it sets ("--hcp-a2a-size, or model.hierarchical_...") names
    # that key once
    return re.sub(r"\b([a-z_]+\.[a-z0-9_.]+),? or \1(?![\w.])", r"\1", worded)


# estimate's switches that turn a Megatron default off, and the config field each turns off: Megatron-LM has no
# argument that does so, its switch for the field being store_true (arguments.py: --sequence-parallel,
# --use-distributed-optimizer), so a launch turns it off by leaving that switch out and on by adding it
_MLM_OFF_SWITCHES = {"--no-sequence-parallel": "model.sequence_parallel",
                     "--no-distributed-optimizer": "ddp.use_distributed_optimizer"}


def _mlm_precision_words(m: re.Match) -> str:
    """'--precision P' as the Megatron-LM arguments that train recipe P (bf16: no --fp8-format or --fp4-format)."""
    from moetune.planner.knob_fields import PRECISION  # the planner's table, imported only for an error's words

    fields = PRECISION.get(m.group(1))
    if fields is None:
        return m.group(0)
    given = " ".join(f"{names().mlm_flag(k)} {v}" for k, v in fields.items() if v is not None)
    return given or f"BF16 (no {' or '.join(names().mlm_flag(k) for k in fields)})"


def mlm_words(message: str) -> str:
    """A layout error worded for estimate's flags, with the Megatron-LM arguments that set them instead, for a launch
    given as Megatron-LM arguments (which has no Bridge field to set): '--tp' reads '--tensor-model-parallel-size',
    'drop --no-sequence-parallel' reads 'add --sequence-parallel'; a flag with no Megatron-LM argument stays."""
    def switch(m: re.Match) -> str:
        flag = names().mlm_flag(_MLM_OFF_SWITCHES[m.group(2)])
        return f"add {flag}" if m.group(1) else f"no {flag}"

    worded = re.sub(rf"(drop )?({'|'.join(_MLM_OFF_SWITCHES)})(?![\w-])", switch, message)
    worded = re.sub(r"--precision ([a-z0-9-]+)", _mlm_precision_words, worded)
    worded = _flags_as(worded, lambda f: names().mlm_flag(FLAG_KEYS.get(f, "")))
    # a fix that offers the flag "or" the config key it sets ("--hcp-a2a-size, or model.hierarchical_...", "turn it
    # on (model.sequence_parallel=true, or drop --no-sequence-parallel)"), or its Megatron-LM name beside the fix,
    # names the argument once
    worded = re.sub(r"Megatron-LM (--[a-z0-9-]+); add \1(?![\w-])", r"add \1", worded)
    worded = re.sub(r"(--[a-z0-9-]+),? or ([a-z_]+\.[a-z0-9_]+)(?![\w.])",
                    lambda m: m.group(1) if names().mlm_flag(m.group(2)) == m.group(1) else m.group(0), worded)
    return re.sub(r"\b([a-z_]+\.[a-z0-9_]+)(?:=true)?,? or (add )?(--[a-z0-9-]+)(?![\w-])",
                  lambda m: (m.group(2) or "") + m.group(3) if names().mlm_flag(m.group(1)) == m.group(3)
                  else m.group(0), worded)
