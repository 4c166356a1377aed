"""Under FP8/NVFP4 parameters only the weights TE quantizes gather and are written in their low-precision bytes; the
router, norms, biases, embedding and output layer stay BF16 parameters, gathered and written at 2 bytes: Megatron-Core
keys DDP's buffers by storage dtype, uint8 only for a TE FP8/NVFP4 tensor (distributed/param_and_grad_buffer.py:857-858
group_params_for_buffers @core_v0.18.2), all-gathers each buffer's own data (:466-482 start_param_sync), and its
distributed optimizer quantizes the FP8 ones alone (optimizer/distrib_optimizer.py:2569-2617, :2752
quantize_param_shard), copying the FP32 master into every other one's BF16 slot (:2783-2791). Hand counts from
Qwen3-30B-A3B's config.json at TP2 PP2 EP4 (16 GPUs: DP 4, EDP 2), the last stage being the largest."""

import json

import numpy as np
import pytest

import moetune.walls.iteration as iteration
import moetune.walls.step as step
from moetune.layout.knobs import Knobs
from moetune.layout.layout import Layout
from moetune.layout.validate import Workload
from moetune.planner.estimate import estimate
from moetune.specs.hardware import load_gpu
from moetune.specs.registry import load_model
from moetune.walls.batch import batch_step_seconds
from moetune.walls.batch_layouts import build_batch
from moetune.walls.efficiency import efficiency

MODEL = "qwen3-30b-a3b"
LAYOUT = Layout(world_size=16, tp=2, pp=2, ep=4)
TP, PP, EP, DP, EDP = 2, 2, 4, 4, 2
WL = Workload(seq_length=4096, micro_batch_size=1, global_batch_size=64)
FP8 = dict(precision="fp8-current", fp8_param_gather=True)
# NVFP4 parameters gather their packed E2M1 data (half a byte) and all-reduce one FP32 amax per 16x16 tile (2 rings
# of 4 bytes: TE tensor/utils.py _cast_master_weights_to_nvfp4_2d); the step writes the packed half byte
NVFP4_GATHER = 0.5 + 2 * 4 / 16**2


