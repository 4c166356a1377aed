"""Exactness oracle: Megatron-Core builds the model on ``meta`` and we count each rank's params.

For every pipeline stage we start a *fake* process group (``torch.distributed`` backend
``"fake"``: collectives are no-ops, only ranks and group sizes are real), call
``parallel_state.initialize_model_parallel`` as that stage's first rank, build one ``GPTModel``
per virtual stage with the local (no-TE) layer specs on the ``meta`` device (a ``MambaModel`` for a
Mamba hybrid; layer_specs.py), and sum ``numel()`` over ``model.parameters()``. Buffers (e.g. the
router's ``expert_bias``) are not parameters and are not counted. Global Megatron state is torn
down after every build, so the functions are safe to call many times in one process.

Requires torch + megatron-core (the ``oracle`` extra); imports them lazily.
"""

from __future__ import annotations

import contextlib
import functools
import math
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from moetune.errors import MoetuneError
from moetune.oracle.hf_to_mcore import McoreModelArgs, hf_to_mcore

SPECS = ("te", "local")
Keep = Callable[[Any, str, Any], bool]  # (model chunk, parameter name, parameter) -> counted


@dataclass(kw_only=True, slots=True)
class Parallelism:
    """The Megatron parallel sizes one build is made under (Megatron-Core argument names)."""

    tensor_model_parallel_size: int
    pipeline_model_parallel_size: int
    expert_model_parallel_size: int
    expert_tensor_parallel_size: int
    context_parallel_size: int = 1
    virtual_pipeline_model_parallel_size: int | None = None
    world_size: int
    num_layers_in_first_pipeline_stage: int | None = None
    num_layers_in_last_pipeline_stage: int | None = None
    pipeline_model_parallel_layout: str | list | None = None

    def build_world_size(self) -> int:
        """Smallest world with the same per-rank shapes: DP never changes a rank's parameters."""
        p = self.pipeline_model_parallel_size
        tp_cp = self.tensor_model_parallel_size * self.context_parallel_size
        return p * math.lcm(tp_cp, self.expert_tensor_parallel_size * self.expert_model_parallel_size)


