"""Config-only `check` and the model's own layout validation agree on which CP sizes split a Mamba-2 or gated
delta-net mixer (rules cp.mamba_heads / cp.gdn_heads against layout/validate.py), for the real hybrid models."""

import pytest

from moetune.configio import load_config
from moetune.errors import MoetuneError
from moetune.layout.layout import Layout
from moetune.layout.validate import validate_shapes
from moetune.rules import evaluate
from moetune.specs.registry import load_model

MIXER_RULES = {"cp.mamba_heads", "cp.gdn_heads"}


def _mixer_fields(spec) -> list[str]:
    """What a Bridge config of the model says about its mixers (the fields Bridge's nemotron_h / qwen3_next bridges
    set), without the attention heads, which other rules check."""
    if spec.mamba:
        return ["model.hybrid_layer_pattern=M*E", f"model.hidden_size={spec.hidden_size}",
                f"model.mamba_num_heads={spec.mamba.num_heads}", f"model.mamba_num_groups={spec.mamba.n_groups}"]
    return ["model.experimental_attention_variant=gated_delta_net",
            f"model.linear_num_key_heads={spec.gdn.num_key_heads}",
            f"model.linear_num_value_heads={spec.gdn.num_value_heads}"]


def _model_refuses(spec, tp: int, cp: int) -> bool:
    try:
        validate_shapes(spec, Layout(world_size=tp * cp, tp=tp, cp=cp))
    except MoetuneError as err:
        return any(w in str(err) for w in ("mamba", "linear_num"))
    return False


@pytest.mark.parametrize("name", ["nemotron3-nano-30b-a3b", "qwen3-next-80b-a3b"])
@pytest.mark.parametrize("tp", [1, 2])  # both models have 2 KV groups: TP 4 fails before CP
def test_config_rules_refuse_the_cp_the_model_refuses(name, tp):
    spec = load_model(name)
    seen = set()
    for cp in (2, 3, 4, 8, 16, 32, 64, 128):
        config = load_config(sets=[*_mixer_fields(spec), f"model.tensor_model_parallel_size={tp}",
                                   f"model.context_parallel_size={cp}"])
        fired = {f.rule for f in evaluate(config) if f.rule in MIXER_RULES}
        assert bool(fired) == _model_refuses(spec, tp, cp), (tp, cp, fired)
        seen.add(bool(fired))
    assert seen == {True, False}  # each model has CP sizes on both sides
