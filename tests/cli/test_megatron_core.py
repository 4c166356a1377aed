"""check and emit --megatron-core X.Y: what the release lacks is an error (check) or refused (emit); without the option
nothing changes. The release facts are megatron_releases.csv's (tests/configio/test_releases.py cites them)."""

import json
from pathlib import Path

import pytest
from cli_run import run

FIXTURES = Path(__file__).resolve().parents[1] / "configio" / "fixtures"
# Megatron-LM main examples/mamba/train.sh: its layout flag is --hybrid-layer-pattern (from core_v0.17.0 on)
MAMBA = str(FIXTURES / "mlm_mamba_train.sh")
# Megatron-LM examples/mixtral/train_mixtral_8x7b_distributed.sh: only flags core_v0.16.0 has
MIXTRAL = str(FIXTURES / "mlm_train_mixtral_8x7b_distributed.sh")


def _not_in_release(args, capsys):
    code, out, err = run(["check", *args, "--json"], capsys)
    found = [f for f in json.loads(out)["findings"] if f["rule"] == "check.not_in_release"]
    return code, found, err


def test_a_flag_from_0_17_is_an_error_for_0_16_not_for_0_17(capsys):
    code, found, _ = _not_in_release([MAMBA, "--megatron-core", "0.16"], capsys)
    assert code == 1 and [f["severity"] for f in found] == ["error"]
    message = found[0]["message"]
    assert "--hybrid-layer-pattern is not in Megatron-Core 0.16" in message and "from 0.17 on" in message
    # the field has the older spelling 0.16 takes (Megatron-LM main still reads it for the same field)
    assert "write it as --hybrid-override-pattern, which that release has" in message
    for release in ("0.17", "main"):
        assert _not_in_release([MAMBA, "--megatron-core", release], capsys)[1] == []


def test_without_the_option_nothing_changes(capsys):
    plain = run(["check", MAMBA, "--json"], capsys)
    assert plain == run(["check", MAMBA, "--json", "--megatron-core", "main"], capsys)
    assert "not_in_release" not in plain[1]


def test_a_launch_with_only_old_names_passes(capsys):
    assert _not_in_release([MIXTRAL, "--megatron-core", "0.16"], capsys)[1] == []


def test_a_bridge_field_the_release_lacks(capsys):
    """model.moe_paged_stash: a TransformerConfig field from core_v0.18.0 on."""
    code, found, _ = _not_in_release(["--set", "model.num_layers=4", "--set", "model.moe_paged_stash=true",
                                      "--megatron-core", "0.17"], capsys)
    assert len(found) == 1 and "model.moe_paged_stash is not a TransformerConfig field in Megatron-Core 0.17" in \
        found[0]["message"]
    assert _not_in_release(["--set", "model.num_layers=4", "--set", "model.moe_paged_stash=true",
                            "--megatron-core", "0.18"], capsys)[1] == []


def test_a_bridge_field_applied_onto_a_field_the_release_lacks(capsys):
    """comm_overlap.overlap_moe_expert_parallel_comm is Bridge's own, applied onto the model's
    overlap_moe_expert_parallel_comm, which core_v0.14.0 brought: on 0.13 the run would go without it."""
    args = ["--set", "model.num_layers=4", "--set", "comm_overlap.overlap_moe_expert_parallel_comm=true"]
    code, found, _ = _not_in_release([*args, "--megatron-core", "0.13"], capsys)
    assert len(found) == 1 and "onto model.overlap_moe_expert_parallel_comm, which Megatron-Core 0.13 lacks " \
        "(Megatron-Core has it from 0.14 on)" in found[0]["message"] and "upgrade to Megatron-Core 0.14" in \
        found[0]["message"]
    assert _not_in_release([*args, "--megatron-core", "0.14"], capsys)[1] == []


@pytest.mark.parametrize("command", ["check", "emit"])
def test_an_unknown_release_is_one_line_exit_2(command, capsys):
    code, _, err = run([command, MIXTRAL, "--gpus", "64", "--megatron-core", "0.12"], capsys)
    assert code == 2 and err.count("\n") == 1 and "use one of 0.13, 0.13.1, 0.14," in err


