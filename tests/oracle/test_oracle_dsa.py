"""DeepSeek Sparse Attention per rank: moetune's count vs Megatron-Core's build (moetune.oracle, megatron-core
0.16.1: DSAttention with its DSAIndexer in the MLA core attention, the indexer's linears duplicated over TP), for
GLM-5 and DeepSeek-V3.2 cut to a few layers and experts, layout by layout."""

import pytest
from dsa_configs import DEEPSEEK_V32, GLM5, GLM52_SHARING, small

pytest.importorskip("megatron.core")

from moetune.errors import MoetuneError  # noqa: E402
from moetune.layout.layout import Layout  # noqa: E402
from moetune.oracle import count_params_breakdown, count_params_per_stage  # noqa: E402
from moetune.specs.hf_config import spec_from_hf  # noqa: E402
from moetune.walls.rank_params import padded_vocab_size, stage_params  # noqa: E402

CASES = [
    # (config, layout, layer spec): TP > 1 (indexer whole on each TP rank), PP > 1 with uneven stages and MTP, EP > 1,
    # ETP > 1, the local spec (MLA down-projections split over TP, the indexer still whole)
    ("glm5", dict(world_size=8, tp=2, ep=4), "te"),
    ("glm5", dict(world_size=16, tp=2, pp=2, ep=4, first_stage_layers=2), "te"),
    ("glm5", dict(world_size=16, tp=4, pp=2, ep=2, etp=2), "local"),
    ("deepseek-v3.2", dict(world_size=16, tp=2, pp=2, ep=8), "te"),
    ("deepseek-v3.2", dict(world_size=24, tp=1, pp=3, ep=8, pipeline_layout="Et*2|t*2|t*2mL"), "te"),
]
CONFIGS = {"glm5": GLM5, "deepseek-v3.2": DEEPSEEK_V32}


def _oracle(hf: dict, lay: Layout, layer_spec: str, padded: int, **kw) -> list[int]:
    vpp = lay.vpp if lay.pipeline_layout is None and lay.vpp > 1 else None
    return count_params_per_stage(hf, tp=lay.tp, pp=lay.pp, ep=lay.ep, etp=lay.etp, vpp=vpp,
                                  world_size=lay.world_size, padded_vocab_size=padded, spec=layer_spec,
                                  num_layers_in_first_pipeline_stage=lay.first_stage_layers,
                                  pipeline_model_parallel_layout=lay.pipeline_layout, **kw)


@pytest.mark.parametrize(("model", "kwargs", "layer_spec"), CASES,
                         ids=[f"{m}-{'-'.join(f'{k}{v}' for k, v in kw.items())}-{s}" for m, kw, s in CASES])
def test_dsa_stage_params_equal_megatron_core(model, kwargs, layer_spec):
    hf = small(CONFIGS[model])
    spec, lay = spec_from_hf(hf, name=model, origin=f"{model}.json"), Layout(**kwargs)
    padded = padded_vocab_size(spec.vocab_size, lay.tp, spec.vocab_divisor)
    assert [s.total for s in stage_params(spec, lay, layer_spec=layer_spec)] == _oracle(hf, lay, layer_spec, padded)


def test_the_indexer_is_whole_on_every_tp_rank():
    """linear_wq_b is q_lora_rank x heads x head dim at TP 4 as at TP 1 (parallel_mode="duplicated")."""
    hf = small(GLM5, layers=1, experts=4)
    names = count_params_breakdown(hf, tp=4, pp=1, ep=1, etp=1, world_size=4, include_mtp=False,
                                   padded_vocab_size=padded_vocab_size(154880, 4, 1280))
    wq = [v for k, v in names.items() if k.endswith("indexer.linear_wq_b.weight")]
    assert wq == [2048 * 32 * 128]


def test_the_oracle_refuses_index_sharing():
    """megatron-core 0.16.1 has no dsa_indexer_topk_freq: a sharing config is refused, not counted unshared."""
    with pytest.raises(MoetuneError, match="index_topk_freq > 1"):
        count_params_per_stage({**small(GLM5), **GLM52_SHARING}, tp=1, pp=1, ep=1, etp=1, world_size=1,
                               padded_vocab_size=154880)
