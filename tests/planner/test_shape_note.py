"""A BF16 pick where the search's FP8/FP4 knob sets ran nowhere because the GEMM shapes refused them (planner/
shape_note.py): plan had quietly picked BF16 at --seq 4097 on H100 (Qwen3-30B-A3B, 64 GPUs); it now says why, names
both checks and the nearest sequence length that runs FP8."""

import json

from tests.cli.cli_run import run

JOB = ["plan", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "64", "--gbs", "512", "--top", "3"]


def test_an_odd_sequence_says_why_fp8_is_not_the_pick(capsys):
    code, out, _ = run([*JOB, "--seq", "4097", "--json"], capsys)
    data = json.loads(out)
    refusal, pick = data["shape_refusal"], data["results"][0]
    assert code == 0 and all(r["knobs"]["precision"] == "bf16" for r in data["results"])
    # the pick runs TP 1 x CP 1 at MBS 1: 4,097 tokens reach each GEMM, and its weight gradient, on every rank; TE
    # needs them a multiple of 8, Hopper's TN-only cuBLAS a multiple of 16 (layout/gemm_shapes.py); the next multiple
    # of 16 from 4,097 is 4,112, and 16 x 4,097 is the least micro-batch's token count that is one
    assert (pick["layout"]["tp"], pick["layout"]["cp"], pick["workload"]["micro_batch_size"]) == (1, 1, 1)
    assert refusal["precision"] == "fp8-blockwise" and refusal["seq_allowing"] == 4112 and \
        refusal["mbs_allowing"] == 16
    assert "a multiple of 8, got 4097" in refusal["refusal"] and "a multiple of 16, got 4097" in refusal["refusal"]
    code, out, _ = run([*JOB, "--seq", "4097"], capsys)
    text = " ".join(out.split())
    assert "note: no fp8-blockwise candidate runs at sequence 4,097, so the pick runs bf16" in text
    assert "assert_dim_for_fp8_exec" in text and "cublaslt_gemm.cu" in text
    assert "--seq 4112 or --fix mbs=16 lets fp8-blockwise run there" in text


def test_the_sequence_it_names_runs_fp8_and_a_runnable_one_has_no_note(capsys):
    for seq in ("4112", "4096"):
        code, out, _ = run([*JOB, "--seq", seq, "--json"], capsys)
        data = json.loads(out)
        assert code == 0 and "shape_refusal" not in data and data["results"][0]["knobs"]["precision"] == \
            "fp8-blockwise", seq


def test_a_pinned_bf16_search_has_no_note(capsys):
    """No FP8 knob set searched: nothing was refused."""
    code, out, _ = run([*JOB, "--seq", "4097", "--fix", "precision=bf16", "--json"], capsys)
    assert code == 0 and "shape_refusal" not in json.loads(out)
