"""DeepSeek Sparse Attention models (GLM-5, DeepSeek-V3.2): read from their config.json, with the indexer's
parameters counted as Megatron-Core builds them (dsa.py DSAIndexer @ core_v0.19.0). Needs no Megatron."""

import pytest
from dsa_configs import DEEPSEEK_V32, GLM5, GLM52_SHARING

from moetune.errors import MoetuneError
from moetune.specs.hf_config import spec_from_hf
from moetune.walls.model_params import main_tensors
from moetune.walls.params import numel

GLM5_CARD = 743_911_199_232  # Megatron-Bridge examples/model_verification_cards/glm5/card.yaml @067f987


def _spec(hf: dict):
    return spec_from_hf(hf, name="x", origin="x.json")


def test_glm5_parameters_equal_the_bridge_card():
    """78 layers, MTP excluded, the router's expert bias a buffer: the card's figure to the parameter; 9,371,904 per
    indexer (2048 x 32 x 128 + 6144 x 128 + 2 x 128 + 6144 x 32), on every layer."""
    spec = _spec(GLM5)
    assert spec.dsa.index_topk == 2048 and spec.mla.qk_pos_emb_head_dim == 64 and spec.vocab_divisor == 1280
    assert all(k.indexer for k in spec.layers) and spec.mtp_layer_kind.indexer
    assert numel(main_tensors(spec), megatron=True) == GLM5_CARD


def test_deepseek_v32_is_deepseek_v3_plus_an_indexer_per_layer():
    v3 = {k: v for k, v in DEEPSEEK_V32.items() if not k.startswith("index_")}
    v32, base = _spec(DEEPSEEK_V32), _spec({**v3, "model_type": "deepseek_v3"})
    indexer = 1536 * 64 * 128 + 7168 * 128 + 2 * 128 + 7168 * 64
    assert numel(main_tensors(v32), megatron=True) - numel(main_tensors(base), megatron=True) == 61 * indexer
    assert numel(main_tensors(v32), megatron=True) == 671_877_929_216


def test_glm52_shares_indexers_as_megatron_builds_them():
    """index_topk_freq 4, offset 3 (dsa.py is_dsa_skip_topk_layer): layers 1-3 and every 4th from 7 (1-based) run an
    indexer, 21 of 78; the other 57 hold none. The MTP layer keeps its own."""
    spec = _spec({**GLM5, **GLM52_SHARING})
    own = [i for i, k in enumerate(spec.layers) if k.indexer]
    assert own == [0, 1, 2, *range(6, 78, 4)] and len(own) == 21
    assert spec.mtp_layer_kind.indexer
    assert numel(main_tensors(spec), megatron=True) == GLM5_CARD - 57 * 9_371_904


def test_indexer_types_must_match_the_sharing_megatron_builds():
    types = ["full" if i < 3 or (i - 2) % 4 == 0 else "shared" for i in range(78)]
    assert sum(k.indexer for k in _spec({**GLM5, **GLM52_SHARING, "indexer_types": types}).layers) == 21
    types[5] = "full"
    with pytest.raises(MoetuneError, match="indexer_types disagrees with index_topk_freq.*layer 5"):
        _spec({**GLM5, **GLM52_SHARING, "indexer_types": types})


def test_estimate_and_plan_price_a_dsa_model_and_say_its_rates_are_uncalibrated():
    """The walls price the indexer and the sparse attention (walls/dsa.py), so estimate and plan run and carry the
    note that no published run calibrates them; the dense indexer loss, whose work was not read, is refused in one
    line."""
    from dataclasses import replace

    from moetune.layout.layout import Layout
    from moetune.layout.validate import Workload
    from moetune.planner.estimate import estimate
    from moetune.planner.search import plan
    from moetune.specs.hardware import load_gpu

    spec, gpu = _spec(DEEPSEEK_V32), load_gpu("h100")
    e = estimate(spec, gpu, Layout(world_size=256, ep=32))
    assert "not calibrated" in e.time["uncalibrated"] and e.time["compute_by_class"]["indexer"] > 0
    result = plan(spec, gpu, 256, Workload(seq_length=4096, global_batch_size=256))
    assert result.results and "uncalibrated" in result.results[0].time
    dense_loss = replace(spec, dsa=replace(spec.dsa, sparse_loss=False))
    with pytest.raises(MoetuneError, match="dense indexer loss .* is not priced"):
        estimate(dense_loss, gpu, Layout(world_size=256, ep=32))
    with pytest.raises(MoetuneError, match="dense indexer loss .* is not priced"):
        plan(dense_loss, gpu, 256, Workload(seq_length=4096, global_batch_size=256))


def test_mtp_added_to_a_sharing_model_runs_its_own_indexer():
    """--mtp-layers on a config without MTP builds each MTP layer from the last decoder layer's spec (gpt_builders.py),
    numbered 1 in its block, so it computes its top-k even where that decoder layer shares (GLM-5.2's layer 78)."""
    spec = _spec({**GLM5, **GLM52_SHARING, "num_nextn_predict_layers": 0})
    assert not spec.layers[-1].indexer and spec.mtp_num_layers == 0
    assert spec.with_mtp(1).mtp_layer_kind.indexer


@pytest.mark.parametrize("whole", [192, 100, "256"])
def test_glm_qk_head_dim_must_hold_the_rope_part(whole):
    """GlmMoeDsaConfig's qk_head_dim is nope + rope (glm5_bridge.py takes the rope part as their difference)."""
    with pytest.raises(MoetuneError, match="qk_head_dim .* must be a whole number above qk_nope_head_dim"):
        _spec({**GLM5, "qk_head_dim": whole})


def test_an_mtp_layer_that_would_share_a_top_k_is_refused():
    """MTP layers are numbered 1, 2, ... (multi_token_prediction.py), so under sharing MTP layer max(offset, 1) + 1
    holds no indexer (is_dsa_skip_topk_layer; Bridge's count_indexer_layers(mtp_num_layers)): one line, not a count
    that gives it one. GLM-5.2 (offset 3) keeps up to 3; offset 0 keeps 1; no sharing keeps any."""
    glm52 = _spec({**GLM5, **GLM52_SHARING})
    assert glm52.with_mtp(3).mtp_layer_kind.indexer
    with pytest.raises(ValueError, match="MTP layer 4 reuses an earlier MTP layer's top-k.*at most 3 MTP layers"):
        glm52.with_mtp(4)
    with pytest.raises(MoetuneError, match="x.json: 2 MTP layers: .*MTP layer 2 reuses.*at most 1 MTP layers"):
        _spec({**GLM5, "index_topk_freq": 4, "num_nextn_predict_layers": 2})
    assert _spec(GLM5).with_mtp(5).mtp_num_layers == 5
