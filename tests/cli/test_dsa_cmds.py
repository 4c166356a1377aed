"""estimate, plan and explain of a DeepSeek Sparse Attention model (GLM-5, tests/oracle/dsa_configs.py): they run,
say in JSON and text that the DSA kernel rates are calibrated on no published run, and run CP over all_gather alone
(Megatron-LM transformer_config.py: "DSAttention context parallelism currently supports cp_comm_type=allgather")."""

import json
import sys
from pathlib import Path

import pytest
from cli_run import run

sys.path.insert(0, str(Path(__file__).parents[1] / "oracle"))
from dsa_configs import GLM5  # noqa: E402

# Megatron Bridge's GLM-5 H100 recipe (perf_recipes/glm_moe_dsa/h100/glm5.py @067f987), at a shorter sequence
RECIPE = ["--gpu", "h100", "--gpus", "416", "--tp", "1", "--pp", "13", "--vpp", "2", "--cp", "8", "--ep", "32",
          "--seq", "32768", "--gbs", "520", "--precision", "bf16", "--recompute", "full", "--dispatcher", "deepep"]


@pytest.fixture
def glm5(tmp_path) -> str:
    path = tmp_path / "glm5.json"
    path.write_text(json.dumps(GLM5))
    return str(path)


def test_estimate_prices_glm5_and_says_the_rates_are_uncalibrated(glm5, capsys):
    code, out, _ = run(["estimate", glm5, *RECIPE, "--json"], capsys)
    t = json.loads(out)["time"]
    assert code == 0 and "not calibrated on any published run" in t["uncalibrated"]
    assert t["compute_by_class"]["indexer"] > 0 and t["exposed_collectives"]["cp"] > 0
    assert json.loads(out)["knobs"]["cp_comm_type"] == "all_gather"
    code, out, _ = run(["estimate", glm5, *RECIPE], capsys)
    assert code == 0 and "not calibrated on any published run" in " ".join(out.split())


def test_dsa_refuses_a_cp_exchange_it_cannot_run(glm5, capsys):
    for exchange in ("a2a", "p2p"):  # p2p given as a flag is refused too: only a config's absent field stands for it
        code, _, err = run(["estimate", glm5, *RECIPE, "--cp-comm-type", exchange], capsys)
        assert code == 2 and "runs context parallel over all_gather only" in err and err.count("\n") == 1
    code, out, _ = run(["estimate", glm5, *RECIPE, "--cp-comm-type", "all_gather", "--json"], capsys)
    assert code in (0, 1) and json.loads(out)["knobs"]["cp_comm_type"] == "all_gather"
    # a plan's pin too: the search had run all_gather under it, silently
    code, _, err = run(["plan", glm5, "--gpu", "h100", "--gpus", "416", "--seq", "8192", "--gbs", "416", "--fix",
                        "cp=2", "--fix", "cp_comm_type=p2p"], capsys)
    assert code == 2 and "--fix cp_comm_type=p2p" in err and "dsa.py" in err and err.count("\n") == 1


def test_plan_and_explain_of_glm5_run_and_carry_the_note(glm5, capsys, tmp_path):
    pins = ["--fix", "tp=1", "--fix", "pp=13", "--fix", "vpp=2", "--fix", "cp=8", "--fix", "ep=32"]
    code, out, _ = run(["plan", glm5, "--gpu", "h100", "--gpus", "416", "--seq", "32768", "--gbs", "520", *pins,
                        "--json"], capsys)
    data = json.loads(out)
    assert code == 0 and data["results"] and "uncalibrated" in data["results"][0]["time"]
    saved = tmp_path / "plan.json"
    saved.write_text(out)
    code, out, _ = run(["explain", "--plan", str(saved), "--json"], capsys)
    assert code == 0 and "not calibrated" in json.loads(out)["uncalibrated"]
    code, out, _ = run(["explain", "--plan", str(saved)], capsys)
    assert code == 0 and "not calibrated on any published run" in " ".join(out.split())
    code, out, _ = run(["plan", glm5, "--gpu", "h100", "--gpus", "416", "--seq", "32768", "--gbs", "520", *pins],
                       capsys)
    assert code == 0 and "not calibrated on any published run" in " ".join(out.split())
    # the emitted launch builds the sparse attention that was priced (Megatron-LM's own default is plain MLA with
    # the unfused kernels), and check reads it back without an error
    code, _, err = run(["emit", str(saved), "--out", str(tmp_path / "run")], capsys)
    args = (tmp_path / "run" / "megatron_lm_args.txt").read_text().splitlines()
    assert code == 0 and {"--experimental-attention-variant dsa", "--dsa-kernel-backend cudnn",
                          "--dsa-indexer-topk 2048", "--dsa-indexer-use-sparse-loss"} <= set(args), err
    assert any("priced on packed THD batches" in line for line in args if line.startswith("#"))  # CP 8
    code, out, _ = run(["check", str(tmp_path / "run" / "megatron_lm_args.txt"), "--gpu", "h100", "--gpus", "416"],
                       capsys)
    assert code == 0 and "0 error(s)" in out


