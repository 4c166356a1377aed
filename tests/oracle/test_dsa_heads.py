"""FlashMLA's sparse kernels run only some query-head counts a rank (Megatron-LM
megatron/core/transformer/experimental_attention_variant/dsa_cudnn_kernels.py _flash_mla_head_padding @ core_v0.19.0):
on Hopper a count dividing 64 (padded to 64) or a multiple of 64; on Blackwell one dividing 64 or 128 (padded to it)
or a multiple of 128. Any other falls back to the unfused dense path, which moetune does not price: refused in one
line by estimate and left out of a plan."""

import pytest
from dsa_configs import GLM5

from moetune.errors import MoetuneError
from moetune.layout.dsa_split import flash_mla_heads
from moetune.layout.layout import Layout
from moetune.planner.estimate import estimate
from moetune.specs.hardware import load_gpu
from moetune.specs.hf_config import spec_from_hf
from moetune.walls.dsa import head_padding

# (local heads, arch) -> the heads the kernel runs, read off _flash_mla_head_padding's branches by hand
CASES = {(32, "hopper"): 64, (64, "hopper"): 64, (128, "hopper"): 128, (192, "hopper"): 192, (96, "hopper"): None,
         (48, "hopper"): None, (32, "blackwell"): 64, (64, "blackwell"): 64, (128, "blackwell"): 128,
         (256, "blackwell"): 256, (192, "blackwell"): None, (96, "blackwell"): None}


@pytest.mark.parametrize(("local", "arch"), sorted(CASES))
def test_head_counts_follow_megatron_core(local, arch):
    assert flash_mla_heads(local, arch) == CASES[(local, arch)]


def _spec(heads: int):
    return spec_from_hf({**GLM5, "num_attention_heads": heads, "num_key_value_heads": heads}, name="glm",
                        origin="glm.json")


def test_glm5_at_tp2_runs_its_32_heads_as_64():
    assert head_padding(_spec(64), 2, "hopper") == 2.0 and head_padding(_spec(64), 1, "blackwell") == 1.0


def test_a_count_the_kernels_do_not_run_is_refused_on_that_gpu():
    """192 heads a rank: Hopper runs them (a multiple of 64), Blackwell does not (not of 128)."""
    spec = _spec(192)
    lay = Layout(world_size=64, pp=2, ep=32, pipeline_layout="Et*38|t*40mL")
    assert estimate(spec, load_gpu("h100"), lay, with_memory=False).time["step_seconds"] > 0
    with pytest.raises(MoetuneError, match=r"192 query heads a TP rank \(192 / TP 1\) is no count FlashMLA's sparse "
                                           r"attention runs on blackwell") as err:
        estimate(spec, load_gpu("gb200"), lay, with_memory=False)
    assert "\n" not in str(err.value)


def test_a_plan_with_no_tp_the_kernels_run_says_why():
    from moetune.layout.validate import Workload
    from moetune.planner.search import plan

    with pytest.raises(MoetuneError, match=r"no legal layout of glm on 64 GPUs.*192 query heads a TP rank \(192 / TP "
                                           r"1\) is no count FlashMLA's sparse attention runs on blackwell"):
        plan(_spec(192), load_gpu("gb200"), 64, Workload(seq_length=4096, global_batch_size=256), top=1)
    hopper = plan(_spec(192), load_gpu("h100"), 64, Workload(seq_length=4096, global_batch_size=256), top=1)
    assert hopper.layouts > 0  # Hopper runs 192 heads a rank (TP 1): legal layouts, if none of them fits 64 H100s
