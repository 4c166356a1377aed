"""plan as a user runs it: what its table and JSON say about the pick, the runners-up, the alternatives it
weighed and why nothing fits."""

import json

from cli_run import run

from moetune.cli.main import main


def test_plan_that_finds_nothing_says_how_far_off_and_exits_1(capsys):
    """Kimi-K2 (1T parameters) on 64 H100: no layout fits; the line names the least memory any candidate needs."""
    code, out, _ = run(["plan", "kimi-k2", "--gpu", "h100", "--gpus", "64", "--seq", "4096", "--gbs", "1024"], capsys)
    assert code == 1
    assert "nothing fits: the lightest candidate" in out and "GiB per GPU of 78" in out
    code, out, _ = run(["plan", "kimi-k2", "--gpu", "h100", "--gpus", "64", "--seq", "4096", "--gbs", "1024",
                        "--json"], capsys)
    data = json.loads(out)
    assert code == 1 and data["results"] == [] and data["nothing_fits"]["lightest_peak_gib"] > 78
    # 1T parameters over 64 GPUs: the weights and FP32 gradients alone outgrow an H100 at any sequence length
    assert data["nothing_fits"]["reason"].endswith("which no shorter sequence lowers; add GPUs")
    # pins that narrowed the search are the first remedy named (fuzz audit: the advice had never mentioned them)
    code, out, _ = run(["plan", "deepseek-v3", "--gpu", "h100", "--gpus", "64", "--gbs", "512", "--fix", "pp=1",
                        "--fix", "precision=bf16"], capsys)
    assert code == 1 and "loosen --fix pp=1 --fix precision=bf16, add GPUs" in out


def test_plan_notes_the_data_parallel_sizes_the_global_batch_rules_out(capsys):
    code, out, _ = run(["plan", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "64", "--seq", "4096", "--gbs", "1000",
                        "--top", "1"], capsys)
    assert code == 0
    assert "GBS 1000 is not a multiple of DP x MBS for DP 16, 32, 64" in out and "GBS 1024 would allow DP 64" in out
    code, out, _ = run(["plan", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "64", "--seq", "4096", "--gbs", "1000",
                        "--top", "1", "--json"], capsys)
    assert json.loads(out)["gbs_excluded_dp"] == [16, 32, 64] and json.loads(out)["gbs_allowing_widest_dp"] == 1024


def test_plan_says_what_the_optimizer_offload_alternative_changes_beside_the_offload(capsys):
    """The offload is added to the pick's search, not put in recompute's place: where the alternative still
    recomputes whole layers (GLM-4.5 at 128k on 136 H100), the note says so and names the layout it moves to; where
    it recomputes less (Qwen3-235B at 128k on 64 H100), it names the lighter recompute."""
    for job in (["glm-4.5", "--gpus", "136", "--gbs", "136"], ["qwen3-235b-a22b", "--gpus", "64", "--gbs", "64"]):
        args = ["plan", *job, "--gpu", "h100", "--seq", "131072", "--top", "1"]
        code, out, _ = run([*args, "--json"], capsys)
        data = json.loads(out)
        pick, alt = data["results"][0], data["offload_alternative"]
        assert code == 0 and pick["knobs"]["recompute"] == "full" and alt["knobs"]["optimizer_offload_fraction"] == 1
        code, out, _ = run(args, capsys)
        note = " ".join(out.split()).split("#1 recomputes whole layers; ")[1].split(". The seeds")[0]
        assert "offload instead" not in note and note.startswith("offloading the optimizer to the CPU frees"), note
        assert ("still recomputing whole layers" in note) == (alt["knobs"]["recompute"] == "full"), note
        assert ("instead of full" in note) == (alt["knobs"]["recompute"] != "full"), note
        moved = {k: alt["layout"][k] for k in ("tp", "cp", "pp", "ep")} != {k: pick["layout"][k] for k in
                                                                           ("tp", "cp", "pp", "ep")}
        assert (f"the layout TP{alt['layout']['tp']} CP{alt['layout']['cp']}" in note) == moved, note


def test_plan_names_the_dropless_factor_it_charged(capsys):
    args = ["plan", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--seq", "4096", "--gbs", "1024", "--top", "1",
            "--fix", "ep=16"]  # EP > 1: the busiest expert rank is charged (EP 1 x ETP picks are not, another test)
    code, out, _ = run(args, capsys)
    from moetune.layout.knobs import DROPLESS_IMBALANCE
    assert code == 0 and f"busiest of EP 16 expert ranks is charged {DROPLESS_IMBALANCE:.2f}x the mean" in \
        " ".join(out.split())
    code, out, _ = run([*args, "--routing", "force-balance"], capsys)
    assert code == 0 and "busiest of" not in out


