"""Selective recompute over an empty module list recomputes nothing: Megatron-Core fills in its core_attn default only
where recompute_modules is None (transformer_config.py @ core_v0.18.2). Megatron Bridge @067f987
perf_recipes/deepseek/gb300/deepseek_v3.py deepseek_v3_pretrain_256gpu_gb300_fp8mx_config sets
recompute_granularity "selective" (_deepseek_v3_common) and recompute_modules [] and measures 6,288-6,338
tokens/s/GPU (docs/performance-summary.md, 26.06-26.08); read as core_attn recompute it was predicted at 6,025 with a
warning against core_attn recompute the config does not ask for, now 6,319 and no warning."""

import pytest

from moetune.configio import load_config
from moetune.planner.from_config import from_config
from moetune.rules import evaluate

SELECTIVE = ["model.num_moe_experts=64", "model.moe_grouped_gemm=true", "model.recompute_granularity=selective"]


@pytest.mark.parametrize(("modules", "run"), [([], frozenset()), (None, frozenset({"core_attn"})),
                                              (["mla_up_proj"], frozenset({"mla_up_proj"}))])
def test_knobs_recompute_what_megatron_recomputes(modules, run):
    given = [] if modules is None else [f"model.recompute_modules=[{','.join(modules)}]"]
    sets = SELECTIVE + ["model.seq_length=4096"] + given
    _, _, knobs = from_config(load_config(sets=sets, gpu="gb300", gpus=8))
    assert knobs.effective_modules == run


@pytest.mark.parametrize(("sets", "flagged"), [([], True), (["model.recompute_modules=null"], True),
                                               (["model.recompute_modules=[]"], False),
                                               (["model.recompute_modules=[layernorm]"], False)])
def test_core_attn_rules_read_what_megatron_recomputes(sets, flagged):
    fired = {f.rule for f in evaluate(load_config(sets=SELECTIVE + sets + ["model.seq_length=4096"]))}
    assert ("fit.core_attn_fused_attention" in fired) is flagged
    long = {f.rule for f in evaluate(load_config(sets=SELECTIVE + sets + ["model.seq_length=65536"]))}
    assert ("longctx.sdpa_recompute" in long) is flagged


def test_megatron_lm_arguments_of_an_empty_module_list_recompute_nothing(tmp_path):
    """emit's Megatron-LM arguments of such a config had said '--recompute-granularity selective' alone, which
    Megatron-LM runs as core_attn recompute (--recompute-modules left out; it cannot be given empty): now the
    granularity is left off too, with a note, so the launch recomputes nothing, as the config does."""
    from moetune.emit import emit_all

    config = load_config(sets=SELECTIVE + ["model.seq_length=4096", "model.recompute_modules=[]",
                                           "mixed_precision.bf16=true"], gpu="gb300", gpus=8)
    text = emit_all(config)["megatron_lm_args.txt"]
    (tmp_path / "megatron_lm_args.txt").write_text(text)
    assert "\n--recompute-granularity" not in text and "# left off: --recompute-granularity selective" in text
    _, _, knobs = from_config(load_config([tmp_path / "megatron_lm_args.txt"], gpu="gb300", gpus=8))
    assert knobs.effective_modules == frozenset() and knobs.recompute == "none"
