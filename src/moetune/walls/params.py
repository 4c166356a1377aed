"""Parameter tensors of a model and how Megatron-Core shards each one over ranks.

Every tensor carries a *shard* tag saying which group splits it:
  ``tp``      split over tensor parallel (ColumnParallelLinear / RowParallelLinear weights, column biases)
  ``rep``     a full copy on every TP rank (norms, router, row-parallel biases, MLA down-projections in
              the Transformer Engine spec, shared-expert gate)
  ``expert``  routed-expert weights: experts over EP, each expert's FFN dim over ETP
  ``expert_rep`` routed-expert fc2 bias: experts over EP, replicated over ETP
  ``vocab``   word embedding / output layer rows over TP (Megatron's VocabParallelEmbedding)
Shapes mirror megatron/core/transformer/{attention.py, multi_latent_attention.py, mlp.py,
moe/router.py, moe/experts.py, moe/shared_experts.py, multi_token_prediction.py} and
megatron/core/models/gpt/gpt_model.py. ``megatron=False`` marks tensors that exist in the
Hugging Face checkpoint but are buffers (not parameters) in Megatron, e.g. DeepSeek's
``e_score_correction_bias`` (Megatron's router ``expert_bias`` is a registered buffer), or that Megatron does not
build (an LM-head bias); ``hf=False`` marks the biases Megatron's one ``add_bias_linear`` switch builds where the
checkpoint has none (Phi-3.5-MoE biases o_proj, and Megatron can only bias it with every MLP and router too).
``matrix=False`` marks the tensors Megatron-Core does not build 2-D (norm weights and biases, linear biases, the
attention sinks, a conv1d's 3-D weight, Mamba's and the gated delta-net's per-head A_log, D, dt_bias), which Muon
leaves to Adam (walls/model_state.py). ``quantized=False`` marks the tensors Transformer Engine keeps out of FP8/FP4
under a low-precision recipe: all but the weights of its GEMM modules (the non-2-D ones, the embedding and output
layer, the router's weight and a shared expert's gate, which Megatron-Core multiplies in torch); the sources are cited
at ``Tensor.quantized``.
"""

from dataclasses import dataclass
from typing import Literal

from moetune.specs.model import LayerKind, ModelSpec

Shard = Literal["tp", "rep", "expert", "expert_rep", "vocab"]
LayerSpec = Literal["te", "local"]


@dataclass(kw_only=True, slots=True, frozen=True)
class Tensor:
    name: str
    numel: int
    shard: Shard
    megatron: bool = True  # a parameter Megatron-Core allocates
    hf: bool = True  # present in the Hugging Face checkpoint
    expert: bool = False  # a routed-expert parameter (optimizer shards it over EDP)
    matrix: bool = True  # 2-D as Megatron-Core builds it (every weight a GEMM reads, the embedding, the router)
    # The weight of a TE GEMM module, which TE quantizes under an FP8/FP4 recipe: into a workspace it caches across
    # micro-batches beside the BF16 weight, or, under fp8_model_init (fp8_param_gather), in place of it. TE v2.12
    # registers a weight with an fp8_meta_index and its bias without (pytorch/module/linear.py:1269-1274 and :1284,
    # layernorm_linear.py:1354-1359 and :1369, grouped_linear.py:674-686 and :691), a LayerNormLinear's
    # layer_norm_weight/_bias without (layernorm_linear.py:1258-1267); base.py:1266-1268 reset_parameters quantizes
    # only a parameter with one, and the forward passes only `weight` to get_weight_workspace (linear.py:269-272,
    # layernorm_linear.py:303-306, grouped_linear.py:169-172), casting a bias to BF16 (linear.py:287-291). So norms
    # (TE's, or fused into a LayerNormLinear as MLA's latent norms are: gpt_layer_specs.py:100-109 @core_v0.16.0)
    # and biases stay BF16. Megatron-Core's router weight is a plain nn.Parameter multiplied by torch.mm in the
    # router's dtype (moe/router.py:53-54, :100 and moe_utils.py:1196 @core_v0.16.0; router.py:61, :108, moe_utils.py
    # :1330 @core_v0.19.0), a shared expert's gate one F.linear reads (moe/shared_experts.py:57 @core_v0.16.0, :134 and
    # :199 @core_v0.19.0): neither is a TE module, so fp8_model_init leaves them BF16 and Megatron's DDP keeps them in
    # the BF16 buffer (distributed_data_parallel.py:139-146 @core_v0.16.0: uint8 only for is_float8tensor). The
    # embedding and output layer are no TE GEMM either (fp8_output_proj's MXFP8 LM head: memory.py).
    quantized: bool = True