def test_nothing_fits_says_when_memory_is_not_the_reason(capsys):
    """Kimi-K2 on 144 GB200 (one 72-rank NVLink domain) with HybridEP pinned at EP48: every EP group but the first
    straddles two domains, so no candidate is legal though the lightest fits in memory; the answer says so."""
    code, out, _ = run(["plan", "kimi-k2", "--gpu", "gb200", "--gpus", "144", "--seq", "4096", "--gbs", "1152",
                        "--fix", "ep=48", "--fix", "dispatcher=hybridep", "--top", "1"], capsys)
    assert code == 1 and "candidates fit in memory" in out and "NVLink domains" in out


def test_uneven_pipeline_split_is_printed_so_it_can_be_passed_again(capsys):
    """61 layers over PP4: the table and explain name the split (a layout row without it cannot be re-run)."""
    code, out, _ = run(["plan", "kimi-k2", "--gpu", "gb200", "--gpus", "256", "--seq", "4096", "--gbs", "4096",
                        "--top", "1", "--fix", "pp=4", "--fix", "vpp=1", "--json"], capsys)
    pick = json.loads(out)["results"][0]
    layout = pick["pipeline"]["pipeline_layout"]  # the ranks re-split by planner/pipeline_balance.py
    assert code == 0 and layout
    code, out, _ = run(["estimate", "kimi-k2", "--gpu", "gb200", "--gpus", "256", "--pp", "4", "--ep", "64",
                        "--tp", str(pick["layout"]["tp"]), "--cp", str(pick["layout"]["cp"]),
                        "--pipeline-layout", layout, "--json"], capsys)
    assert code == 0 and json.loads(out)["pipeline"]["pipeline_layout"] == layout
    code, out, _ = run(["estimate", "kimi-k2", "--gpu", "gb200", "--gpus", "256", "--pp", "4", "--ep", "64",
                        "--first-stage-layers", "13", "--last-stage-layers", "16"], capsys)
    assert code == 0
    assert "first stage 13 layers, last stage 16 layers" in " ".join(out.split())
    code, out, _ = run(["explain", "kimi-k2", "--gpu", "gb200", "--gpus", "256", "--pp", "4", "--vpp", "4",
                        "--ep", "64", "--pipeline-layout", "Et*4|(t*4|)*14tL"], capsys)
    assert code == 0 and "pipeline layout Et*4|(t*4|)*14tL" in out


def test_plan_searches_under_muon_where_pinned(capsys):
    """Kimi-K2's recipes train with dist_muon; plan could only search Adam (no --fix optimizer): its picks carry Muon,
    its state and its Newton-Schulz step, and emit it as dist_muon."""
    code, out, _ = run(["plan", "kimi-k2", "--gpu", "gb300", "--gpus", "256", "--seq", "4096", "--gbs", "4096",
                        "--top", "2", "--fix", "optimizer=muon", "--json"], capsys)
    results = json.loads(out)["results"]
    assert code == 0 and results and all(r["knobs"]["optimizer"] == "muon" for r in results)
    assert all(r["knobs"]["optimizer_offload_fraction"] == 0 for r in results)
    assert all(r["time"]["compute_by_class"]["optimizer_step"] > 0.02 for r in results)
    # the tables show the searched knobs only: the pinned optimizer is named under them, in plan and estimate
    code, out, _ = run(["plan", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--gbs", "512", "--top", "1",
                        "--fix", "optimizer=muon"], capsys)
    text = " ".join(out.split())
    assert code == 0 and "Optimizer (every row): Muon under the layer-wise distributed optimizer" in text
    code, out, _ = run(["estimate", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--ep", "8",
                        "--optimizer", "muon"], capsys)
    assert code == 0 and "Newton-Schulz GEMMs included" in " ".join(out.split())


def test_plan_layout_strings_stay_whole(capsys):
    """A layout string must stay whole to be passed again: DeepSeek-V3's re-split layout strings on 1,024 H100 are
    longer than any table column, so each is printed on a line of its own below the table, never cut nor folded."""
    code, out, _ = run(["plan", "deepseek-v3", "--gpu", "h100", "--gpus", "1024", "--seq", "4096", "--gbs", "8192"],
                       capsys)
    assert code == 0 and "…" not in out
    code, js, _ = run(["plan", "deepseek-v3", "--gpu", "h100", "--gpus", "1024", "--seq", "4096", "--gbs", "8192",
                       "--json"], capsys)
    lines = out.splitlines()
    assert all(any(f"pipeline layout {r['pipeline']['pipeline_layout']}" in line for line in lines)
               for r in json.loads(js)["results"])


