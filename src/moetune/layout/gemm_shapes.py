"""The GEMM shapes Transformer Engine accepts under an FP8/FP4 recipe: tokens per rank and per-rank weight widths.

Read by estimate's validation (validate_gemm_shapes), the planner's candidates (planner/candidates.py _runs, on
numpy columns) and the rule precision.gemm_shapes (rules/derive_layers.py), from the one list `gemm_checks` makes.
Sources (Transformer Engine main):
- pytorch/utils.py assert_dim_for_fp8_exec, which module/linear.py, layernorm_linear.py and layernorm_mlp.py call
  under every quantized recipe (TE's fp8 autocast carries MXFP8 and NVFP4 too) on the LOCAL input, before any
  sequence-parallel all-gather, and on the weight: the product of all dims but the last a multiple of 8 (the tokens,
  seq x MBS / CP / TP under sequence parallelism), the last dim a multiple of 16 (a row-parallel weight's per-rank
  input width: FFN / TP).
- common/gemm/cublaslt_gemm.cu CanonicalizeGemmInput ("Caller must pad"): Hopper runs FP8 GEMMs in TN layout only, so
  the weight-gradient GEMM contracts over the tokens with them as cuBLAS's leading dimension, a multiple of 16 (seq x
  MBS / CP, gathered; MLA's down projections run duplicated on the sequence-parallel shard, multi_latent_attention.py),
  and the routed experts' grouped GEMM contracts over moe_ffn / ETP the same way. Blackwell runs the other layouts and
  its blockwise recipe as MXFP8 (pytorch/csrc/extensions/gemm.cpp), so neither applies there.
Not refusals: the quantizers' is_quantizable (MXFP8 32, blockwise 128, NVFP4 16) only sends the sequence-parallel
all-gather in BF16 (distributed.py gather_along_first_dim); each expert's token count is padded by Megatron-Core
(moe/experts.py Fp8Padding, or moe_router_padding_for_quantization), so routing needs no alignment.
"""

import math
from dataclasses import dataclass

import numpy as np

from moetune.errors import MoetuneError
from moetune.memo import remembered
from moetune.specs.model import ModelSpec

TOKEN_MULTIPLE = 8  # assert_dim_for_fp8_exec: leading dims
WIDTH_MULTIPLE = 16  # assert_dim_for_fp8_exec: last dim; cuBLAS FP8 leading dimension on Hopper
_ASSERT = "Transformer Engine asserts it: utils.py assert_dim_for_fp8_exec"
_CUBLAS = "Hopper's FP8 GEMMs are TN-only and cuBLAS needs that leading dimension a multiple of 16: cublaslt_gemm.cu"


def hopper_fp8(precision: str | None, arch: str | None) -> bool:
    """Whether the Hopper-only cuBLAS alignments apply (an FP8 recipe on a Hopper GPU)."""
    return arch == "hopper" and bool(precision) and precision != "bf16"


@dataclass(frozen=True, slots=True)
class Check:
    """One shape a quantized recipe needs a multiple of: `count` an int or a numpy column (the planner's candidates);
    `shard` the tokens' divisor (seq x MBS / shard) for a token count, None for a weight width."""
    what: str
    count: object
    multiple: int
    why: str
    shard: int | None = None


@dataclass(frozen=True, slots=True)
class Widths:
    """What of the model the checks read: whether MLA's down projections run, and the widths split over TP (dense
    FFN, shared experts) and ETP (routed experts); None where the model has no such layer (or a config leaves it to
    its recipe)."""
    mla: bool = False
    dense_ffn: int | None = None
    shared_ffn: int | None = None
    expert_ffn: int | None = None

    @classmethod
    def of(cls, spec: ModelSpec) -> "Widths":
        return cls(mla=spec.mla is not None, dense_ffn=spec.ffn_hidden_size if spec.num_dense_layers else None,
                   shared_ffn=spec.moe_shared_expert_intermediate_size or None,
                   expert_ffn=spec.moe_ffn_hidden_size if spec.num_moe_layers else None)


