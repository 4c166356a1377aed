"""Megatron-Core's recompute and offload module names (TransformerConfig.recompute_modules, offload_modules): the
ones moetune models, how a user's list of them is read, and which offloads a recompute plan leaves nothing to move.
Knobs (knobs.py) holds the chosen sets; the walls read what each module saves (walls/activations.py)."""

from moetune.errors import MoetuneError
from moetune.words import closest

RECOMPUTE_MODULES: tuple[str, ...] = (
    "core_attn", "moe_act", "layernorm", "mla_up_proj", "mlp", "moe", "shared_experts",
)
# Recompute modules Megatron-Core main accepts that moetune does not model (transformer_config.py allowed_modules:
# gated delta-net and multi-head-compression pieces)
UNMODELLED_RECOMPUTE = ("gdn_norm_out", "gdp_in_proj", "gdp_qkv", "mhc")
# The long-context seed writes "up_proj" and "norm"; Megatron spells them as below.
MODULE_ALIASES = {"up_proj": "mla_up_proj", "norm": "layernorm"}
# Megatron-Core fine-grained activation offloading (TransformerConfig.offload_modules): the module whose
# input is moved to host memory after the forward and brought back for the backward.
OFFLOAD_MODULES: tuple[str, ...] = ("attn_norm", "qkv_linear", "core_attn", "attn_proj", "mlp_norm", "expert_fc1",
                                    "moe_act")
# The offload groups inside an MoE layer's forward (Megatron-Core's fused_group_mlp included): nothing of them is saved
# when 'moe' recompute checkpoints the whole MoE forward, and Megatron-Core refuses the pair (transformer_config.py)
MOE_OFFLOAD_MODULES = frozenset({"expert_fc1", "moe_act", "fused_group_mlp"})


def unsaved_offloads(recompute: str, modules, offload) -> list[str]:
    """The offload modules a recompute plan leaves nothing saved for, which Megatron-Core refuses beside it: every one
    under full recompute (only layer inputs are kept), those inside the MoE layer beside the 'moe' module."""
    if recompute == "full":
        return sorted(offload)
    return sorted(MOE_OFFLOAD_MODULES & set(offload)) if "moe" in modules else []


def _parse_names(text: str | list[str] | tuple[str, ...] | None, allowed: tuple[str, ...], what: str,
                 aliases: dict[str, str] | None = None) -> frozenset[str]:
    """A comma- or space-separated list of Megatron module names, each checked against `allowed`."""
    if not text:
        return frozenset()
    names = text.replace(",", " ").split() if isinstance(text, str) else list(text)
    names = [(aliases or {}).get(n, n) for n in names]
    bad = sorted(set(names) - set(allowed))
    if unmodelled := [b for b in bad if what == "recompute" and b in UNMODELLED_RECOMPUTE]:
        raise MoetuneError(f"moetune does not model recompute module(s) {unmodelled} (Megatron-Core main accepts "
                           f"them); drop them to estimate the rest, or choose from {', '.join(allowed)}")
    if bad:
        # the config-only rule says the same of a config (check --model reports one finding for it)
        raise MoetuneError(f"unknown {what} module(s) {bad}{did_you_mean(bad, allowed)}; choose from "
                           f"{', '.join(allowed)}", same_as=("fit.unknown_recompute_module",) if what == "recompute"
                           else ())
    return frozenset(names)


def did_you_mean(bad: list[str], allowed) -> str:
    """' (did you mean layernorm?)' for the misspellings with a close module name; '' for none."""
    close = [m for b in bad if (m := closest(b, allowed, 0.7))]
    return f" (did you mean {', '.join(close)}?)" if close else ""


def parse_modules(text: str | list[str] | tuple[str, ...] | None) -> frozenset[str]:
    """Megatron recompute_modules (the long-context seed's spellings accepted)."""
    return _parse_names(text, RECOMPUTE_MODULES, "recompute", MODULE_ALIASES)


def parse_offload_modules(text: str | list[str] | tuple[str, ...] | None) -> frozenset[str]:
    """Megatron offload_modules (fine-grained activation offloading)."""
    return _parse_names(text, OFFLOAD_MODULES, "offload")