def vector(name: str, numel: int, shard: Shard, **kw) -> Tensor:
    """A tensor Megatron-Core builds with other than two dimensions (matrix=False): no GEMM weight, never quantized."""
    return Tensor(name=name, numel=numel, shard=shard, matrix=False, quantized=False, **kw)


def _norm(spec: ModelSpec, name: str, width: int | None = None) -> list[Tensor]:
    """A norm's parameters. Megatron-Core's LayerNorm always has a bias (Transformer Engine's LayerNorm and
    LayerNormLinear allocate layer_norm_bias, normalization="LayerNorm"), which a checkpoint whose LayerNorm has none
    (DBRX: nn.LayerNorm(bias=False)) lacks: Megatron's, not the checkpoint's."""
    width = width or spec.hidden_size
    out = [vector(f"{name}.weight", width, "rep")]
    if spec.norm_has_bias or spec.normalization == "LayerNorm":
        out.append(vector(f"{name}.bias", width, "rep", hf=spec.norm_has_bias))
    return out


def _gqa(spec: ModelSpec) -> list[Tensor]:
    h, d = spec.hidden_size, spec.kv_channels
    q, kv = spec.qkv_widths
    out = [Tensor(name="linear_qkv.weight", numel=h * (q + kv), shard="tp")]
    if spec.add_qkv_bias:
        out.append(vector("linear_qkv.bias", q + kv, "tp"))
    if spec.qk_layernorm == "head":
        out += [vector("q_layernorm.weight", d, "rep"), vector("k_layernorm.weight", d, "rep")]
    elif spec.qk_layernorm == "full":  # one norm over all heads: MiniMax-M2's splits over TP; OLMoE runs at TP 1
        out += [vector("q_layernorm.weight", spec.query_projection_size, "tp"),
                vector("k_layernorm.weight", spec.kv_projection_size, "tp")]
    if spec.softmax_sinks:
        out.append(vector("core_attention.softmax_offset", spec.num_attention_heads, "tp"))
    out.append(Tensor(name="linear_proj.weight", numel=spec.query_projection_size * h, shard="tp"))
    if bias_linear(spec):
        out.append(vector("linear_proj.bias", h, "rep", hf=spec.add_proj_bias))
    return out


def bias_linear(spec: ModelSpec) -> bool:
    """Megatron's add_bias_linear, as moetune emits it (planner/model_fields.py): one switch biases the attention
    output projection, every MLP's fc1/fc2 and the router (transformer_config.py add_bias_linear; moe/router.py)."""
    return spec.add_proj_bias or spec.add_mlp_bias


def _mla(spec: ModelSpec, layer_spec: LayerSpec) -> list[Tensor]:
    """MLA: the TE spec duplicates the down-projections on every TP rank (TELinear parallel_mode
    'duplicated'); the local spec builds them as ColumnParallelLinear, split over TP
    (multi_latent_attention.py, q_down_proj_kwargs / kv_down_proj_kwargs)."""
    m, h, n = spec.mla, spec.hidden_size, spec.num_attention_heads
    down: Shard = "rep" if layer_spec == "te" else "tp"
    qk = m.q_head_dim
    if m.q_lora_rank is None:
        out = [Tensor(name="linear_q_proj.weight", numel=h * n * qk, shard="tp")]
    else:
        out = [Tensor(name="linear_q_down_proj.weight", numel=h * m.q_lora_rank, shard=down),
               vector("q_layernorm.weight", m.q_lora_rank, "rep"),
               Tensor(name="linear_q_up_proj.weight", numel=m.q_lora_rank * n * qk, shard="tp")]
    return out + [
        Tensor(name="linear_kv_down_proj.weight", numel=h * m.kv_down_dim, shard=down),
        vector("kv_layernorm.weight", m.kv_lora_rank, "rep"),
        Tensor(name="linear_kv_up_proj.weight", numel=m.kv_lora_rank * n * m.kv_up_head_dim, shard="tp"),
        Tensor(name="linear_proj.weight", numel=n * m.v_head_dim * h, shard="tp"),
    ]


