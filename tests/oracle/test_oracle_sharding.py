"""Per-rank counts under TP / EP / PP / VPP / custom layouts, and what each param's sharding is.

The reconstruction tests multiply each parameter a rank holds by the number of ranks that
share it out (Megatron's sharding rules, written here from the MCore layer classes, not from
the oracle) and sum over pipeline stages; the result must give back the published checkpoint
total. That pins, parameter by parameter, which tensors MCore splits over TP or EP and which
it duplicates.
"""

import functools
import json

import pytest

pytest.importorskip("megatron.core")

from oracle_refs import DEEPSEEK_V3_BF16, DEEPSEEK_V3_F8, MIXTRAL_8X7B, load_config  # noqa: E402

from moetune.errors import MoetuneError  # noqa: E402
from moetune.oracle import (  # noqa: E402
    count_params_breakdown,
    count_params_per_stage,
    mcore,  # noqa: E402
)

# Replicated on every TP rank: norms, the router (moe/router.py allocates [E, H] unsplit), the
# shared-expert gate ([1, H]), and RowParallelLinear biases (added after the all-reduce).
_TP_DUPLICATED = ("norm.weight", "router.weight", "router.bias", "gate_weight",
                  "linear_proj.bias", "linear_fc2.bias")
# The TE spec builds MLA down-projections as TELinear(parallel_mode="duplicated").
_TE_DUPLICATED = ("linear_q_down_proj.", "linear_kv_down_proj.")


def _ranks_sharing(name: str, *, tp: int, ep: int, spec: str) -> int:
    """How many ranks of one pipeline stage hold disjoint pieces of this tensor (ETP=1)."""
    if ".experts." in name:
        return ep
    duplicated = _TP_DUPLICATED + (_TE_DUPLICATED if spec == "te" else ())
    return 1 if any(key in name for key in duplicated) else tp


@functools.cache
def _breakdown(name: str, stage: int, **kw) -> dict[str, int]:
    return count_params_breakdown(load_config(name), stage=stage, **kw)


def _cached(name: str, stage: int, **kw) -> dict[str, int]:
    return _breakdown(name, stage, **{k: (json.dumps(v) if isinstance(v, list) else v)
                                      for k, v in kw.items()})


def _reconstruct(name: str, *, spec: str = "te", **kw) -> int:
    total = 0
    for stage in range(kw["pp"]):
        params = _cached(name, stage, spec=spec, **kw)
        total += sum(n * _ranks_sharing(k, tp=kw["tp"], ep=kw["ep"], spec=spec)
                     for k, n in params.items())
    return total


def test_mixtral_tp_ep_pp_shards_reconstruct_the_checkpoint():
    kw = dict(tp=2, pp=2, ep=4, etp=1, world_size=16, padded_vocab_size=32000)
    assert _reconstruct("mixtral-8x7b", **kw) == MIXTRAL_8X7B


@pytest.mark.parametrize("spec", ["te", "local"])
def test_deepseek_v3_shards_reconstruct_the_checkpoint(spec):
    """PP>1 with MTP: the MTP stage holds its own copy of the word embedding (GPTModel builds
    LanguageModelEmbedding when mtp_process), so the sum has exactly one extra vocab x hidden."""
    cfg = load_config("deepseek-v3")
    vh = cfg["vocab_size"] * cfg["hidden_size"]
    kw = dict(tp=4, pp=4, ep=32, etp=1, world_size=128, padded_vocab_size=129280,
              num_layers_in_first_pipeline_stage=16, num_layers_in_last_pipeline_stage=15)
    published = DEEPSEEK_V3_BF16 + DEEPSEEK_V3_F8 - 2 * vh  # HF's MTP layer has its own copies
    assert _reconstruct("deepseek-v3", spec=spec, **kw) == published + vh


def test_te_and_local_specs_differ_only_in_mla_down_projections():
    cfg = load_config("deepseek-v3")
    h, q, kv = cfg["hidden_size"], cfg["q_lora_rank"], cfg["kv_lora_rank"] + cfg["qk_rope_head_dim"]
    kw = dict(tp=4, pp=4, ep=32, etp=1, world_size=128, padded_vocab_size=129280,
              num_layers_in_first_pipeline_stage=16, num_layers_in_last_pipeline_stage=15)
    te, local = _cached("deepseek-v3", 3, spec="te", **kw), _cached("deepseek-v3", 3, spec="local", **kw)
    assert te.keys() == local.keys()
    diff = {k for k in te if te[k] != local[k]}
    assert diff and all(any(s in k for s in _TE_DUPLICATED) for k in diff)
    layer = "decoder.layers.14.self_attention."  # layer names restart at 0 on every stage
    assert te[layer + "linear_q_down_proj.weight"] == h * q
    assert local[layer + "linear_q_down_proj.weight"] == h * q // 4
    assert te[layer + "linear_kv_down_proj.weight"] == h * kv
    assert local[layer + "linear_kv_down_proj.weight"] == h * kv // 4
    assert te[layer + "q_layernorm.weight"] == q and te[layer + "kv_layernorm.weight"] == kv - 64


