"""Quantized parameters: which recipes keep the GEMM weights as FP8 or NVFP4 tensors with no BF16 copy
(fp8_param_gather / fp4_param_gather, Knobs.fp8_params / fp4_params), and where Megatron takes those switches."""

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from moetune.layout.knobs import Knobs

# The recipes whose Megatron Bridge preset keeps the parameters in FP8 (MixedPrecisionConfig.fp8_param_gather, which
# Bridge mirrors into TransformerConfig.fp8_param and the DDP config): bf16_with_fp8_delayed_scaling_mixed,
# bf16_with_fp8_current_scaling_mixed and bf16_with_mxfp8_mixed set it True; bf16_with_fp8_subchannel_scaling_mixed
# (blockwise) sets it False, and bf16_with_nvfp4_mixed sets fp8_param_gather False (fp4_param_gather True instead:
# FP4_PARAM_PRESET) (Megatron Bridge src/megatron/bridge/training/mixed_precision.py)
FP8_PARAM_PRESET = frozenset({"fp8-delayed", "fp8-current", "mxfp8"})
# The recipes under which FP8 parameters exist at all: Megatron-Core refuses fp8_param without fp8
# (transformer_config.py "fp8_param must be used together with fp8 mode"), and FP4 excludes FP8
FP8_PARAM_PRECISIONS = ("fp8-blockwise", "fp8-delayed", "fp8-current", "mxfp8")
# Megatron's fp8_recipe under each FP8 precision (planner/knob_fields.py PRECISION writes it beside the format)
FP8_RECIPES = {"fp8-blockwise": "blockwise", "mxfp8": "mxfp8", "fp8-current": "tensorwise", "fp8-delayed": "delayed"}
# The recipe whose FP8 weights the optimizer's CPU offload steps: Megatron-LM asserts "When `--fp8-param-gather` is
# enabled, the optimizer cpu offload must be used in conjunction with `--fp8-recipe delayed`" (megatron/training/
# arguments.py validate_args), so an offloading plan under another recipe keeps BF16 weights
OFFLOAD_FP8_RECIPE = "delayed"
# The one recipe with FP4 parameters, whose Bridge preset keeps them (bf16_with_nvfp4_mixed: fp4_param_gather=True,
# which Bridge mirrors into fp4_param); Megatron-LM refuses --fp4-param-gather without --fp4-format (validate_args) and
# TransformerConfig fp4_param without fp4
FP4_PARAM_PRECISION = "nvfp4"
# Megatron's recipe name (fp8_recipe, fp4_recipe) under each precision with quantized parameters
PARAM_RECIPES = {**FP8_RECIPES, FP4_PARAM_PRECISION: "nvfp4"}
# The recipes (Megatron's names) whose quantized weights the optimizer's CPU offload steps, per switch: FP8 ones under
# the delayed recipe alone (above), NVFP4 ones under none, though Megatron-LM does not say so: the offload takes the
# precision-aware path (optimizer_config.py use_precision_aware_optimizer_no_fp8_or_ds_fp8), which hands the optimizer
# each parameter's shard view, and distrib_optimizer.py has none for an NVFP4Tensor (shard_model_param = None,
# "NVFP4Tensor don't support view(-1)") to rebuild its HybridDeviceOptimizer from, nor casts the master back
# (_copy_main_params_to_model_params returns before quantize_nvfp4_param_shard)
OFFLOAD_RECIPES = {"fp8_param_gather": frozenset({OFFLOAD_FP8_RECIPE}), "fp4_param_gather": frozenset()}


def offload_refuses_params(switch: str, on: bool | None, recipe: str | None) -> bool:
    """Whether weights a switch keeps quantized (`on`) stand under a recipe (Megatron's name) whose weights the
    optimizer's CPU offload cannot step (not in OFFLOAD_RECIPES): the one test Knobs (each switch's offload need), the
    planner's offload moves (planner/moves.py) and the rules' derived.offload_refuses_fp8_params / _fp4_params
    (rules/derive.py) make."""
    return bool(on) and recipe not in OFFLOAD_RECIPES[switch]