def _indexer(spec: ModelSpec) -> list[Tensor]:
    """DeepSeek Sparse Attention's lightning indexer (Megatron-LM dsa.py DSAIndexer @ core_v0.19.0): three bias-free
    linears built parallel_mode="duplicated" (whole on every TP rank, gradients averaged over TP) and a LayerNorm with
    a bias on its keys. The query projection reads MLA's compressed query (the hidden state without q_lora_rank)."""
    d, h = spec.dsa, spec.hidden_size
    q_in = spec.mla.q_lora_rank or h
    name = "core_attention.indexer."
    return [Tensor(name=f"{name}linear_wq_b.weight", numel=q_in * d.index_n_heads * d.index_head_dim, shard="rep"),
            Tensor(name=f"{name}linear_wk.weight", numel=h * d.index_head_dim, shard="rep"),
            vector(f"{name}k_norm.weight", d.index_head_dim, "rep"),
            vector(f"{name}k_norm.bias", d.index_head_dim, "rep"),
            Tensor(name=f"{name}linear_weights_proj.weight", numel=h * d.index_n_heads, shard="rep")]


def _gdn(spec: ModelSpec) -> list[Tensor]:
    """Gated delta-net (HF Qwen3NextGatedDeltaNet): fused qkvz and beta/alpha projections, a depthwise
    causal conv over q,k,v, per-value-head decay (A_log, dt_bias), a gated RMSNorm over each value head. The conv's
    weight is 3-D, [channels, 1, kernel] (Megatron-Core ssm/gated_delta_net.py builds an nn.Conv1d)."""
    g, h = spec.gdn, spec.hidden_size
    return [
        Tensor(name="in_proj_qkvz.weight", numel=h * (2 * g.qk_dim + 2 * g.v_dim), shard="tp"),
        Tensor(name="in_proj_ba.weight", numel=h * 2 * g.num_value_heads, shard="tp"),
        vector("conv1d.weight", g.conv_dim * g.conv_kernel, "tp"),
        vector("dt_bias", g.num_value_heads, "tp"),
        vector("A_log", g.num_value_heads, "tp"),
        vector("norm.weight", g.value_head_dim, "rep"),
        Tensor(name="out_proj.weight", numel=g.v_dim * h, shard="tp"),
    ]


def _mamba(spec: ModelSpec) -> list[Tensor]:
    """Mamba-2 mixer (HF NemotronHMamba2Mixer; Megatron megatron/core/ssm/mamba_mixer.py splits heads over TP); its
    conv1d an nn.Conv1d, weight [channels, 1, kernel]."""
    m, h = spec.mamba, spec.hidden_size
    d_in, conv_dim = m.d_inner, m.conv_dim
    out = [
        Tensor(name="in_proj.weight", numel=h * m.in_proj_dim, shard="tp"),
        vector("conv1d.weight", conv_dim * m.conv_kernel, "tp"),
        vector("dt_bias", m.num_heads, "tp"),
        vector("A_log", m.num_heads, "tp"),
        vector("D", m.num_heads, "tp"),
        vector("norm.weight", d_in, "tp"),
        Tensor(name="out_proj.weight", numel=d_in * h, shard="tp"),
    ]
    if m.conv_bias:
        out.insert(2, vector("conv1d.bias", conv_dim, "tp"))
    return out


def _ffn(prefix: str, h: int, ffn: int, spec: ModelSpec, shard: Shard, n: int = 1, *, gated: bool | None = None,
         hf_bias: bool | None = None) -> list[Tensor]:
    """fc1 (h -> ffn, doubled for a gated unit) and fc2 (ffn -> h), n copies, with biases under add_bias_linear
    (in the checkpoint where the model's MLPs carry them: hf_bias, default add_mlp_bias)."""
    fc1 = ffn * (2 if (spec.gated_linear_unit if gated is None else gated) else 1)
    expert = shard == "expert"
    out = [Tensor(name=f"{prefix}linear_fc1.weight", numel=n * h * fc1, shard=shard, expert=expert),
           Tensor(name=f"{prefix}linear_fc2.weight", numel=n * ffn * h, shard=shard, expert=expert)]
    if bias_linear(spec):
        hf = spec.add_mlp_bias if hf_bias is None else hf_bias
        out += [vector(f"{prefix}linear_fc1.bias", n * fc1, shard, expert=expert, hf=hf),
                vector(f"{prefix}linear_fc2.bias", n * h, "expert_rep" if expert else "rep", expert=expert, hf=hf)]
    return out


