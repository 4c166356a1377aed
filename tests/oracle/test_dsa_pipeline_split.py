"""DSA index sharing and the pipeline split: every chunk must start on a layer that computes its own top-k (Megatron-LM
experimental_attention_variant_module_specs.py _validate_dsa_index_share_pipeline_split @ core_v0.19.0)."""

import pytest
from dsa_configs import GLM5, GLM52_SHARING

from moetune.errors import MoetuneError
from moetune.layout.layout import Layout
from moetune.layout.validate import validate_model_layout
from moetune.specs.hf_config import spec_from_hf

# Megatron Bridge perf_recipes/glm_moe_dsa/h100/glm5.py glm52_sft_416gpu_h100_bf16_config @067f987: "Empty VPP chunks
# keep every four-layer DSA index-sharing group intact"
BRIDGE_GLM52_H100 = ("Et|t||tttt|tttt|tttt|tttt||tttt|tttt|tttt|tttt||tttt|tttt|tttt|tttt||tttt|tttt|tttt|tttt||"
                     "tttt|tttt|ttttmL")


def _spec(sharing: dict):
    return spec_from_hf({**GLM5, **sharing}, name="glm", origin="glm.json")


def test_bridge_glm52_layout_keeps_the_sharing_groups():
    validate_model_layout(_spec(GLM52_SHARING), Layout(world_size=416, pp=13, vpp=2, cp=32, ep=32,
                                                       pipeline_layout=BRIDGE_GLM52_H100))


def test_an_even_split_through_a_sharing_group_is_refused():
    """78 layers over PP13 x VPP2: three a chunk, the second starting on layer 4, which reuses layer 3's top-k."""
    with pytest.raises(MoetuneError, match="rank 1 chunk 0 starts on layer 4, which reuses the top-k of layer 3"):
        validate_model_layout(_spec(GLM52_SHARING), Layout(world_size=416, pp=13, vpp=2, cp=32, ep=32))


def test_without_sharing_any_split_stands():
    validate_model_layout(_spec({}), Layout(world_size=416, pp=13, vpp=2, cp=32, ep=32))


def test_the_planner_splits_along_the_sharing_groups():
    """GLM-5.2's groups are 1, 1, then nineteen of 4 (layers 3-6, 7-10, ..., 75-78, 1-based): split over 13 chunks
    each chunk starts on a computing layer and sits as near the mean (6) as whole groups allow; 26 chunks exceed the
    21 groups."""
    from moetune.layout.dsa_split import index_group_counts, keeps_index_groups
    from moetune.layout.layout import write_pipeline_layout

    spec = spec_from_hf({**GLM5, **GLM52_SHARING}, name="g", origin="g.json")
    counts = index_group_counts(spec, 13)
    assert counts == [6, 8, 4, 8, 4, 8, 4, 8, 4, 8, 4, 8, 4]
    lay = Layout(world_size=13, pp=13, pipeline_layout=write_pipeline_layout(counts, spec.mtp_num_layers))
    assert keeps_index_groups(spec, lay) and index_group_counts(spec, 26) is None
