"""Why a plan's pick runs BF16 where its FP8/FP4 knob sets were searched: their GEMM shapes refused every candidate
that fit in memory (layout/gemm_shapes.py; an odd --seq 4097 on Hopper), which the search otherwise says nowhere. What
the recipe refuses on the pick's layout, and the nearest sequence length and the least micro-batch at which its GEMMs
run there (token_fix), for plan's note (planner/plan_notes.py shape_note)."""

from moetune.layout.gemm_shapes import Widths, gemm_refusal, token_fix
from moetune.planner.estimate import Estimate
from moetune.planner.search_state import Search


def shape_refusal(s: Search, pick: Estimate, default_precision: str) -> dict | None:
    """None unless the pick runs BF16, some FP8/FP4 candidate fit in memory and the GEMM shapes let none of them run;
    the recipe named is the platform's (DEFAULT_PRECISION) where it was among them."""
    if pick.knobs.precision != "bf16" or not s.quantized_in_memory or s.quantized_shapes_ok:
        return None
    refused = sorted(s.quantized_in_memory)
    precision = default_precision if default_precision in refused else refused[0]
    lay, w = pick.layout, Widths.of(s.spec)
    shape = {"seq": pick.workload.seq_length, "mbs": pick.workload.micro_batch_size, "tp": lay.tp, "cp": lay.cp,
             "sp": lay.sp, "etp": lay.etp}
    why = gemm_refusal(w, precision, s.gpu.arch, **shape)
    if why is None:  # the pick's own shape runs it (memory kept it out there): the note would not hold
        return None
    seq, mbs = token_fix(w, precision, s.gpu.arch, **shape)
    runs = lambda **at: gemm_refusal(w, precision, s.gpu.arch, **{**shape, **at}) is None  # noqa: E731
    return {"precision": precision, "seq_length": shape["seq"], "refusal": why,
            "seq_allowing": seq if runs(seq=seq) else None, "mbs_allowing": mbs if runs(mbs=mbs) else None}
