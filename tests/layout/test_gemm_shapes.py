"""The GEMM shapes an FP8/FP4 recipe needs (layout/gemm_shapes.py), against Transformer Engine's own conditions:
utils.py assert_dim_for_fp8_exec (the product of all dims but the last % 8, the last % 16, on the local input before
the sequence-parallel all-gather) and, on Hopper, cublaslt_gemm.cu's leading dimension % 16 (the weight gradient's
tokens, the experts' moe_ffn / ETP)."""

import math
from itertools import product

import numpy as np
import pytest

from moetune.errors import MoetuneError
from moetune.layout.gemm_shapes import Widths, gemm_refusal, gemm_shapes_ok, token_fix, validate_gemm_shapes
from moetune.layout.validate import sequence_refusal
from moetune.specs.registry import load_model

DBRX, DSV3 = Widths.of(load_model("dbrx")), Widths.of(load_model("deepseek-v3"))


def _te_accepts(w: Widths, seq, mbs, tp, cp, sp, etp, hopper) -> bool:
    """Transformer Engine's conditions written out from its source, one GEMM input at a time (not via the module)."""
    shard = cp * (tp if sp else 1)
    local, gathered = seq * mbs // shard, seq * mbs // cp
    ok = local % 8 == 0  # assert_dim_for_fp8_exec on [s/(CP x TP), b, h]: prod of leading dims
    if w.dense_ffn:
        ok &= (w.dense_ffn // tp) % 16 == 0  # the row-parallel fc2 weight's last dim
    if w.shared_ffn:
        ok &= (w.shared_ffn // tp) % 16 == 0
    if hopper:  # TN-only FP8: wgrad's K = tokens of its input (gathered; MLA's duplicated down projections: local)
        ok &= gathered % 16 == 0 and (not w.mla or local % 16 == 0)
        ok &= not w.expert_ffn or (w.expert_ffn // etp) % 16 == 0  # grouped fc2 fprop's K
    return bool(ok)


SHAPES = [dict(seq=s, mbs=m, tp=t, cp=c, sp=t > 1, etp=e)
          for s, m, t, c, e in product((4096, 4097, 4100, 4104, 8200), (1, 2, 3, 8), (1, 2, 4, 8), (1, 2, 4), (1, 8))
          if sequence_refusal(s, t, c, t > 1) is None]


@pytest.mark.parametrize("model", ["dbrx", "deepseek-v3", "glm-4.5-air", "gpt-oss-120b"])
@pytest.mark.parametrize("precision,arch", [("fp8-blockwise", "hopper"), ("mxfp8", "blackwell"),
                                            ("fp8-current", "blackwell")])
def test_the_refusal_and_the_planner_columns_agree_with_te(model, precision, arch):
    w = Widths.of(load_model(model))
    expected = [_te_accepts(w, hopper=arch == "hopper", **s) for s in SHAPES]
    assert [gemm_refusal(w, precision, arch, **s) is None for s in SHAPES] == expected
    cols = {k: np.array([s[k] for s in SHAPES]) for k in SHAPES[0]}
    assert list(np.broadcast_to(gemm_shapes_ok(w, precision, arch, **cols), len(SHAPES))) == expected
    assert not all(expected)  # the grid reaches refusals


def test_bf16_runs_every_shape():
    assert gemm_refusal(DBRX, "bf16", "hopper", seq=4097, mbs=1, tp=1, cp=1, sp=False, etp=1) is None
    assert gemm_shapes_ok(DBRX, "bf16", "hopper", seq=4097, mbs=1, tp=1, cp=1, sp=False, etp=1) is True


def test_the_fuzz_case_names_its_numbers_and_fixes():
    """dbrx at seq 4097, TP 1: 4,097 tokens reach each FP8 GEMM; the suggested length and MBS run it."""
    with pytest.raises(MoetuneError, match=r"multiple of 8, got 4097 .*assert_dim_for_fp8_exec.*--seq 4112 or "
                                           r"--mbs 16, or --precision bf16") as err:
        validate_gemm_shapes(DBRX, "fp8-blockwise", "hopper", seq=4097, mbs=1, tp=1, cp=1, sp=False, etp=1)
    assert err.value.same_as == ("precision.gemm_shapes",) and "\n" not in str(err.value)


def test_the_refusal_names_every_check_the_fix_meets():
    """An odd sequence on Hopper fails Transformer Engine's multiple of 8 (assert_dim_for_fp8_exec) and cuBLAS's 16
    (cublaslt_gemm.cu, wgrad's leading dimension): both are named, since --seq 4112 / --mbs 16 meet the second; 4104
    fails only cuBLAS's 16 (4104 = 8 x 513), and Blackwell asks only the 8."""
    odd = gemm_refusal(DBRX, "fp8-blockwise", "hopper", seq=4097, mbs=1, tp=1, cp=1, sp=False, etp=1)
    assert "multiple of 8, got 4097 (Transformer Engine asserts it: utils.py assert_dim_for_fp8_exec)" in odd
    assert "weight-gradient GEMM (seq x MBS / CP) a multiple of 16, got 4097" in odd and "cublaslt_gemm.cu" in odd
    even = gemm_refusal(DBRX, "fp8-blockwise", "hopper", seq=4104, mbs=1, tp=1, cp=1, sp=False, etp=1)
    assert "multiple of 8" not in even and "a multiple of 16, got 4104" in even
    blackwell = gemm_refusal(DBRX, "mxfp8", "blackwell", seq=4097, mbs=1, tp=1, cp=1, sp=False, etp=1)
    assert "multiple of 8, got 4097" in blackwell and "multiple of 16" not in blackwell
    with pytest.raises(MoetuneError, match=r"multiple of 8, got 4097 .*, and the tokens of each weight-gradient GEMM "
                                           r".*multiple of 16, got 4097 .*; use --seq 4112 or --mbs 16"):
        validate_gemm_shapes(DBRX, "fp8-blockwise", "hopper", seq=4097, mbs=1, tp=1, cp=1, sp=False, etp=1)


@pytest.mark.parametrize("w", [DBRX, DSV3])
@pytest.mark.parametrize("shape", SHAPES[::7])
def test_token_fix_runs(w, shape):
    for precision, arch in (("fp8-blockwise", "hopper"), ("mxfp8", "blackwell")):
        seq, mbs = token_fix(w, precision, arch, **shape)
        assert seq >= shape["seq"] and sequence_refusal(seq, shape["tp"], shape["cp"], shape["sp"]) is None
        for s in ({**shape, "seq": seq}, {**shape, "mbs": mbs}):
            why = gemm_refusal(w, precision, arch, **s)
            assert why is None or "tokens" not in why


def test_widths_real_models_refuse():
    """GLM-4.5-Air's dense FFN (10944) over TP 8 leaves 1368 per rank, not a multiple of 16; GPT-OSS's experts (2880)
    over ETP 8 leave 360, which only Hopper's TN-only FP8 GEMMs refuse."""
    glm, oss = Widths.of(load_model("glm-4.5-air")), Widths.of(load_model("gpt-oss-120b"))
    at = dict(seq=4096, mbs=1, cp=1, sp=True)
    assert "ffn_hidden_size / TP a multiple of 16, got 1368" in gemm_refusal(glm, "mxfp8", "blackwell", tp=8, etp=1,
                                                                               **at)
    assert gemm_refusal(glm, "mxfp8", "blackwell", tp=4, etp=1, **at) is None
    assert "got 360" in gemm_refusal(oss, "fp8-blockwise", "hopper", tp=1, etp=8, **at)
    assert gemm_refusal(oss, "mxfp8", "blackwell", tp=1, etp=8, **at) is None
    assert math.gcd(10944 // 8, 16) == 8  # the numbers above, as TE sees them


def test_mla_shards_need_16_on_hopper():
    """DeepSeek-V3's down projections run on the sequence-parallel shard: 4112 tokens over TP 2 is 2056 a rank."""
    why = gemm_refusal(DSV3, "fp8-blockwise", "hopper", seq=4112, mbs=1, tp=2, cp=1, sp=True, etp=1)
    assert "MLA" in why and "got 2056" in why
    assert gemm_refusal(DBRX, "fp8-blockwise", "hopper", seq=4112, mbs=1, tp=2, cp=1, sp=True, etp=1) is None
