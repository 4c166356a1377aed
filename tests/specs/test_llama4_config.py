"""Llama 4's attention and routing semantics, read from its config.json and emitted under Megatron-Core's names
(the model audit: the emitted config had trained Llama 4 with RoPE everywhere, no q/k norm and the router probability
on the expert's output)."""

import json

import pytest

from moetune.errors import MoetuneError
from moetune.planner.model_fields import architecture_fields
from moetune.specs.hf_config import load_hf_config
from moetune.specs.registry import load_model


@pytest.mark.parametrize(("name", "qk_norm"), [("llama4-scout", True), ("llama4-maverick", False)])
def test_the_builtin_configs_read_as_transformers_builds_them(name, qk_norm):
    """Scout's config sets use_qk_norm true, Maverick's false; neither lists no_rope_layers (every 4th layer)."""
    spec = load_model(name)
    assert (spec.qk_l2_norm, spec.no_rope_freq, spec.moe_apply_probs_on_input) == (qk_norm, 4, True)
    fields = architecture_fields(spec)
    assert (fields["model.qk_l2_norm"], fields["model.no_rope_freq"], fields["model.moe_apply_probs_on_input"]) == \
        (True if qk_norm else None, 4, True)
    assert architecture_fields(load_model("qwen3-30b-a3b"))["model.no_rope_freq"] is None


def _scout(tmp_path, shared_data, **text):
    config = json.loads((shared_data / "models" / "llama4-scout.config.json").read_text())
    config["text_config"].update(text)
    path = tmp_path / "c.json"
    path.write_text(json.dumps(config))
    return path


def test_no_rope_layers_give_the_interval(tmp_path, shared_data):
    layers = [int((i + 1) % 3 != 0) for i in range(48)]  # every third layer without RoPE
    assert load_hf_config(_scout(tmp_path, shared_data, no_rope_layers=layers)).no_rope_freq == 3
    assert load_hf_config(_scout(tmp_path, shared_data, use_qk_norm=False)).qk_l2_norm is False


@pytest.mark.parametrize("layers, needle", [
    ([1] * 47 + [0, 1], "must list 0 or 1 for each of the 48 layers"),
    ([0] + [1] * 47, "Megatron's no_rope_freq takes every k-th layer only"),
    (["1"] * 48, "must list 0 or 1"),
])
def test_a_no_rope_pattern_megatron_cannot_express_is_one_line(layers, needle, tmp_path, shared_data):
    with pytest.raises(MoetuneError, match=needle):
        load_hf_config(_scout(tmp_path, shared_data, no_rope_layers=layers))