def test_a_pick_check_says_what_its_own_fix_predicts(capsys):
    """Mixtral-8x7B on 64 H100: the pick runs EP2 x ETP4 and the rule scale.prefer_ep_over_etp asks for EP8 x ETP1;
    the search already weighed that, so the check carries the fix's prediction (slower here: EP 8 is charged more
    routing imbalance). Qwen3-Next-80B-A3B at 32k on 48 GB200 had served here, its CP 1 pick told CP 4: its shard
    is weighed by its attention share now (12 of 48 mixers, 8K attention tokens at CP 1), and the rule is silent."""
    assert main(["plan", "mixtral-8x7b", "--gpu", "h100", "--gpus", "64", "--gbs", "256", "--top", "1", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    pick = data["results"][0]
    check = next(c for c in data["pick_checks"] if c["rule"] == "scale.prefer_ep_over_etp")
    assert (pick["layout"]["ep"], pick["layout"]["etp"]) == (2, 4) and check["with_fix"]["fits"]
    assert check["with_fix"]["tokens_per_s_per_gpu"] < pick["time"]["tokens_per_s_per_gpu"]
    assert main(["plan", "qwen3-next-80b-a3b", "--gpu", "gb200", "--gpus", "48", "--seq", "32768", "--gbs", "96",
                 "--top", "1", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert "longctx.cp_sizing" not in {c["rule"] for c in data["pick_checks"]}


def test_the_largest_model_allowed_plans_without_overflow(shared_data, tmp_path, capsys):
    """Just under the parameter bound (8.2e14: 60,000 experts of width 12,000), the planner's batched numpy counts
    still fit in 64 bits: it finds nothing fits (exit 1), with no traceback."""
    data = json.loads((shared_data / "models" / "qwen3-235b-a22b.config.json").read_text())
    path = tmp_path / "edge.json"
    path.write_text(json.dumps({**data, "num_experts": 60_000, "moe_intermediate_size": 12_000}))
    code, out, err = run(["plan", str(path), "--gpu", "h100", "--gpus", "4096", "--gbs", "4096"], capsys)
    assert code == 1 and "nothing fits" in out + err and "Traceback" not in err


def test_plan_names_the_pick_s_own_warnings_and_tight_margins(capsys):
    """A pinned TP past the NVLink domain is searched as asked, and the pick's rule warning says what it costs;
    each result says whether it fits within the memory estimate's own error."""
    code, out, _ = run(["plan", "deepseek-v2-lite", "--gpu", "h100", "--gpus", "32", "--gbs", "256", "--fix", "tp=16",
                        "--top", "2", "--json"], capsys)
    data = json.loads(out)
    assert code == 0 and "scale.tp_outside_nvlink" in {c["rule"] for c in data["pick_checks"]}
    assert all(isinstance(r["tight"], bool) for r in data["results"])
    code, out, _ = run(["plan", "deepseek-v2-lite", "--gpu", "h100", "--gpus", "32", "--gbs", "256", "--fix", "tp=16",
                        "--top", "1"], capsys)
    assert "Check on #1 warning scale.tp_outside_nvlink" in " ".join(out.split())


def test_plan_says_when_its_tflops_count_attention_that_never_runs(capsys):
    """Llama 4 Scout at 64k on 96 GB200 (the stop's odd-layout check): the pick read 2,361 TFLOP/s/GPU with no word
    that Megatron's count includes the chunked attention the step never runs; estimate said so, plan now does too."""
    code, out, _ = run(["plan", "llama4-scout", "--gpu", "gb200", "--gpus", "96", "--seq", "65536", "--gbs", "96",
                        "--top", "1"], capsys)
    assert code == 0 and "attends within 8,192-token chunks" in " ".join(out.split())


def test_plan_rows_carry_what_estimate_json_has_and_each_is_re_split(capsys):
    """The plan audit: results lacked estimate's checks and track record, and a runner-up kept its even split (5,401
    tokens/s/GPU where `--fix recompute=selective` of the same layout and knobs gives 5,514)."""
    job = ["nemotron3-nano-30b-a3b", "--gpu", "h100", "--gpus", "8", "--seq", "4096", "--gbs", "16"]
    code, out, _ = run(["plan", *job, "--top", "5", "--json"], capsys)
    rows = json.loads(out)["results"]
    code, est, _ = run(["estimate", *job[:-2], "--ep", "8", "--json"], capsys)
    assert set(json.loads(est)) - {"defaulted"} <= set(rows[1])
    for row in rows[1:]:
        if row["layout"]["pp"] > 1 and row["knobs"]["recompute"] == "selective":
            pins = ["--fix", "recompute=selective", "--fix", f"tp={row['layout']['tp']}",
                    "--fix", f"cp={row['layout']['cp']}", "--fix", f"pp={row['layout']['pp']}",
                    "--fix", f"ep={row['layout']['ep']}", "--fix", f"mbs={row['workload']['micro_batch_size']}"]
            code, pinned, _ = run(["plan", *job, "--top", "1", "--json", *pins], capsys)
            best = json.loads(pinned)["results"][0]["time"]["tokens_per_s_per_gpu"]
            assert row["time"]["tokens_per_s_per_gpu"] >= best * 0.995


def test_plan_names_a_faster_cp_layout_its_short_context_weight_ranked_off(capsys):
    """Mixtral-8x7B on 16 H100 at 8k: a CP 2 layout predicts +1% over the pick, but below 16k CP ranks as 5% slower;
    the note had been printed only where a CP row was already on the list (plan audit)."""
    code, out, _ = run(["plan", "mixtral-8x7b", "--gpu", "h100", "--gpus", "16", "--seq", "8192", "--gbs", "64",
                        "--top", "3", "--json"], capsys)
    data = json.loads(out)
    alt = data["short_cp_alternative"]
    assert alt["layout"]["cp"] > 1 and alt["predicted_gain"] > 0.01
    assert all(r["layout"]["cp"] == 1 for r in data["results"])
    code, out, _ = run(["plan", "mixtral-8x7b", "--gpu", "h100", "--gpus", "16", "--seq", "8192", "--gbs", "64",
                        "--top", "3"], capsys)
    assert f"--fix cp={alt['layout']['cp']}` lists it" in " ".join(out.split())


def test_a_check_on_the_pick_keeps_its_brackets(capsys, monkeypatch):
    """plan's 'Check on #1' line had handed the rule's message to rich as markup, which drops '[a2a, p2p]'."""
    import moetune.cli.plan_cmd as plan_cmd

    check = {"severity": "error", "rule": "cp.hcp_sizes", "message": "needs sizes [a2a, p2p] whose product", "fix": {}}
    monkeypatch.setattr(plan_cmd, "pick_checks", lambda pick, found=None, row=None: [check])
    code, out, _ = run(["plan", "olmoe-1b-7b", "--gpu", "h100", "--gpus", "8", "--gbs", "64", "--top", "1"],
                       capsys)
    assert code == 0 and "cp.hcp_sizes: needs sizes [a2a, p2p] whose product" in " ".join(out.split())


def test_a_headroom_that_leaves_little_memory_says_nothing_fits(capsys):
    """--headroom 75 on an 80 GB H100 leaves 3 GiB to plan in: nothing fits, said as such (a floor meant for cluster
    files' units had refused the budget as 'check its unit')."""
    code, _, err = run(["plan", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "8", "--gbs", "64", "--headroom", "75"],
                       capsys)
    assert code == 1 and "check its unit" not in err


def test_plan_says_which_preference_ranked_a_faster_candidate_below_its_pick(capsys):
    """Qwen3-30B-A3B on 64 H100 at 8k picks HybridEP though DeepEP is the H100 default (seeds/000): the DeepEP row
    predicts 0.6% more but leaves 0.5 GiB of 78 free, under the 3% the seeds' order keeps first. Table and JSON say
    so; the note names the row and the preference (planner/ranking.py preference)."""
    job = ["plan", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "64", "--seq", "8192", "--gbs", "512"]
    code, out, _ = run([*job, "--json"], capsys)
    data = json.loads(out)
    tie, rows = data["near_tie"], data["results"]
    assert code == 0 and tie["decided_by"] == "memory_margin" and tie["row"] == 2
    assert tie["knobs"]["dispatcher"] == "deepep" and rows[0]["knobs"]["dispatcher"] == "hybridep"
    assert tie["time"]["tokens_per_s_per_gpu"] == rows[1]["time"]["tokens_per_s_per_gpu"] \
        > rows[0]["time"]["tokens_per_s_per_gpu"]
    assert rows[1]["tight"] and not rows[0]["tight"]
    code, out, _ = run(job, capsys)
    text = " ".join(out.split())
    gain = rows[1]["time"]["tokens_per_s_per_gpu"] / rows[0]["time"]["tokens_per_s_per_gpu"] - 1
    free = 78 - rows[1]["memory"]["peak_bytes"] / 2**30  # data/hardware.toml [h100] memory_gib
    assert f"note: #2 (deepep) predicts {gain:+.1%} over #1 but leaves {free:.1f} GiB free, under 3% of the GPU's 78 " \
        "GiB" in text
    # the reference behind the note is the JSON's (`source`), not the terminal's
    assert "the seeds rank what fits reliably first" in text and "seeds/001" not in text and "ranking.py" not in text
    assert tie["source"] == "seeds/001; planner/ranking.py preference" and tie["why"] in text
    code, out, _ = run([*job, "--top", "1"], capsys)  # off the list: named by its layout
    assert (f"note: TP1 CP1 PP1 EP16 ETP1 (DP64 EDP4) mbs 1 deepep, recompute selective (moe_act), predicts "
            f"{gain:+.1%}") in " ".join(out.split())


def test_plan_notes_no_near_tie_where_its_pick_is_the_fastest(capsys):
    code, out, _ = run(["plan", "moonlight-16b-a3b", "--gpu", "h100", "--gpus", "32", "--gbs", "256", "--json"],
                       capsys)
    assert code == 0 and "near_tie" not in json.loads(out)


def test_every_preference_has_words():
    from moetune.cli.plan_notes import NEAR_TIE_WORDS
    from moetune.planner.ranking import PREFERENCES

    assert set(NEAR_TIE_WORDS) == set(PREFERENCES)


def test_plan_charges_a_measured_token_imbalance_and_its_saved_plan_keeps_it(tmp_path, capsys):
    """plan --token-imbalance (the new-user audit: plan had no way to take a measured factor, and `explain` told users
    to pass one): every row is charged it, the JSON records it, and explain --plan of the saved plan weighs it."""
    args = ["plan", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--gbs", "1024", "--top", "2"]
    code, out, _ = run([*args, "--token-imbalance", "1.1", "--json"], capsys)
    data = json.loads(out)
    assert code == 0 and data["token_imbalance"] == 1.1
    assert all(r["knobs"]["token_imbalance_set"] == 1.1 for r in data["results"])
    pick = data["results"][0]
    assert pick["layout"]["ep"] > 1 and pick["knobs"]["token_imbalance"] == 1.1
    code, out, _ = run([*args, "--json"], capsys)
    assert code == 0 and json.loads(out)["token_imbalance"] is None
    code, out, _ = run([*args, "--token-imbalance", "1.1"], capsys)
    assert code == 0 and "charged 1.10x the mean (--token-imbalance)" in " ".join(out.split())
    saved = tmp_path / "plan.json"
    saved.write_text(json.dumps(data))
    code, out, _ = run(["explain", "--plan", str(saved)], capsys)
    assert code == 0 and "charged 1.10x the mean (--token-imbalance)" in " ".join(out.split())


def test_an_ep1_pick_says_no_published_run_measures_it_in_plan_explain_and_report(tmp_path, capsys):
    """The new-user audit: an EP 1 x ETP 1 pick printed no Routing note while every EP > 1 candidate was charged the
    default factor and no published run has EP 1. Qwen3-30B-A3B on 8 GB200 picks EP 1 (tests/planner/test_pins.py)."""
    args = ["plan", "qwen3-30b-a3b", "--gpu", "gb200", "--gpus", "8", "--gbs", "64", "--top", "2"]
    code, out, _ = run(args, capsys)
    said = "no published run measures EP 1, so the step model is unchecked there"
    assert code == 0 and "Routing: dropless: #1 runs EP 1" in out and said in " ".join(out.split())
    assert "no published run has EP 1 (they run EP 8 to 64)" in " ".join(out.split())  # the Track record's words
    code, out, _ = run([*args, "--json"], capsys)
    data = json.loads(out)
    assert data["results"][0]["layout"]["ep"] == 1 and data["ep1_pick"]["ep_searched"] == [2, 4, 8]
    saved = tmp_path / "plan.json"
    saved.write_text(out)
    code, out, _ = run(["explain", "--plan", str(saved)], capsys)
    assert code == 0 and said in " ".join(out.split())
    code, out, _ = run(["explain", "--plan", str(saved), "--rank", "2", "--json"], capsys)
    assert code == 0 and "ep1_pick" not in json.loads(out)  # the note is the pick's
    code, _, _ = run(["report", str(saved), "--out", str(tmp_path / "plan.html")], capsys)
    assert code == 0 and said in (tmp_path / "plan.html").read_text()