@dataclass(frozen=True, slots=True)
class _Need:
    """What Megatron asks of a quantized-parameter switch that is on: `refuses` the knobs that break it, with
    `message` (the refusal's words for those knobs) and the rule that says the same (`same_as`)."""
    refuses: Callable[["Knobs"], bool]
    message: Callable[["Knobs"], str]
    same_as: tuple[str, ...] = ()


def _offload_need(switch: str, message: Callable[["Knobs"], str], rule: str) -> _Need:
    """A switch's need beside the optimizer's CPU offload: a recipe whose weights it steps (offload_refuses_params)."""
    return _Need(lambda k: k.optimizer_offload_fraction != 0
                 and offload_refuses_params(switch, True, PARAM_RECIPES.get(k.precision)), message, (rule,))


@dataclass(frozen=True, slots=True)
class _ParamSwitch:
    """A tri-state Knobs field keeping the weights quantized: None takes Bridge's preset, on under the `preset`
    recipes where none of `needs` refuses it and `preset_off` does not hold (Knobs._param_switch)."""
    preset: frozenset[str]
    needs: tuple[_Need, ...]
    # knobs beside which the preset stays off though Megatron takes the switch stated on
    preset_off: Callable[["Knobs"], bool] = lambda k: False


# fp8_param_gather: under an FP8 recipe, with the distributed optimizer (Muon's layer-wise one too: Megatron-LM checks
# the flag before an emerging optimizer turns it into that one) and, beside the optimizer's CPU offload, under the
# delayed recipe (training/arguments.py validate_args). fp4_param_gather: under NVFP4 (FP4_PARAM_PRECISION), without
# the offload (OFFLOAD_RECIPES); its preset only with the distributed optimizer, whose shards quantize_nvfp4_param_shard
# casts back (distrib_optimizer.py), though Megatron asserts nothing of a stated one without it
PARAM_SWITCHES = {
    "fp8_param_gather": _ParamSwitch(FP8_PARAM_PRESET, (
        _Need(lambda k: k.precision not in FP8_PARAM_PRECISIONS,
              lambda k: f"fp8_param_gather needs an FP8 recipe, got {k.precision} (Megatron-Core: 'fp8_param must be "
              f"used together with fp8 mode'); drop it or pick one of {', '.join(FP8_PARAM_PRECISIONS)}",
              ("precision.fp8_params_without_fp8",)),
        _Need(lambda k: not k.distributed_optimizer,
              lambda k: "fp8_param_gather needs the distributed optimizer (Megatron-LM validate_args asserts it); "
              "drop fp8_param_gather (BF16 weights) or turn the distributed optimizer on",
              ("precision.fp8_params_need_distributed_optimizer",)),
        _offload_need("fp8_param_gather",
                      lambda k: f"fp8_param_gather with the optimizer's CPU offload "
                      f"({k.optimizer_offload_fraction:g}) needs the delayed FP8 recipe, got {k.precision} "
                      "(Megatron-LM validate_args); drop fp8_param_gather (BF16 weights) or the offload",
                      "precision.fp8_params_with_optimizer_offload"))),
    "fp4_param_gather": _ParamSwitch(frozenset({FP4_PARAM_PRECISION}), (
        _Need(lambda k: k.precision != FP4_PARAM_PRECISION,
              lambda k: f"fp4_param_gather needs --precision {FP4_PARAM_PRECISION}, got {k.precision} (Megatron-LM: "
              "'--fp4-param-gather must be used together with --fp4-format'); drop it",
              ("precision.fp4_params_without_fp4",)),
        _offload_need("fp4_param_gather",
                      lambda k: f"fp4_param_gather with the optimizer's CPU offload "
                      f"({k.optimizer_offload_fraction:g}): Megatron-Core's offloaded optimizer cannot step NVFP4 "
                      "weights (distrib_optimizer.py builds no shard of an NVFP4Tensor for it); drop fp4_param_gather "
                      "(BF16 weights) or the offload",
                      "precision.fp4_params_with_optimizer_offload")),
        preset_off=lambda k: not k.distributed_optimizer),
}