def test_emit_spells_the_hybrid_pattern_as_the_release_and_refuses_a_split_one(capsys):
    """Before core_v0.17.0 a hybrid's pattern is --hybrid-override-pattern, read by pretrain_mamba.py
    (pretrain_hybrid.py came in core_v0.18.0), and takes no '|' stage separators (mamba_hybrid_layer_allocation.py:82
    @core_v0.16.0 refuses any symbol but the layers'): emit for 0.16 writes that spelling and script for an unsplit
    pattern (it had refused the field), and refuses a split one in one line."""
    code, out, _ = run(["emit", MAMBA, "--gpus", "8", "--megatron-core", "0.16", "--allow-errors", "--set",
                        "model.is_hybrid_model=true", "--json"], capsys)
    files = json.loads(out)["files"]
    assert code == 0 and "--hybrid-override-pattern" in files["megatron_lm_args.txt"]
    assert "--hybrid-layer-pattern" not in files["megatron_lm_args.txt"] and "pretrain_mamba.py" in files["torchrun.sh"]
    split = ["emit", MAMBA, "--gpus", "8", "--allow-errors", "--set", "model.pipeline_model_parallel_size=2",
             "--set", "model.hybrid_layer_pattern=M-M-M--M-*M-M-M-M--*M-M-M-|M-*M--M-M-M-*M-M--M-M-"]
    assert run(split, capsys)[0] == 0  # main takes the split
    code, out, err = run([*split, "--megatron-core", "0.16"], capsys)
    assert code == 2 and not out and err.count("\n") == 1 and "splits the pipeline with '|'" in err


def test_emit_leaves_out_a_lacking_field_at_its_default_and_spells_flags_as_the_release(capsys):
    args = ["emit", "--set", "model.num_layers=4", "--set", "model.moe_paged_stash=false", "--set",
            "model.cuda_graph_scope=[attn]", "--gpus", "8", "--gpu", "h100", "--json", "--allow-errors"]
    code, out, _ = run(args, capsys)
    files = json.loads(out)["files"]
    assert code == 0 and "model.moe_paged_stash=false" in files["overrides.txt"]
    assert "--cuda-graph-modules attn" in files["megatron_lm_args.txt"]
    code, out, _ = run([*args, "--megatron-core", "0.17"], capsys)
    files = json.loads(out)["files"]
    assert code == 0 and "moe_paged_stash" not in files["overrides.txt"] + files["megatron_lm_args.txt"]
    assert "--cuda-graph-scope attn" in files["megatron_lm_args.txt"]  # --cuda-graph-modules: from core_v0.18.0
    args[args.index("model.moe_paged_stash=false")] = "model.moe_paged_stash=true"
    code, _, err = run([*args, "--megatron-core", "0.17"], capsys)
    assert code == 2 and "model.moe_paged_stash=True" in err