@pytest.fixture(scope="module")
def last_stage(shared_data) -> dict:
    """One rank of the last stage, by hand from config.json: (dense, expert) GEMM weights TE quantizes (linear_qkv
    [h, q + 2 kv] and linear_proj [q, h] over TP; routed fc1 [h, 2 x moe_ffn] and fc2 [moe_ffn, h], experts over EP)
    and the dense parameters kept BF16 (router [experts, h], input and pre-MLP RMSNorms [h], per-head q/k norms
    [head_dim] whole on every rank; the final norm [h]; the output layer's rows, vocabulary padded to 128 x TP)."""
    c = json.loads((shared_data / "models" / f"{MODEL}.config.json").read_text())
    h, d, experts, ffn = c["hidden_size"], c["head_dim"], c["num_experts"], c["moe_intermediate_size"]
    q, kv = c["num_attention_heads"] * d, c["num_key_value_heads"] * d
    layers = c["num_hidden_layers"] // PP
    assert not c["tie_word_embeddings"]  # the output layer is its own weight
    output = -(-c["vocab_size"] // (128 * TP)) * 128 * h
    return {"dense_gemm": layers * (h * (q + 2 * kv) + q * h) // TP,
            "expert_gemm": layers * experts // EP * 3 * h * ffn,
            "bf16": layers * (experts * h + 2 * h + 2 * d) + h + output}


@pytest.fixture()
def rings(monkeypatch) -> list:
    """The bytes of each ring the data-parallel terms price, in order (walls/iteration.py), their seconds set to 0."""
    calls = []

    def record(nbytes, n, *_):
        calls.append((nbytes, n))
        return 0.0 * nbytes  # of the bytes' shape: the planner's arrays stay arrays
    monkeypatch.setattr(iteration, "ring_seconds", record)
    # the step keeps its iteration terms (walls/step.py _memo): a memo of its own for these rings, so they are priced
    # here and their zeros reach no later estimate
    monkeypatch.setattr(step, "_LAYER_TIMES", {})
    return calls


def _gathers(calls: list) -> list:
    """The parameter all-gather's (dense, expert) rings: the last two the distributed optimizer prices, after the
    gradient reduce-scatter's (iteration.dp_traffic)."""
    assert len(calls) == 4
    return [(np.asarray(b).item(), np.asarray(n).item()) for b, n in calls[2:]]


def _hand_gathers(s: dict, w: float) -> list:
    return [(pytest.approx(s["dense_gemm"] * w + 2 * s["bf16"], rel=1e-12), DP),
            (pytest.approx(s["expert_gemm"] * w, rel=1e-12), EDP)]


@pytest.mark.parametrize(("knobs", "gpu", "w"), [(FP8, "h100", 1), (dict(precision="bf16"), "h100", 2),
                                                 (dict(precision="nvfp4", fp4_param_gather=True), "b200",
                                                  NVFP4_GATHER)], ids=["fp8-params", "bf16", "nvfp4-params"])
def test_the_parameter_gather_moves_the_router_norms_and_output_layer_in_bf16(last_stage, rings, knobs, gpu, w):
    estimate(load_model(MODEL), load_gpu(gpu), LAYOUT, WL, Knobs(**knobs))
    assert _gathers(rings) == _hand_gathers(last_stage, w)


def test_the_planner_batch_gathers_the_same_bytes(last_stage, rings):
    spec, gpu = load_model(MODEL), load_gpu("h100")
    batch_step_seconds(spec, build_batch(spec, [(LAYOUT, 1)]), WL.seq_length, WL.global_batch_size, Knobs(**FP8),
                       gpu, efficiency(gpu.key))
    assert _gathers(rings) == _hand_gathers(last_stage, 1)


@pytest.mark.parametrize(("knobs", "gpu", "write"), [(FP8, "h100", 1 + 4), (dict(
    precision="nvfp4", fp4_param_gather=True), "b200", 0.5 + 4)], ids=["fp8-current", "nvfp4"])
def test_the_step_writes_only_the_quantized_weights_in_low_precision(last_stage, knobs, gpu, write):
    """Against the same recipe with BF16 parameters, the step writes each quantized weight's `write` bytes (its FP8
    or packed FP4 data plus the FP32 master read again for a fresh amax: TE tensor/utils.py compute_amax in
    _cast_master_weights_to_fp8_current_scaling) in place of 2, over this rank's optimizer shard (DP for dense, EDP
    for experts); the router, norms and output layer are written in BF16 either way, so they add nothing."""
    spec, g = load_model(MODEL), load_gpu(gpu)
    low, bf16 = knobs, {**knobs, next(k for k in knobs if k.endswith("param_gather")): False}
    steps = [estimate(spec, g, LAYOUT, WL, Knobs(**k)).time["compute_by_class"]["optimizer_step"] for k in (low, bf16)]
    eff = efficiency(g.key)
    shard = last_stage["dense_gemm"] / DP + last_stage["expert_gemm"] / EDP
    assert steps[0] - steps[1] == pytest.approx(shard * (write - 2) / (g.hbm_tbps * 1e12 * eff["mem_eff"]), rel=1e-9)


CASES = [  # gpt-oss: linear, expert and router biases; qwen3-next: a shared expert's gate; deepseek-v3: MLA's latent
    # norms and an MTP layer
    ("gpt-oss-20b", Layout(world_size=16, tp=2, pp=2, vpp=2, ep=4)),
    ("qwen3-next-80b-a3b", Layout(world_size=64, tp=4, pp=2, vpp=2, ep=16)),
    ("deepseek-v3", Layout(world_size=64, tp=2, pp=4, ep=8, first_stage_layers=13, last_stage_layers=18)),
]
KNOBS = [FP8, dict(precision="fp8-delayed"), dict(precision="nvfp4", fp4_param_gather=True),
         dict(**FP8, megatron_fsdp="optim_grads_params"),
         dict(**FP8, megatron_fsdp="optim_grads_params", num_distributed_optimizer_instances=2,
              outer_dp_sharding_strategy="optim")]


@pytest.mark.parametrize(("model", "layout"), CASES, ids=[m for m, _ in CASES])
@pytest.mark.parametrize("knobs", KNOBS, ids=lambda k: "-".join(str(v) for v in k.values()))
def test_the_planner_batch_times_quantized_parameters_as_estimate(model, layout, knobs):
    spec, gpu = load_model(model), load_gpu("b200" if knobs["precision"] == "nvfp4" else "h100")
    k = Knobs(**knobs)
    step = batch_step_seconds(spec, build_batch(spec, [(layout, 1)]), WL.seq_length, WL.global_batch_size, k, gpu,
                              efficiency(gpu.key))
    assert float(step["step"][0]) == pytest.approx(estimate(spec, gpu, layout, WL, k).time["step_seconds"], rel=1e-9)
