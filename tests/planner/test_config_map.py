"""planner/config_map.py PLAN_FIELDS, the fields a plan sets over a recipe, is a declared list: it must be exactly the
fields to_config writes beside the model's own and the cluster's, across plans that between them set every knob field
(a flex dispatcher, full-iteration HybridEP graphs, per-layer graphs, FP8 and FP4 recipes, full and selective
recompute, hierarchical CP, a layout string, uneven stages, offloading, a Mamba hybrid)."""

import sys
from pathlib import Path

from moetune.configio.layout_map import HYBRID_SPLIT
from moetune.layout.knobs import Knobs
from moetune.layout.layout import Layout
from moetune.layout.validate import Workload
from moetune.planner.config_map import PLAN_FIELDS, to_config
from moetune.planner.estimate import estimate
from moetune.planner.model_fields import architecture_fields
from moetune.specs.hardware import load_gpu
from moetune.specs.hf_config import spec_from_hf
from moetune.specs.registry import load_model

sys.path.insert(0, str(Path(__file__).parents[1] / "oracle"))
from dsa_configs import GLM5, GLM52_SHARING  # noqa: E402

VARIANTS = [
    ("deepseek-v3", "h100", Layout(world_size=256, tp=2, cp=4, pp=8, ep=16, pipeline_layout="Et|(tt|)*30mL"),
     Knobs(dispatcher="deepep", recompute="selective", ep_overlap=True, cp_comm_type="a2a+p2p")),
    ("deepseek-v3", "gb200", Layout(world_size=256, pp=4, vpp=4, ep=64, pipeline_layout="Et*4|(t*4|)*14tmL"),
     Knobs(dispatcher="hybridep", precision="mxfp8", cuda_graph_scope=("full_iteration",), routing="force-balance",
           recompute="full")),
    ("nemotron3-nano-30b-a3b", "h100", Layout(world_size=16, tp=2, pp=2, ep=8),
     Knobs(offload_modules=frozenset({"expert_fc1"}), optimizer_offload_fraction=1.0)),
    ("qwen3-30b-a3b", "h100", Layout(world_size=32, tp=2, cp=2, pp=2, ep=4),
     Knobs(cuda_graph_scope=("attn",), cp_comm_type="a2a", overlap_param_gather=False)),
    ("qwen3-30b-a3b", "b200", Layout(world_size=24, pp=3, ep=8, first_stage_layers=15, last_stage_layers=15),
     Knobs(precision="nvfp4")),
    # a DeepSeek Sparse Attention model: the plan sets the DSA kernels it priced (dsa_kernel_backend)
    (GLM5, "h100", Layout(world_size=416, cp=32, pp=13, ep=32, pipeline_layout="Et*8|(t*6|)*11t*4mL"),
     Knobs(dispatcher="deepep", cp_comm_type="all_gather")),
]
# what to_config writes beside the plan's fields: the cluster, the environment, the sequence and micro-batch (which a
# Megatron-LM launch's own arguments set), and a Mamba hybrid's layer pattern (the model's, carrying the split)
BESIDE = ("cluster.", "env.")
NOT_PLANNED = {"model.seq_length", "train.micro_batch_size", HYBRID_SPLIT}
# written by every FP8 / FP4 plan, not declared (the derivation PLAN_FIELDS replaced read BF16 knobs alone) and not
# needed: a Megatron-LM launch's config holds its FP8 recipe wherever FP8 is on (configio/mlm.py VALUE_DEFAULTS), and
# Megatron-LM's FP4 recipe is Bridge's (nvfp4), so declaring them would add an inert fp4_recipe line to every launch
UNDECLARED = {"mixed_precision.fp8_recipe", "mixed_precision.fp4_recipe"}


def _model(name: str | dict):
    return load_model(name) if isinstance(name, str) else spec_from_hf(name, name="glm5", origin="glm5.json")


def _planned_fields() -> set[str]:
    out: set[str] = set()
    for model, gpu, layout, knobs in VARIANTS:
        e = estimate(_model(model), load_gpu(gpu), layout, Workload(seq_length=4096, global_batch_size=1536),
                     knobs, with_time=False, with_memory=False)
        # the model's own fields, but for the MTP depth: a plan sets it (0 drops a recipe's MTP layers)
        own = set(architecture_fields(e.model)) - {"model.mtp_num_layers"}
        out |= {k for k in to_config(e) if k not in own | NOT_PLANNED and not k.startswith(BESIDE)}
    return out


def test_declared_plan_fields_are_the_fields_plans_write():
    written = _planned_fields() - UNDECLARED
    assert not PLAN_FIELDS - written, f"declared, never written: {sorted(PLAN_FIELDS - written)}"
    assert not written - PLAN_FIELDS, f"written, not declared in PLAN_FIELDS: {sorted(written - PLAN_FIELDS)}"


def test_a_dsa_plan_writes_the_sparse_attention_it_priced():
    """Megatron Bridge's GLM-5 bridge sets the variant, the indexer's heads, head dim and top-k from the config.json
    and the sparse indexer loss at 0.001 (glm5_bridge.py provider_bridge @067f987), its recipes the cuDNN kernels
    (perf_recipes/glm_moe_dsa/h100/glm5.py dsa_kernel_backend); without them a Megatron-LM launch builds plain MLA.
    GLM-5.2's index sharing: one indexer per 4 layers after the first 3 (its config.json index_topk_freq and
    index_skip_topk_offset)."""
    lay = Layout(world_size=416, cp=32, pp=13, ep=32, pipeline_layout="Et*8|(t*6|)*11t*4mL")
    config = to_config(estimate(_model(GLM5), load_gpu("h100"), lay, Workload(seq_length=4096, global_batch_size=520),
                                Knobs(dispatcher="deepep", cp_comm_type="all_gather"), with_time=False,
                                with_memory=False))
    assert {k: config.get(k) for k in (
        "model.experimental_attention_variant", "model.dsa_indexer_n_heads", "model.dsa_indexer_head_dim",
        "model.dsa_indexer_topk", "model.dsa_indexer_loss_coeff", "model.dsa_indexer_use_sparse_loss",
        "model.dsa_kernel_backend")} == {
        "model.experimental_attention_variant": "dsa", "model.dsa_indexer_n_heads": 32,
        "model.dsa_indexer_head_dim": 128, "model.dsa_indexer_topk": 2048, "model.dsa_indexer_loss_coeff": 0.001,
        "model.dsa_indexer_use_sparse_loss": True, "model.dsa_kernel_backend": "cudnn"}
    assert "model.dsa_indexer_topk_freq" not in config  # no index sharing: Megatron-Core's default 1 stands
    shared = architecture_fields(_model({**GLM5, **GLM52_SHARING}))
    assert (shared["model.dsa_indexer_topk_freq"], shared["model.dsa_indexer_skip_topk_offset"]) == (4, 3)
    assert architecture_fields(load_model("deepseek-v3")).get("model.experimental_attention_variant") is None