def test_a_saved_result_emitted_for_0_16_checks_clean_there(tmp_path, capsys):
    """A saved estimate writes the fields it sets over a recipe, some newer than 0.16 at their defaults
    (model.moe_paged_stash=false: a TransformerConfig field from core_v0.18.0 on): check says so, as info, and that
    emit leaves them out; what emit writes for 0.16 then checks clean under 0.16, the Megatron-LM arguments and the
    overrides."""
    code, estimate, _ = run(["estimate", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--ep", "16", "--json"],
                            capsys)
    assert code == 0
    saved = tmp_path / "e.json"
    saved.write_text(estimate)
    code, found, _ = _not_in_release([str(saved), "--megatron-core", "0.16"], capsys)
    paged = [f for f in found if f["message"].startswith("model.moe_paged_stash ")]
    # info, not error: a saved result runs only through emit, which leaves such a field out (a YAML writing it would
    # stop Bridge: test_a_config_writing_a_newer_field_at_its_default_is_still_an_error)
    assert code == 0 and paged and "leaves out" in paged[0]["message"] and paged[0]["severity"] == "info"
    out = tmp_path / "run"
    code, said, _ = run(["emit", str(saved), "--megatron-core", "0.16", "--out", str(out)], capsys)
    assert code == 0 and "--megatron-core 0.16" in said
    assert "moe_paged_stash" not in (out / "overrides.txt").read_text()
    for inputs in ([out / "overrides.txt"], [out / "env.sh", out / "megatron_lm_args.txt"]):
        assert _not_in_release([*map(str, inputs), "--megatron-core", "0.16"], capsys)[1] == []


def test_a_config_writing_a_newer_field_at_its_default_is_still_an_error(tmp_path, capsys):
    # Bridge hands every field a YAML writes to the release's TransformerConfig, default or not: 0.16 has no
    # moe_paged_stash (a field from core_v0.18.0 on), so the job stops on it whatever its value
    config = tmp_path / "c.yaml"
    config.write_text("model:\n  moe_paged_stash: false\n")
    code, found, _ = _not_in_release([str(config), "--megatron-core", "0.16"], capsys)
    assert code == 1 and [f["severity"] for f in found] == ["error"] and "leaves out" in found[0]["message"]


def test_before_0_16_the_flex_dispatcher_s_deepep_is_moe_enable_deepep(tmp_path, capsys):
    """Megatron-Core 0.13-0.15's flex dispatcher runs DeepEP alone and asserts moe_enable_deepep (token_dispatcher.py
    MoEFlexTokenDispatcher @ core_v0.15.0); moe_flex_dispatcher_backend came in 0.16. emit for 0.15 writes the flag
    (it had written `--moe-token-dispatcher-type flex` alone, which stops at that assert), a launch without it is an
    error there and not on 0.16, and HybridEP, which 0.15 does not have, is refused in one line."""
    def saved(dispatcher):
        # attention graphs alone: 0.15 takes one scope string (the router's graph scopes came in 0.16)
        code, estimate, _ = run(["estimate", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--ep", "16",
                                 "--dispatcher", dispatcher, "--cuda-graph-scope", "attn", "--json"], capsys)
        path = tmp_path / f"{dispatcher}.json"
        path.write_text(estimate)
        return str(path)

    out = tmp_path / "run"
    code, _, _ = run(["emit", saved("deepep"), "--megatron-core", "0.15", "--out", str(out)], capsys)
    lines = (out / "megatron_lm_args.txt").read_text().splitlines()
    assert code == 0 and "--moe-enable-deepep" in lines and not [w for w in lines if "flex-dispatcher-backend" in w]
    launch = [str(out / "env.sh"), str(out / "megatron_lm_args.txt")]
    assert not [f for f in _findings([*launch, "--megatron-core", "0.15"], capsys) if f["severity"] == "error"]
    (out / "megatron_lm_args.txt").write_text("\n".join(w for w in lines if w != "--moe-enable-deepep") + "\n")
    found = [f for f in _findings([*launch, "--megatron-core", "0.15"], capsys) if f["severity"] == "error"]
    assert [(f["rule"], f["fix"]) for f in found] == [("check.needs_legacy_switch", {"model.moe_enable_deepep": True})]
    assert "--moe-enable-deepep" in found[0]["message"] and "from 0.16 on" in found[0]["message"]
    assert "check.needs_legacy_switch" not in {f["rule"] for f in _findings([*launch, "--megatron-core", "0.16"],
                                                                            capsys)}
    code, _, err = run(["emit", saved("hybridep"), "--megatron-core", "0.15", "--out", str(tmp_path / "h")], capsys)
    assert code == 2 and err.count("\n") == 1 and "model.moe_flex_dispatcher_backend='hybridep'" in err
    assert "Megatron-Core has it from 0.16 on" in err


def _findings(args, capsys):
    code, out, _ = run(["check", *args, "--gpu", "h100", "--gpus", "16", "--json"], capsys)
    return json.loads(out)["findings"]


def test_before_0_15_graphs_are_written_by_their_legacy_switch(tmp_path, capsys):
    """core_v0.14.0 has no cuda_graph_impl: Transformer Engine's graphs are external_cuda_graph with the scope 'attn'
    (transformer_config.py), and Megatron-LM's --external-cuda-graph flag; a plan for it keeps attention's graphs."""
    code, out, err = run(["plan", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--gbs", "512", "--top", "1",
                          "--megatron-core", "0.14", "--json"], capsys)
    assert code == 0, err
    assert json.loads(out)["results"][0]["knobs"]["cuda_graph_scope"] == ["attn"]
    (tmp_path / "plan.json").write_text(out)
    code, _, err = run(["emit", str(tmp_path / "plan.json"), "--out", str(tmp_path / "run")], capsys)
    assert code == 0, err
    args = (tmp_path / "run" / "megatron_lm_args.txt").read_text().splitlines()
    assert "--external-cuda-graph" in args and "--cuda-graph-scope attn" in args
    assert not any(a.startswith("--cuda-graph-impl") for a in args)
    code, _, err = run(["check", str(tmp_path / "run" / "env.sh"), str(tmp_path / "run" / "megatron_lm_args.txt"),
                        "--gpu", "h100", "--gpus", "16", "--megatron-core", "0.14"], capsys)
    assert code == 0, err


def test_a_graph_implementation_before_0_15_is_advised_by_its_switch(tmp_path, capsys):
    """core_v0.14.0 lacks cuda_graph_impl: the finding names the switch that release takes it by (data/
    legacy_switches.csv), and the switch left off is its own error with the fix; graphs off (none) is no advice."""
    config = tmp_path / "g.yaml"
    config.write_text("model:\n  cuda_graph_impl: transformer_engine\n  cuda_graph_scope: attn\n")
    found = {f["rule"]: f for f in _findings([str(config), "--megatron-core", "0.14"], capsys)}
    advice = found["check.not_in_release"]["message"]
    assert "transformer_engine by model.external_cuda_graph" in advice and "none by" not in advice
    assert found["check.needs_legacy_switch"]["fix"] == {"model.external_cuda_graph": True}
    assert "check.needs_legacy_switch" not in {f["rule"] for f in _findings([str(config), "--megatron-core", "0.15"],
                                                                            capsys)}



@pytest.mark.parametrize(("release", "refused"), [("0.14", True), ("0.15", True), ("0.15.3", True), ("0.16", False)])
def test_a_list_of_graph_scopes_before_0_16_is_an_error(release, refused, tmp_path, capsys):
    """Megatron Bridge's list scope: core_v0.14.0-v0.15.3 type cuda_graph_scope as one string (transformer_config.py
    core_v0.15.0:646 `cuda_graph_scope: str`), a list from core_v0.16.0 (2b343d739f, PR #1920). The fix keeps one
    scope, attn (Transformer Engine's graphs take 'full' or 'attn' there: cuda_graphs.py core_v0.15.0:1357)."""
    config = tmp_path / "g.yaml"
    config.write_text("model:\n  cuda_graph_impl: transformer_engine\n  cuda_graph_scope: [attn, moe_router]\n")
    findings = _findings([str(config), "--megatron-core", release], capsys)
    found = {f["rule"]: f for f in findings}
    rule = found.get("cudagraph.scope_list_needs_mcore_016")
    assert (rule is not None) == refused
    if refused:  # the fix is the one string that release takes (a one-item list is refused there too)
        assert rule["severity"] == "error" and rule["fix"] == {"model.cuda_graph_scope": "attn"}
        # moe_router's lack is the rule's to say (its covers); 0.14's lack of cuda_graph_impl is still said
        assert [f for f in findings if f["rule"] == "check.not_in_release" and "cuda_graph_scope" in f["message"]] \
            == []
        assert "2 scopes (attn and moe_router)" in rule["message"] and "upgrade to Megatron-Core 0.16" in \
            rule["message"]
        assert "transformer_config.py core_v0.15.0:646" in rule["source"]

MOE_ARGS = ("--num-layers 4 --hidden-size 1024 --num-attention-heads 8 --num-experts 8 --expert-model-parallel-size 8 "
            "--moe-grouped-gemm --bf16 --seq-length 4096 --max-position-embeddings 4096 --micro-batch-size 1 "
            "--global-batch-size 8")


def _rules(args, capsys) -> dict:
    code, out, err = run(["check", *args, "--json"], capsys)
    return {f["rule"]: f["severity"] for f in json.loads(out)["findings"]}


@pytest.mark.parametrize(("release", "refused"), [(["--megatron-core", "0.16"], False),
                                                  (["--megatron-core", "0.18"], False),
                                                  (["--megatron-core", "0.18.2"], True),
                                                  (["--megatron-bridge", "0.5.1"], True),  # pins 0.18.2
                                                  ([], True)])  # none named: the newest
def test_a_check_megatron_lm_added_later_holds_from_its_release_on(release, refused, capsys):
    """Megatron-LM's arguments refuse TE's fused cross entropy from core_v0.18.2 on (arguments.py :1528), not in
    0.13-0.18.0, whose own functional-test configs set it: it had been an error under every release."""
    args = MOE_ARGS + " --cross-entropy-loss-fusion --cross-entropy-fusion-impl te"
    assert ("compute.te_cross_entropy" in _rules(["--mlm-args", args, *release], capsys)) == refused


def test_emit_for_a_core_release_names_the_bridge_fields_its_bridge_lacks(capsys, tmp_path):
    """emit --megatron-core 0.16 writes Megatron-LM arguments of 0.16 and Bridge overrides in current names, two of
    which Bridge 0.3.1 (the newest on 0.16) lacks, and its struct-mode overrides abort on: emit says so."""
    code, out, err = run(["plan", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--gbs", "1024", "--top", "1",
                          "--megatron-core", "0.16", "--json"], capsys)
    assert code == 0, err
    plan = tmp_path / "p.json"
    plan.write_text(out)
    code, out, err = run(["emit", str(plan), "--out", str(tmp_path / "e")], capsys)
    said = " ".join(out.split())
    assert code == 0 and "dataset.seq_length" in said and "Megatron Bridge 0.3.1, the newest on Megatron-Core 0.16" \
        in said and "`emit --megatron-bridge 0.3.1`" in said


def test_the_bridge_on_each_core_release_is_its_pins_newest():
    """bridge_pins.csv: v0.3.0 pins Megatron-Core 0.16.0 and v0.3.1 0.16.1, v0.4.2 0.17.1, v0.6.0 0.19.0; none pins
    0.13-0.15 or main."""
    from moetune.cli.release_check import bridge_on_core
    got = {r: bridge_on_core(r) for r in ("0.15", "0.16", "0.16.1", "0.17", "0.19", "main")}
    assert got == {"0.15": None, "0.16": "0.3.1", "0.16.1": "0.3.1", "0.17": "0.4.2", "0.19": "0.6.0", "main": None}