def test_dsa_on_a_gpu_without_its_kernels_is_refused_in_one_line(glm5, capsys):
    """FlashMLA declines below SM90 (dsa_cudnn_kernels.py _flash_mla_head_padding) and Megatron-Core falls back to the
    unfused path's dense scores, which moetune does not price."""
    code, _, err = run(["estimate", glm5, "--gpu", "a100", "--gpus", "416", "--pp", "13", "--ep", "32"], capsys)
    assert code == 2 and "on ampere is not priced" in err and len(err.strip().splitlines()) == 1
    code, _, err = run(["plan", glm5, "--gpu", "a100", "--gpus", "416", "--gbs", "520"], capsys)
    assert code == 2 and "on ampere is not priced" in err


def test_plan_of_an_index_sharing_model_keeps_the_groups_whole(tmp_path, capsys):
    """GLM-5.2 (index_topk_freq 4, offset 3): a pipeline chunk that starts on a layer reusing an earlier stage's top-k
    is refused by Megatron-Core (layout/dsa_split.py). The plan had raised on the first such split it re-split; now it
    enumerates splits along the sharing groups (1, 1, then 4-layer groups), re-splits within them, and its pick runs
    under estimate (explain --plan re-validates it)."""
    from dsa_configs import GLM52_SHARING

    path = tmp_path / "glm52.json"
    path.write_text(json.dumps({**GLM5, **GLM52_SHARING}))
    code, out, err = run(["plan", str(path), "--gpu", "h100", "--gpus", "416", "--seq", "32768", "--gbs", "520",
                          "--json"], capsys)
    results = json.loads(out)["results"]
    assert code == 0 and results and all(r["layout"]["pp"] > 1 for r in results), err
    assert results[0]["pipeline"]["pipeline_layout"]
    saved = tmp_path / "plan.json"
    saved.write_text(out)
    code, _, err = run(["explain", "--plan", str(saved), "--json"], capsys)
    assert code == 0, err


def test_dsa_attention_is_left_out_of_cuda_graphs(glm5, capsys):
    """cudagraph.dsa_attention: the cuDNN sparse attention's backward syncs on torch.nonzero (Megatron-LM
    dsa_cudnn_kernels.py _run_sparse_attention_backward @ core_v0.19.0), which stream capture refuses. estimate's
    defaulted scope keeps the MoE router and preprocessing, explain's default mapping says why, a pinned graph over
    the attention is a rule error, and no plan row graphs the attention."""
    eager = [a for a in RECIPE if a not in ("--recompute", "full")]
    code, out, _ = run(["estimate", glm5, *eager, "--json"], capsys)
    data = json.loads(out)
    assert code == 0 and data["knobs"]["cuda_graph_scope"] == ["moe_router", "moe_preprocess"]
    code, out, _ = run(["explain", glm5, *eager, "--json"], capsys)
    mappings = json.loads(out)["default_mappings"]
    assert mappings["cuda_graph_scope"] == ["moe_router", "moe_preprocess"]
    assert "cudagraph.dsa_attention" in mappings["rules"]["cuda_graph_scope"]
    code, out, _ = run(["estimate", glm5, *eager, "--cuda-graph-scope", "attn,moe_router,moe_preprocess"], capsys)
    assert code == 1 and "cudagraph.dsa_attention" in out
    # at 8k some rows fit with graphs: over the router and preprocessing (the attention had been graphed with them)
    pins = ["--fix", "tp=1", "--fix", "pp=13", "--fix", "ep=32", "--top", "30"]
    code, out, _ = run(["plan", glm5, "--gpu", "h100", "--gpus", "416", "--seq", "8192", "--gbs", "520", *pins,
                        "--json"], capsys)
    scopes = {tuple(r["knobs"]["cuda_graph_scope"]) for r in json.loads(out)["results"]}
    assert code == 0 and scopes == {(), ("moe_router", "moe_preprocess")}
