"""Biased experts (gpt-oss) add the fc2 bias outside the GEMM, scaled by each routed row's probability (Megatron-Core
moe/experts.py TEGroupedMLP._apply_bias); the probabilities are FP32 where the router computes in FP32 or FP64
(moe_router_dtype, moe/router.py) or DeepEP / HybridEP cast them (moe/token_dispatcher.py "only supports float32
probs"): the pass is charged its bytes at the elementwise HBM rate (walls/compute.py expert_bias_seconds), 28 bytes an
output element with BF16 probabilities, 68 with FP32."""

import json

import pytest

from moetune.cli.main import main
from moetune.layout.knobs import Knobs
from moetune.layout.layout import Layout
from moetune.layout.validate import Workload
from moetune.planner.estimate import estimate
from moetune.specs.hardware import load_gpu
from moetune.specs.registry import load_model
from moetune.walls import layer_comm
from moetune.walls.batch import batch_step_seconds
from moetune.walls.batch_layouts import build_batch
from moetune.walls.efficiency import efficiency


def _by_class(model="gpt-oss-120b", dispatcher="hybridep", recompute="none", modules=(), router=None):
    knobs = Knobs(precision="bf16", dispatcher=dispatcher, routing="force-balance", recompute=recompute,
                  recompute_modules=frozenset(modules), moe_router_dtype=router)
    e = estimate(load_model(model), load_gpu("b200"), Layout(world_size=8, ep=8),
                 Workload(seq_length=4096, micro_batch_size=4, global_batch_size=32), knobs)
    assert e.time["num_microbatches"] == 1
    return e.time["compute_by_class"]


def test_hybridep_fp32_probabilities_cost_the_bytes_of_the_bias_pass():
    """36 MoE layers, 4 x 4096 tokens a rank each routed to 4 experts, hidden 2880 (gpt-oss-120b's config.json)."""
    hbm = load_gpu("b200").hbm_tbps * 1e12 * efficiency("b200")["mem_eff"]
    expected = 36 * (4 * 4096 * 4) * 2880 * (28 + 40) / hbm
    assert _by_class()["expert_bias"] == pytest.approx(expected, rel=1e-9)


def test_bf16_probabilities_of_the_alltoall_dispatcher_move_fewer_bytes():
    assert _by_class(dispatcher="alltoall")["expert_bias"] / _by_class()["expert_bias"] == pytest.approx(28 / 68)


@pytest.mark.parametrize("router", ["fp32", "fp64"])
def test_an_fp32_router_hands_the_alltoall_dispatcher_fp32_probabilities(router):
    """moe/router.py computes the logits in moe_router_dtype and the probabilities follow them, under any
    dispatcher (FP64 charged as FP32)."""
    assert _by_class(dispatcher="alltoall", router=router)["expert_bias"] == \
        pytest.approx(_by_class()["expert_bias"], rel=1e-12)


def _cli_bias(capsys, *flags):
    code = main(["estimate", "gpt-oss-120b", "--gpu", "gb200", "--gpus", "64", "--ep", "64", "--mbs", "4", "--gbs",
                 "1280", "--dispatcher", "alltoall", "--json", *flags])
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    return out["time"]["compute_by_class"]["expert_bias"], out["defaulted"], out["knobs"]["moe_router_dtype"]


def test_estimate_defaults_to_the_fp32_router_plans_emit(capsys):
    """An alltoall gpt-oss estimate with the knobs left out is priced as the config a plan writes runs it: FP32."""
    default, defaulted, dtype = _cli_bias(capsys)
    bf16, defaulted_bf16, dtype_bf16 = _cli_bias(capsys, "--moe-router-dtype", "none")
    assert default / bf16 == pytest.approx(68 / 28)
    assert (dtype, dtype_bf16) == ("fp32", None)
    assert "moe_router_dtype" in defaulted and "moe_router_dtype" not in defaulted_bf16


def test_recomputing_the_experts_replays_the_forward_pass_as_recompute():
    """moe recompute runs the bias pass's forward again: charged with the other replays (class recompute), so the
    recompute class differs between FP32 and BF16 probabilities by the forward bytes' difference alone (28 - 12 B an
    element over 36 layers); the pass's own class stays forward + backward."""
    fp32, bf16 = (_by_class(recompute="selective", modules=("moe",), dispatcher=d) for d in ("hybridep", "alltoall"))
    hbm = load_gpu("b200").hbm_tbps * 1e12 * efficiency("b200")["mem_eff"]
    assert fp32["recompute"] - bf16["recompute"] == pytest.approx(36 * (4 * 4096 * 4) * 2880 * (28 - 12) / hbm)
    assert fp32["expert_bias"] == pytest.approx(_by_class()["expert_bias"])


