"""Which parameters Megatron's Muon leaves to Adam, on the model Megatron-Core builds (oracle/mcore.py).

Megatron steps a parameter with Muon when it is 2-D and not tagged ``is_embedding_or_output_parameter``, with Adam
otherwise (optimizer/muon.py:252-258 @core_v0.16.1, the megatron-core the oracle builds with; emerging_optimizers.py
_is_nonlinear_or_embedding :128-130 @core_v0.18.0). The tag is read as core_v0.18.0 sets it: language_module.py:210
tags the embedding a stage builds for its MTP layers as well as the first stage's, where 0.16.1 (:182-183) tags only
the first stage's and so hands the MTP copy to Muon; moetune follows the later rule (walls/model_state.py).
"""

from __future__ import annotations

from typing import Any

from moetune.oracle.mcore import count_params_breakdown

KINDS = ("vocab", "nonmatrix", "expert_nonmatrix")


def leaves_to_adam(chunk: Any, name: str, param: Any) -> bool:
    """Megatron's routing of one parameter under Muon: True where Adam steps it."""
    tagged = getattr(param, "is_embedding_or_output_parameter", False)
    mtp_copy = name == "embedding.word_embeddings.weight" and getattr(chunk, "mtp_process", False)
    return tagged or mtp_copy or param.dim() != 2


def _kind(param: Any) -> str:
    """vocab (the tagged 2-D embedding and output layer), or a non-2-D parameter, routed-expert where Megatron's DDP
    and optimizer take it to be (not allreduce: distributed_data_parallel.py:563, optimizer/__init__.py:165
    @core_v0.16.1), sharded over EDP."""
    if param.dim() == 2:
        return "vocab"
    return "expert_nonmatrix" if not getattr(param, "allreduce", True) else "nonmatrix"


def muon_adam_per_stage(hf_config: dict, *, pp: int, **kw: Any) -> list[dict[str, int]]:
    """For the first rank of each pipeline stage, the elements Muon leaves to Adam by kind (KINDS). ``kw``: the
    keywords of count_params_breakdown but ``stage`` and ``keep``."""
    out = []
    for stage in range(pp):
        totals = dict.fromkeys(KINDS, 0)

        def keep(chunk, name, param, totals=totals) -> bool:
            if leaves_to_adam(chunk, name, param):
                totals[_kind(param)] += param.numel()
            return False  # tallied here: the breakdown itself is not read

        count_params_breakdown(hf_config, pp=pp, stage=stage, keep=keep, **kw)
        out.append(totals)
    return out
