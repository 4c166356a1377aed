"""planner/config_map.py PLAN_FIELDS, the fields a plan sets over a recipe, is a declared list: it must be exactly the
fields to_config writes beside the model's own and the cluster's, across plans that between them set every knob field
(a flex dispatcher, full-iteration HybridEP graphs, per-layer graphs, FP8 and FP4 recipes, full and selective
recompute, hierarchical CP, a layout string, uneven stages, offloading, a Mamba hybrid)."""

from moetune.configio.layout_map import HYBRID_SPLIT
from moetune.layout.knobs import Knobs
from moetune.layout.layout import Layout
from moetune.layout.validate import Workload
from moetune.planner.config_map import PLAN_FIELDS, to_config
from moetune.planner.estimate import estimate
from moetune.planner.model_fields import architecture_fields
from moetune.specs.hardware import load_gpu
from moetune.specs.registry import load_model

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
]
# what to_config writes beside the plan's fields: the cluster, the environment, the sequence and micro-batch (which a
# Megatron-LM launch's own arguments set), and a Mamba hybrid's layer pattern (the model's, carrying the split)
BESIDE = ("cluster.", "env.")
NOT_PLANNED = {"model.seq_length", "train.micro_batch_size", HYBRID_SPLIT}
# written by every FP8 / FP4 plan, not declared (the derivation PLAN_FIELDS replaced read BF16 knobs alone) and not
# needed: a Megatron-LM launch's config holds its FP8 recipe wherever FP8 is on (configio/mlm.py VALUE_DEFAULTS), and
# Megatron-LM's FP4 recipe is Bridge's (nvfp4), so declaring them would add an inert fp4_recipe line to every launch
UNDECLARED = {"mixed_precision.fp8_recipe", "mixed_precision.fp4_recipe"}


def _planned_fields() -> set[str]:
    out: set[str] = set()
    for model, gpu, layout, knobs in VARIANTS:
        e = estimate(load_model(model), load_gpu(gpu), layout, Workload(seq_length=4096, global_batch_size=1536),
                     knobs, with_time=False, with_memory=False)
        # the model's own fields, but for the MTP depth: a plan sets it (0 drops a recipe's MTP layers)
        own = set(architecture_fields(e.model)) - {"model.mtp_num_layers"}
        out |= {k for k in to_config(e) if k not in own | NOT_PLANNED and not k.startswith(BESIDE)}
    return out


def test_declared_plan_fields_are_the_fields_plans_write():
    written = _planned_fields() - UNDECLARED
    assert not PLAN_FIELDS - written, f"declared, never written: {sorted(PLAN_FIELDS - written)}"
    assert not written - PLAN_FIELDS, f"written, not declared in PLAN_FIELDS: {sorted(written - PLAN_FIELDS)}"