def gemm_checks(w: Widths, *, seq, mbs, tp, cp, sp, etp, hopper: bool) -> list[Check]:
    """Every shape an FP8/FP4 recipe needs on this model and layout. The token counts are seq x MBS over the shard;
    where the shard does not divide them the sequence rules refuse it first (sp_refusal)."""
    tokens, shard, cp, tp = np.asarray(seq) * np.asarray(mbs), np.asarray(cp) * np.where(sp, tp, 1), np.asarray(cp), \
        np.asarray(tp)
    local = "(seq x MBS / CP / TP under sequence parallelism)"
    out = [Check(f"tokens a rank feeds each GEMM {local}", tokens // shard, TOKEN_MULTIPLE, _ASSERT, shard)]
    if hopper:
        out.append(Check("tokens of each weight-gradient GEMM (seq x MBS / CP)", tokens // cp, WIDTH_MULTIPLE, _CUBLAS,
                         cp))
        if w.mla:
            out.append(Check(f"tokens of MLA's down-projection weight gradients {local}", tokens // shard,
                             WIDTH_MULTIPLE, _CUBLAS, shard))
    if w.dense_ffn:
        out.append(Check("ffn_hidden_size / TP", w.dense_ffn // tp, WIDTH_MULTIPLE, _ASSERT))
    if w.shared_ffn:
        out.append(Check("shared expert width / TP", w.shared_ffn // tp, WIDTH_MULTIPLE, _ASSERT))
    if hopper and w.expert_ffn:
        out.append(Check("moe_ffn_hidden_size / ETP", w.expert_ffn // np.asarray(etp), WIDTH_MULTIPLE, _CUBLAS))
    return out


def gemm_shapes_ok(w: Widths, precision: str, arch: str, **shape) -> np.ndarray | bool:
    """Where every check of gemm_checks holds (everywhere under BF16)."""
    if precision == "bf16":
        return True
    checks = gemm_checks(w, hopper=hopper_fp8(precision, arch), **shape)
    return np.logical_and.reduce([np.asarray(c.count) % c.multiple == 0 for c in checks])


def _refused(w: Widths, precision: str | None, arch: str | None, **shape) -> list[Check]:
    if not precision or precision == "bf16":
        return []
    return [c for c in gemm_checks(w, hopper=hopper_fp8(precision, arch), **shape) if int(c.count) % c.multiple]


def gemm_refusal(w: Widths, precision: str | None, arch: str | None, **shape) -> str | None:
    """Every shape this recipe refuses, in words with its numbers and the source that refuses it (None: every one
    holds, or BF16): an odd sequence on Hopper fails both Transformer Engine's multiple of 8 and cuBLAS's 16, and the
    fix (token_fix) meets both, so both are named. `shape`: seq, mbs, tp, cp, sp, etp."""
    refused = _refused(w, precision, arch, **shape)
    return f"{precision} needs " + ", and ".join(f"the {c.what} a multiple of {c.multiple}, got {int(c.count)} "
                                                 f"({c.why})" for c in refused) if refused else None


def token_fix(w: Widths, precision: str, arch: str | None, *, seq: int, mbs: int, tp: int, cp: int,
              sp: bool, etp: int = 1) -> tuple[int, int]:
    """(the nearest sequence length from `seq` up, the smallest MBS) at which every token check holds on this layout,
    the sequence rules' own divisors (2 x CP, TP x CP under sequence parallelism) kept."""
    shards = [int(c.shard) * c.multiple for c in gemm_checks(w, seq=1, mbs=1, tp=tp, cp=cp, sp=sp, etp=etp,
                                                           hopper=hopper_fp8(precision, arch)) if c.shard is not None]
    step = lambda n: math.lcm(*(s // math.gcd(s, n) for s in shards))  # noqa: E731 (least multiplier of the other)
    seq_step = math.lcm(step(mbs), 2 * cp if cp > 1 else 1, tp * cp if sp else 1)
    return -(-seq // seq_step) * seq_step, step(seq)


# The shapes validate_gemm_shapes passed, by all it reads: the planner's re-split asks again for every split and knob
# set of a layout it weighs. A refusal is not remembered (memo.remembered keeps nothing where the check raises).
_PASSED: dict = {}


def validate_gemm_shapes(w: Widths, precision: str, arch: str | None, *, seq: int, mbs: int, tp: int, cp: int,
                         sp: bool, etp: int) -> None:
    """Raise the refusal in one line, with the sequence length, MBS or layout that runs (estimate's validation)."""
    remembered(_PASSED, (w, precision, arch, seq, mbs, tp, cp, sp, etp),
               lambda: _validate_gemm_shapes(w, precision, arch, seq=seq, mbs=mbs, tp=tp, cp=cp, sp=sp, etp=etp), 4096)


def _validate_gemm_shapes(w: Widths, precision: str, arch: str | None, *, seq: int, mbs: int, tp: int, cp: int,
                          sp: bool, etp: int) -> bool:
    shape = {"seq": seq, "mbs": mbs, "tp": tp, "cp": cp, "sp": sp, "etp": etp}
    refused = _refused(w, precision, arch, **shape)
    if not refused:
        return True
    if refused[0].shard is not None:
        s, m = token_fix(w, precision, arch, seq=seq, mbs=mbs, tp=tp, cp=cp, sp=sp)
        fix = f"use --seq {s} or --mbs {m}, or --precision bf16"
    else:
        fix = "use a smaller --tp (or --etp), or --precision bf16"
    raise MoetuneError(f"{gemm_refusal(w, precision, arch, **shape)}; {fix}", same_as=("precision.gemm_shapes",))