def test_mtp_block_contents_and_final_norm_placement():
    cfg = load_config("deepseek-v3")
    h, v = cfg["hidden_size"], cfg["vocab_size"]
    kw = dict(tp=4, pp=4, ep=32, etp=1, world_size=128, padded_vocab_size=129280,
              num_layers_in_first_pipeline_stage=16, num_layers_in_last_pipeline_stage=15)
    last = _cached("deepseek-v3", 3, spec="te", **kw)
    mtp = "mtp.layers.0."
    assert last[mtp + "eh_proj.weight"] == 2 * h * h // 4  # ColumnParallelLinear(2H -> H)
    for norm in ("enorm", "hnorm", "final_layernorm"):
        assert last[f"{mtp}{norm}.weight"] == h
    assert last["embedding.word_embeddings.weight"] == v * h // 4
    assert last["output_layer.weight"] == v * h // 4
    assert last["decoder.final_layernorm.weight"] == h


def test_router_gate_and_qk_norm_are_tp_duplicated():
    q15 = load_config("qwen1.5-moe-a2.7b")
    b = _cached("qwen1.5-moe-a2.7b", 0, tp=2, pp=1, ep=4, etp=1, world_size=8,
                padded_vocab_size=151936)
    layer = "decoder.layers.0.mlp."
    assert b[layer + "router.weight"] == q15["num_experts"] * q15["hidden_size"]
    assert b[layer + "shared_experts.gate_weight"] == q15["hidden_size"]
    assert sum(".local_experts." in k for k in b) == 2 * 24 * q15["num_experts"] // 4
    q3 = _cached("qwen3-30b-a3b", 0, tp=4, pp=1, ep=8, etp=1, world_size=32,
                 padded_vocab_size=151936)
    assert q3["decoder.layers.0.self_attention.q_layernorm.weight"] == 128  # head_dim
    assert q3["decoder.layers.0.self_attention.k_layernorm.weight"] == 128


def test_expert_bias_is_a_buffer_not_a_parameter():
    b = _cached("moonlight-16b-a3b", 0, tp=1, pp=1, ep=8, etp=1, world_size=8,
                padded_vocab_size=163840)
    assert not [k for k in b if "expert_bias" in k]
    assert "decoder.layers.1.mlp.router.weight" in b


def test_vpp_chunks_sum_like_the_plain_schedule_for_uniform_layers():
    kw = dict(tp=1, pp=4, ep=8, etp=1, world_size=32, padded_vocab_size=151936)
    cfg = load_config("qwen3-30b-a3b")
    plain = count_params_per_stage(cfg, **kw)
    interleaved = count_params_per_stage(cfg, vpp=3, **kw)
    assert interleaved == plain  # 12 identical layers per stage either way
    chunks = {k.split(".")[0] for k in _cached("qwen3-30b-a3b", 1, vpp=3, **kw)}
    assert chunks == {"chunk0", "chunk1", "chunk2"}


def test_custom_layout_places_mtp_embedding_and_loss_where_it_says():
    layout = "Et*3|(tt|)*29,m|L"  # 32 chunks = 8 stages x 4 virtual stages
    kw = dict(tp=1, pp=8, ep=8, etp=1, world_size=64, padded_vocab_size=129280,
              pipeline_model_parallel_layout=layout)
    cfg = load_config("deepseek-v3")
    vh = cfg["vocab_size"] * cfg["hidden_size"]
    stage6, stage7 = _cached("deepseek-v3", 6, **kw), _cached("deepseek-v3", 7, **kw)
    assert {k for k in stage7 if k.startswith("chunk3.")} == {"chunk3.output_layer.weight"}
    assert "chunk3.embedding.word_embeddings.weight" in stage6
    assert any(k.startswith("chunk3.mtp.layers.0.") for k in stage6)
    assert "chunk3.decoder.final_layernorm.weight" in _cached("deepseek-v3", 5, **kw)
    published = DEEPSEEK_V3_BF16 + DEEPSEEK_V3_F8 - 2 * vh
    assert _reconstruct("deepseek-v3", **kw) == published + vh