@functools.cache
def _load_megatron() -> None:
    """Import torch + megatron once, hiding their import-time "no TE / no Apex" warnings."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import megatron.core.models.gpt.gpt_layer_specs  # noqa: F401
            import megatron.core.models.gpt.gpt_model  # noqa: F401
            import megatron.core.parallel_state  # noqa: F401
            import torch.testing._internal.distributed.fake_pg  # noqa: F401
    except ImportError as exc:
        raise MoetuneError(f"oracle: needs torch and megatron-core ({exc}); "
                           "install the 'oracle' extra: pip install 'moetune[oracle]'") from exc


def _check(p: Parallelism, padded_vocab: int) -> None:
    sizes = {
        "tp": p.tensor_model_parallel_size, "pp": p.pipeline_model_parallel_size,
        "ep": p.expert_model_parallel_size, "etp": p.expert_tensor_parallel_size,
        "cp": p.context_parallel_size, "world_size": p.world_size,
    }
    for name, value in sizes.items():
        if not isinstance(value, int) or value < 1:
            raise MoetuneError(f"oracle: {name} must be a positive integer, got {value!r}")
    dense = sizes["tp"] * sizes["pp"] * sizes["cp"]
    expert = sizes["etp"] * sizes["ep"] * sizes["pp"]
    if sizes["world_size"] % dense or sizes["world_size"] % expert:
        raise MoetuneError(
            f"oracle: world_size {sizes['world_size']} must be divisible by tp*pp*cp={dense} "
            f"and etp*ep*pp={expert}")
    if padded_vocab % sizes["tp"]:
        raise MoetuneError(
            f"oracle: padded_vocab_size {padded_vocab} is not divisible by tp={sizes['tp']}; "
            "use moetune.oracle.padded_vocab_size(vocab, tp)")


def _layout_vpp(p: Parallelism) -> int | None:
    """VPP implied by a pipeline_model_parallel_layout (Megatron derives it the same way)."""
    from megatron.core.transformer.pipeline_parallel_layer_layout import PipelineParallelLayerLayout

    layout = p.pipeline_model_parallel_layout
    try:
        chunks = (PipelineParallelLayerLayout.get_num_stages_from_str(layout)
                  if isinstance(layout, str) else len(layout))
    except Exception as exc:  # MCore's parser raises bare errors on malformed strings
        raise MoetuneError(f"oracle: pipeline_model_parallel_layout {layout!r} does not parse: "
                           f"{exc}") from exc
    vpp = chunks // p.pipeline_model_parallel_size
    if p.virtual_pipeline_model_parallel_size not in (None, vpp):
        raise MoetuneError(
            f"oracle: vpp={p.virtual_pipeline_model_parallel_size} conflicts with the layout's "
            f"{vpp} chunks per stage; drop vpp or fix pipeline_model_parallel_layout")
    return vpp if vpp > 1 else None


@contextlib.contextmanager
def _fake_rank(rank: int, world: int, p: Parallelism, vpp: int | None) -> Iterator[None]:
    """Initialise torch.distributed (fake backend) + Megatron parallel_state as ``rank``."""
    import torch.distributed as dist
    from megatron.core import parallel_state
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        raise MoetuneError("oracle: torch.distributed is already initialised in this process; "
                           "run the oracle in a fresh process")
    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world)
    try:
        parallel_state.initialize_model_parallel(
            tensor_model_parallel_size=p.tensor_model_parallel_size,
            pipeline_model_parallel_size=p.pipeline_model_parallel_size,
            virtual_pipeline_model_parallel_size=vpp,
            context_parallel_size=p.context_parallel_size,
            expert_model_parallel_size=p.expert_model_parallel_size,
            expert_tensor_parallel_size=p.expert_tensor_parallel_size,
            order="tp-cp-ep-dp-pp",
            create_gloo_process_groups=False,
        )
        yield
    finally:
        parallel_state.destroy_model_parallel()
        dist.destroy_process_group()


def _transformer_config(args: McoreModelArgs, p: Parallelism, vpp: int | None,
                        grouped_gemm: bool = False):
    import torch
    import torch.nn.functional as F
    from megatron.core.transformer.transformer_config import (
        MLATransformerConfig,
        TransformerConfig,
    )

    cls = MLATransformerConfig if args.mla else TransformerConfig
    return cls(
        **args.config,
        tensor_model_parallel_size=p.tensor_model_parallel_size,
        pipeline_model_parallel_size=p.pipeline_model_parallel_size,
        virtual_pipeline_model_parallel_size=vpp,
        context_parallel_size=p.context_parallel_size,
        expert_model_parallel_size=p.expert_model_parallel_size,
        expert_tensor_parallel_size=p.expert_tensor_parallel_size,
        num_layers_in_first_pipeline_stage=p.num_layers_in_first_pipeline_stage,
        num_layers_in_last_pipeline_stage=p.num_layers_in_last_pipeline_stage,
        pipeline_model_parallel_layout=p.pipeline_model_parallel_layout,
        sequence_parallel=False,
        moe_token_dispatcher_type="allgather",
        # SequentialMLP by default: the legacy GroupedMLP needs the grouped_gemm package; both
        # hold the same per-expert fc1/fc2 elements (tests/oracle checks it).
        moe_grouped_gemm=grouped_gemm,
        activation_func=F.silu,
        use_cpu_initialization=True,  # weights use the ambient meta device, not cuda
        perform_initialization=False,
        params_dtype=torch.bfloat16,
        pipeline_dtype=torch.bfloat16,
        bf16=True,
    )


def _build_chunks(args: McoreModelArgs, config, padded_vocab: int, spec: str) -> list:
    import torch
    from megatron.core import parallel_state as ps
    from megatron.core.models.gpt.gpt_model import GPTModel

    from moetune.oracle.layer_specs import chunk_specs

    if args.hybrid_pattern is not None:
        return [_build_hybrid(args, config, padded_vocab)]
    vpp = config.virtual_pipeline_model_parallel_size
    models = []
    for vp_stage in range(vpp) if vpp else [None]:
        block, mtp = chunk_specs(config, vp_stage, spec, dsa=args.dsa, qk_norm=args.qk_norm)
        with torch.device("meta"):
            models.append(GPTModel(
                config, block, vocab_size=padded_vocab,
                max_sequence_length=args.max_sequence_length,
                pre_process=ps.is_pipeline_first_stage(ignore_virtual=False, vp_stage=vp_stage),
                post_process=ps.is_pipeline_last_stage(ignore_virtual=False, vp_stage=vp_stage),
                share_embeddings_and_output_weights=args.tied,
                position_embedding_type="rope",
                mtp_block_spec=mtp, vp_stage=vp_stage,
            ))
    return models


def _build_hybrid(args: McoreModelArgs, config, padded_vocab: int):
    """A Mamba hybrid as Bridge builds it (mamba_provider.py MambaModelProvider.provide, v0.3.1 :130-182): MambaModel
    over the hybrid pattern. MambaStack splits the layers over PP itself (mamba_block.py _select_layers_for_pipeline_
    parallel) and has no VPP nor layout; no position embedding (the provider's default)."""
    import torch
    from megatron.core import parallel_state as ps
    from megatron.core.models.mamba.mamba_model import MambaModel

    from moetune.oracle.layer_specs import hybrid_stack_spec

    if config.virtual_pipeline_model_parallel_size or config.pipeline_model_parallel_layout is not None:
        raise MoetuneError("oracle: a Mamba hybrid (MambaModel) takes no VPP nor pipeline layout in megatron-core "
                           "0.16.1 (mamba_block.py _select_layers_for_pipeline_parallel)")
    with torch.device("meta"):
        return MambaModel(config, hybrid_stack_spec(), vocab_size=padded_vocab,
                          max_sequence_length=args.max_sequence_length,
                          pre_process=ps.is_pipeline_first_stage(), post_process=ps.is_pipeline_last_stage(),
                          hybrid_override_pattern=args.hybrid_pattern,
                          share_embeddings_and_output_weights=args.tied, position_embedding_type="none")


def _build_stage(args: McoreModelArgs, p: Parallelism, padded_vocab: int, stage: int, spec: str,
                 grouped_gemm: bool = False) -> list:
    """The model chunks (one per virtual stage) the first rank of pipeline stage ``stage`` builds."""
    from megatron.core import parallel_state as ps

    from moetune.oracle.shims import cuda_free, ssm_free, te_mla_down_proj

    vpp = _layout_vpp(p) if p.pipeline_model_parallel_layout is not None else \
        p.virtual_pipeline_model_parallel_size
    world = p.build_world_size()
    rank = stage * (world // p.pipeline_model_parallel_size)  # pp is outermost in tp-cp-ep-dp-pp
    with warnings.catch_warnings(), _fake_rank(rank, world, p, vpp), cuda_free(), \
            te_mla_down_proj(), ssm_free():
        warnings.simplefilter("ignore")
        assert ps.get_pipeline_model_parallel_rank() == stage
        try:
            config = _transformer_config(args, p, vpp, grouped_gemm)
            return _build_chunks(args, config, padded_vocab, spec)
        except (AssertionError, ValueError, RuntimeError) as exc:
            raise MoetuneError(f"oracle: Megatron-Core rejected this setup: {exc}") from exc


def _stage_params(args: McoreModelArgs, p: Parallelism, padded_vocab: int, stage: int,
                  spec: str, grouped_gemm: bool = False, keep: Keep | None = None) -> dict[str, int]:
    """{param name: numel} held by the first rank of pipeline stage ``stage`` (those ``keep`` accepts)."""
    chunks = _build_stage(args, p, padded_vocab, stage, spec, grouped_gemm)
    prefix = (lambda v: f"chunk{v}.") if len(chunks) > 1 else (lambda v: "")
    return {prefix(v) + name: t.numel() for v, m in enumerate(chunks) for name, t in m.named_parameters()
            if keep is None or keep(m, name, t)}


def _parallelism(kw: dict[str, Any]) -> Parallelism:
    return Parallelism(
        tensor_model_parallel_size=kw["tp"], pipeline_model_parallel_size=kw["pp"],
        expert_model_parallel_size=kw["ep"], expert_tensor_parallel_size=kw["etp"],
        context_parallel_size=kw["cp"], virtual_pipeline_model_parallel_size=kw["vpp"],
        world_size=kw["world_size"],
        num_layers_in_first_pipeline_stage=kw["num_layers_in_first_pipeline_stage"],
        num_layers_in_last_pipeline_stage=kw["num_layers_in_last_pipeline_stage"],
        pipeline_model_parallel_layout=kw["pipeline_model_parallel_layout"],
    )


def count_params_breakdown(hf_config: dict, *, tp: int, pp: int, ep: int, etp: int, cp: int = 1,
                           vpp: int | None = None, world_size: int, padded_vocab_size: int,
                           num_layers_in_first_pipeline_stage: int | None = None,
                           num_layers_in_last_pipeline_stage: int | None = None,
                           pipeline_model_parallel_layout: str | list | None = None,
                           include_mtp: bool = True, stage: int = 0,
                           spec: str = "te", keep: Keep | None = None) -> dict[str, int]:
    """{MCore parameter name: numel} on the first rank of pipeline ``stage``.

    With VPP, names carry a ``chunk<v>.`` prefix for virtual stage ``v``. ``spec="te"``
    reproduces the Transformer Engine layer spec's allocation (what real training uses);
    ``spec="local"`` is the stock MCore local spec. They differ only for MLA down-projections.
    ``keep(chunk, name, param)``: count only the parameters it accepts (oracle/muon_split.py).
    """
    if spec not in SPECS:
        raise MoetuneError(f"oracle: spec must be one of {SPECS}, got {spec!r}")
    p = _parallelism(locals())
    _check(p, padded_vocab_size)
    _load_megatron()
    if not 0 <= stage < pp:
        raise MoetuneError(f"oracle: stage must be in [0, {pp}), got {stage}")
    args = hf_to_mcore(hf_config, include_mtp=include_mtp)
    return _stage_params(args, p, padded_vocab_size, stage, spec, keep=keep)


def count_params_per_stage(hf_config: dict, *, tp: int, pp: int, ep: int, etp: int, cp: int = 1,
                           vpp: int | None = None, world_size: int, padded_vocab_size: int,
                           num_layers_in_first_pipeline_stage: int | None = None,
                           num_layers_in_last_pipeline_stage: int | None = None,
                           pipeline_model_parallel_layout: str | list | None = None,
                           include_mtp: bool = True, spec: str = "te", keep: Keep | None = None) -> list[int]:
    """Parameters held by one rank (the first) of each pipeline stage, all its VPP chunks (those ``keep``
    accepts)."""
    kw = {k: v for k, v in locals().items() if k not in ("hf_config", "pp")}
    return [sum(count_params_breakdown(hf_config, pp=pp, stage=s, **kw).values())
            for s in range(pp)]