def _moe(spec: ModelSpec) -> list[Tensor]:
    h, e = spec.hidden_size, spec.num_moe_experts
    out = [Tensor(name="router.weight", numel=e * h, shard="rep", quantized=False)]  # torch.mm: Tensor.quantized
    if bias_linear(spec):
        out.append(vector("router.bias", e, "rep", hf=spec.moe_router_bias))
    if spec.moe_router_score_correction_bias:
        out.append(vector("router.expert_bias", e, "rep", megatron=False))
    out += _ffn("experts.", h, spec.moe_ffn_hidden_size, spec, "expert", n=e)
    shared = spec.moe_shared_expert_intermediate_size
    if shared:  # Megatron's SharedExpertMLP is an MLP: biased under add_bias_linear; no HF family here biases one
        out += _ffn("shared_experts.", h, shared, spec, "tp", gated=spec.shared_expert_gated, hf_bias=False)
        if spec.moe_shared_expert_gate:  # [1, hidden]: 2-D (transformer/moe/shared_experts.py)
            out.append(Tensor(name="shared_experts.gate_weight", numel=h, shard="rep", quantized=False))
    return out


def layer_tensors(spec: ModelSpec, kind: LayerKind, layer_spec: LayerSpec = "te") -> list[Tensor]:
    """Every parameter of one decoder layer, norms included."""
    mixers = {"gqa": _gqa, "gdn": _gdn, "mamba": _mamba}
    out: list[Tensor] = []
    if kind.mixer != "none":
        out += _norm(spec, "input_layernorm")
        out += _mla(spec, layer_spec) if kind.mixer == "mla" else mixers[kind.mixer](spec)
        if kind.indexer:
            out += _indexer(spec)
    if kind.mlp == "dense":
        out += _norm(spec, "pre_mlp_layernorm")
        out += _ffn("mlp.", spec.hidden_size, spec.ffn_hidden_size, spec, "tp")
    elif kind.mlp == "moe":
        out += _norm(spec, "pre_mlp_layernorm") + _moe(spec)
    for i in range(spec.extra_norms_per_layer):
        out += _norm(spec, f"extra_norm_{i}")
    return out


def embedding_tensors(spec: ModelSpec, vocab: int) -> list[Tensor]:
    return [Tensor(name="embedding.word_embeddings.weight", numel=vocab * spec.hidden_size, shard="vocab",
                   quantized=False)]


def final_norm_tensors(spec: ModelSpec) -> list[Tensor]:
    """The decoder's final norm: Megatron builds it with the last decoder layer (transformer_block.py),
    which a pipeline layout may place on an earlier stage than the loss."""
    return _norm(spec, "decoder.final_layernorm")


def output_tensors(spec: ModelSpec, vocab: int, *, tied_copy: bool) -> list[Tensor]:
    """Output layer of the loss stage. With tied embeddings Megatron still allocates the output weight
    on the last stage when it is not also the first (gpt_model.py, share_embeddings_and_output_weights:
    a copy synced by all-reduce); ``tied_copy`` says so."""
    out: list[Tensor] = []
    if spec.untie_embeddings_and_output_weights or tied_copy:
        out.append(Tensor(name="output_layer.weight", numel=vocab * spec.hidden_size, shard="vocab", quantized=False))
    if spec.output_layer_bias:  # Megatron's output layer is built with bias=False (gpt_model.py)
        out.append(vector("output_layer.bias", vocab, "vocab", megatron=False))
    return out


def mtp_tensors(spec: ModelSpec, layer_spec: LayerSpec = "te") -> list[Tensor]:
    """One MTP module (multi_token_prediction.py): enorm, hnorm, eh_proj (2h -> h, column-parallel),
    a full decoder layer and a final norm. It reuses the main model's embedding and output layer."""
    h = spec.hidden_size
    return (_norm(spec, "mtp.enorm") + _norm(spec, "mtp.hnorm")
            + [Tensor(name="mtp.eh_proj.weight", numel=2 * h * h, shard="tp")]
            + layer_tensors(spec, spec.mtp_layer_kind, layer_spec) + _norm(spec, "mtp.final_layernorm"))


def numel(tensors: list[Tensor], *, megatron: bool | None = None) -> int:
    """Total elements, optionally only Megatron parameters (True) or only HF checkpoint tensors (False)."""
    keep = (lambda t: True) if megatron is None else (lambda t: t.megatron if megatron else t.hf)
    return sum(t.numel for t in tensors if keep(t))