def test_dp_size_does_not_change_a_rank(monkeypatch):
    kw = dict(tp=2, pp=2, ep=4, etp=1, world_size=64, padded_vocab_size=32000)
    cfg = load_config("mixtral-8x7b")
    small = count_params_per_stage(cfg, **kw)
    monkeypatch.setattr(mcore.Parallelism, "build_world_size", lambda self: self.world_size)
    assert count_params_per_stage(cfg, **kw) == small


def test_grouped_mlp_holds_what_sequential_mlp_holds(monkeypatch):
    from megatron.core.transformer.moe import grouped_gemm_util

    monkeypatch.setattr(grouped_gemm_util, "assert_grouped_gemm_is_available", lambda: None)
    args = mcore.hf_to_mcore(load_config("mixtral-8x7b"))
    p = mcore.Parallelism(tensor_model_parallel_size=2, pipeline_model_parallel_size=1,
                          expert_model_parallel_size=2, expert_tensor_parallel_size=2,
                          world_size=4)
    seq = mcore._stage_params(args, p, 32000, 0, "te")
    grouped = mcore._stage_params(args, p, 32000, 0, "te", grouped_gemm=True)
    assert "decoder.layers.0.mlp.experts.weight1" in grouped
    assert sum(grouped.values()) == sum(seq.values())


def test_repeated_builds_are_identical_and_leave_no_global_state():
    import torch.distributed as dist
    from megatron.core import parallel_state

    cfg = load_config("mixtral-8x7b")
    kw = dict(tp=2, pp=4, ep=8, etp=1, world_size=64, padded_vocab_size=32000)
    first = count_params_per_stage(cfg, **kw)
    assert count_params_per_stage(cfg, **kw) == first
    assert not dist.is_initialized()
    assert not parallel_state.model_parallel_is_initialized()


@pytest.mark.parametrize(("kw", "match"), [
    (dict(tp=2, pp=2, ep=4, etp=1, world_size=12), "world_size"),
    (dict(tp=3, pp=1, ep=1, etp=1, world_size=3), "padded_vocab_size"),
    (dict(tp=1, pp=2, ep=1, etp=1, world_size=2, stage=2), "stage"),
    (dict(tp=1, pp=2, ep=1, etp=1, world_size=2, spec="fp8"), "spec"),
])
def test_bad_setups_are_user_errors(kw, match):
    with pytest.raises(MoetuneError, match=match):
        count_params_breakdown(load_config("mixtral-8x7b"), padded_vocab_size=32000, **kw)


def test_megatron_rejection_becomes_a_user_error():
    with pytest.raises(MoetuneError, match="rejected"):  # 61 layers do not split over pp=4
        count_params_per_stage(load_config("deepseek-v3"), tp=1, pp=4, ep=8, etp=1,
                               world_size=32, padded_vocab_size=129280)


def test_context_parallel_changes_no_parameter():
    """CP shards activations only; MLA's YaRN cache and the attention kernel need shims for
    CP > 1 without TE, and those must not move a single parameter."""
    kw = dict(tp=2, pp=4, ep=32, etp=1, padded_vocab_size=129280,
              num_layers_in_first_pipeline_stage=16, num_layers_in_last_pipeline_stage=15)
    no_cp = _cached("deepseek-v3", 3, cp=1, world_size=256, **kw)
    assert _cached("deepseek-v3", 3, cp=4, world_size=1024, **kw) == no_cp
    oss = dict(tp=2, pp=1, ep=4, etp=1, padded_vocab_size=201088)
    assert _cached("gpt-oss-20b", 0, cp=2, world_size=16, **oss) == \
        _cached("gpt-oss-20b", 0, cp=1, world_size=8, **oss)


def test_tied_embeddings_share_at_pp1_and_duplicate_across_stages():
    """share_embeddings_and_output_weights: one tensor at PP=1; with PP>1 the last stage keeps
    its own copy of the word embedding as the output layer (language_module.py)."""
    cfg = dict(load_config("mixtral-8x7b"), tie_word_embeddings=True)
    vh = cfg["vocab_size"] * cfg["hidden_size"]
    kw = dict(tp=1, ep=8, etp=1, padded_vocab_size=32000)
    untied = count_params_per_stage(load_config("mixtral-8x7b"), pp=1, world_size=8, **kw)
    assert count_params_per_stage(cfg, pp=1, world_size=8, **kw) == [untied[0] - vh]
    assert sum(count_params_per_stage(cfg, pp=2, world_size=16, **kw)) == untied[0]


def test_malformed_layout_is_a_user_error():
    with pytest.raises(MoetuneError, match="layout"):
        count_params_per_stage(load_config("deepseek-v3"), tp=1, pp=2, ep=8, etp=1,
                               world_size=16, padded_vocab_size=129280,
                               pipeline_model_parallel_layout="Et*3|(tt|*29,m|L")