@pytest.mark.parametrize("dispatcher, share", [("alltoall", 12 / 28), ("hybridep", 28 / 68)])
def test_ep_overlap_pairs_the_bias_pass_s_forward_with_the_expert_forward(monkeypatch, dispatcher, share):
    """Under EP overlap the expert part's forward window holds the bias pass's forward: its bytes' forward share of
    the pass (12 of 28 with the alltoall dispatcher's BF16 probabilities, 28 of 68 with HybridEP's FP32 ones), where
    it had been taken at the GEMMs' third."""
    seen, exposed = [], layer_comm.ep_overlap_exposed

    def spy(a, compute, hide, delay_wgrad, *bias_forward):
        seen.append((compute["expert_bias"], *bias_forward))
        return exposed(a, compute, hide, delay_wgrad, *bias_forward)

    monkeypatch.setattr(layer_comm, "ep_overlap_exposed", spy)
    knobs = Knobs(precision="bf16", dispatcher=dispatcher, ep_overlap=True, moe_router_dtype=None)
    estimate(load_model("gpt-oss-120b"), load_gpu("b200"), Layout(world_size=8, ep=8),
             Workload(seq_length=4096, micro_batch_size=4, global_batch_size=32), knobs)
    assert seen and all(len(call) == 2 and call[1] == pytest.approx(share * call[0], rel=1e-12) for call in seen)


def test_unbiased_experts_have_no_bias_pass():
    assert "expert_bias" not in _by_class(model="qwen3-30b-a3b")


def test_the_router_default_is_said_only_where_it_moves_the_estimate(capsys):
    """Only biased experts read the router's dtype: a Qwen3 estimate does not list it among the defaulted knobs."""
    code = main(["estimate", "qwen3-30b-a3b", "--gpu", "b200", "--gpus", "8", "--ep", "8", "--json"])
    assert code == 0 and "moe_router_dtype" not in json.loads(capsys.readouterr().out)["defaulted"]


def test_an_fp64_router_s_pass_is_said_to_be_priced_at_fp32_s_bytes_a_floor(capsys):
    """An FP64 router's probabilities stay FP64 under alltoall (DeepEP/HybridEP cast them to FP32); the pass is priced
    at FP32's bytes, which explain says is a floor rather than calling it FP32."""
    code = main(["explain", "gpt-oss-120b", "--gpu", "gb200", "--gpus", "64", "--ep", "64", "--dispatcher", "alltoall",
                 "--moe-router-dtype", "fp64"])
    out = " ".join(capsys.readouterr().out.split())
    assert code == 0 and "at FP32's bytes, a floor" in out and "in FP32: the router" not in out


def test_one_batch_times_each_router_dtype_s_bias_pass_as_estimate_does():
    """The batch memoizes its layer times across a search's knob sets (walls/batch.py time_key); under the alltoall
    dispatcher the bias pass's bytes follow the router's dtype alone, so a batch timed with an FP32 router first must
    not lend its FP32 probabilities' pass to a router left unset (BF16 probabilities), nor the reverse."""
    spec, gpu, lay = load_model("gpt-oss-120b"), load_gpu("b200"), Layout(world_size=8, ep=8)
    wl = Workload(seq_length=4096, micro_batch_size=4, global_batch_size=32)
    batch = build_batch(spec, [(lay, 4)])
    for router in ("fp32", None, "fp64"):
        knobs = Knobs(precision="bf16", dispatcher="alltoall", moe_router_dtype=router)
        step = batch_step_seconds(spec, batch, wl.seq_length, wl.global_batch_size, knobs, gpu, efficiency(gpu.key))
        assert float(step["step"][0]) == pytest.approx(estimate(spec, gpu, lay, wl, knobs).time["step_seconds"],
                                                      rel=1e-9), router


@pytest.mark.parametrize(("probs", "dtype"), [("bf16", "bfloat16"), ("fp32", "float32")])
def test_the_bias_pass_bytes_are_what_its_aten_ops_move(probs, dtype):
    """EXPERT_BIAS_BYTES against the expression itself: Megatron-Core's TEGroupedMLP._apply_bias (moe/experts.py
    @core_v0.16.0: split per expert, t + b * p, cat, .to(t.dtype)) run forward and backward under a dispatch mode
    that adds up the bytes every aten op reads and writes (views move none), per element of the fc2 output."""
    torch = pytest.importorskip("torch")
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    from moetune.walls.compute import EXPERT_BIAS_BYTES

    class Moved(TorchDispatchMode):
        total = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            ins, outs = ([a for a in tree_flatten(x)[0] if isinstance(a, torch.Tensor)] for x in ((args, kwargs), out))
            held = {t.untyped_storage().data_ptr() for t in ins}
            if any(t.untyped_storage().data_ptr() not in held for t in outs):  # a view (split, view) moves nothing
                self.total += sum(t.numel() * t.element_size() for t in ins + outs)
            return out

    rows, hidden, experts = 8192, 2048, 4
    t = torch.randn(rows, hidden, dtype=torch.bfloat16, requires_grad=True)
    biases = [torch.randn(hidden, dtype=torch.bfloat16, requires_grad=True) for _ in range(experts)]
    p = torch.rand(rows, 1, dtype=getattr(torch, dtype), requires_grad=True)
    split = [rows // experts] * experts
    with Moved() as forward:
        y = torch.cat([a + b * q for a, b, q in zip(torch.split(t, split), biases, torch.split(p, split),
                                                      strict=True)]).to(t.dtype)
    grad = torch.randn_like(y)
    with Moved() as backward:
        y.backward(grad)
    measured = (forward.total / (rows * hidden), backward.total / (rows * hidden))
    assert measured == pytest.approx(EXPERT_BIAS_BYTES[probs], rel=0.005)  # the bias and probabilities: 0.1%
