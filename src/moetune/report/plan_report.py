"""A plan (or one estimate) as an HTML page: the candidates, their step time by wall, the pick's memory by pipeline
stage, the seeds' Fit / Scale / Profile / Retune for the pick, and, with a sweep, what the cluster measured.

Everything shown is read from moetune's own JSON (the plan, explain's answer, sweep ingest's), so the page says what
the commands say, laid out for a reader who shares it.
"""

from __future__ import annotations

from moetune.planner import fp8_evidence, nvfp4_evidence
from moetune.planner.ep1_note import ep1_text
from moetune.planner.from_json import saved_results
from moetune.planner.plan_notes import saved_notes
from moetune.planner.result_text import dispatcher_label, knobs_label, layout_label, recompute_label
from moetune.planner.track_record import track_record_text
from moetune.report.html import page, pairs, paragraph, section, table
from moetune.report.svg import stacked_bars
from moetune.units import GIB

WALLS = ("compute", "communication", "bubble", "host")
# the pick's memory line items, grouped for the chart (the table beside it keeps every item); an FP8 recipe's
# quantized weights (FP8 parameters, or the quantized copy beside BF16 ones) and FSDP2's gathered ones are weights
# too (walls/model_state.py): an MXFP8 stage had charted "weights: 0 GiB" and its 17 GiB of FP8 weights as overheads
WEIGHTS = ("weights", "fp8_weights", "fp8_weight_cache", "fsdp2_gathered_weights")
MEMORY_GROUPS = (("weights", WEIGHTS), ("gradients", ("main_grads",)), ("optimizer", ("optimizer_states",)),
                 ("logits and loss", ("logits_and_loss",)))


def _candidates(results: list[dict]) -> str:
    rows = [[i, layout_label(r), r["workload"]["micro_batch_size"], r["knobs"]["precision"], dispatcher_label(r),
             recompute_label(r), ",".join(r["knobs"]["cuda_graph_scope"]) or "-",
             "on" if r["knobs"]["ep_overlap"] else "off", r["time"]["dominant_wall"],
             f"{r['time']['tokens_per_s_per_gpu']:,.0f}", f"{r['time']['tflops_per_gpu']:.0f}",
             f"{100 * r['time']['mfu']:.1f}%", f"{r['memory']['peak_bytes'] / GIB:.1f}"]
            for i, r in enumerate(results, 1)]
    return table(["#", "layout", "mbs", "precision", "dispatcher", "recompute", "CUDA graphs", "EP overlap",
                  "dominant wall", "tok/s/GPU", "TFLOP/s/GPU", "MFU", "peak GiB"], rows, numeric_from=9)


def _walls(results: list[dict]) -> str:
    return stacked_bars([(f"#{i} {layout_label(r)}", [(w, r["time"]["walls"][w]) for w in WALLS])
                         for i, r in enumerate(results, 1)], "s")


def memory_groups(items: dict[str, float]) -> list[tuple[str, float]]:
    """A stage's line items (bytes) in the chart's groups: activations (act_*) and the rest (buffers, context,
    fragmentation) besides MEMORY_GROUPS; GiB."""
    grouped = {name: sum(items.get(k, 0.0) for k in keys) for name, keys in MEMORY_GROUPS}
    named = {k for _, keys in MEMORY_GROUPS for k in keys} | {"total"}
    grouped["activations"] = sum(v for k, v in items.items() if k.startswith("act_"))
    grouped["buffers and overheads"] = sum(v for k, v in items.items() if k not in named and not k.startswith("act_"))
    return [(name, value / GIB) for name, value in grouped.items()]


def _memory(pick: dict) -> str:
    capacity = pick["memory"]["capacity_bytes"] / GIB
    chart = stacked_bars([(f"stage {s['stage']}", memory_groups(s["bytes"])) for s in pick["stages"]], "GiB",
                         limit=capacity, limit_label=f"usable memory {capacity:.1f} GiB")
    names = list(dict.fromkeys(k for s in pick["stages"] for k in s["bytes"] if k != "total"))
    rows = [[name] + [f"{s['bytes'].get(name, 0) / GIB:.2f}" for s in pick["stages"]] for name in names]
    rows.append(["total"] + [f"{s['bytes']['total'] / GIB:.2f}" for s in pick["stages"]])
    return chart + table(["item (GiB)"] + [f"stage {s['stage']}" for s in pick["stages"]], rows, numeric_from=1)


def _explain(answer: dict) -> str:
    fit, profile = answer["fit"], answer["profile"]
    parts = [paragraph(f"Fit: peak {fit['peak_gib']:.1f} of {fit['capacity_gib']:.1f} GiB on stage "
                       f"{fit['worst_stage']}"
                       + (f" (the GPU less the plan's --headroom {fit['headroom_gib']:g})" if fit.get("headroom_gib")
                          else "")
                       + f": {'fits' if fit['fits'] else 'does NOT fit'}; largest: "
                       + ", ".join(f"{k} {v:.1f} GiB" for k, v in fit["largest_items_gib"].items())),
             pairs([("attention mesh", answer["scale"]["attention_mesh"]), ("MoE mesh", answer["scale"]["moe_mesh"]),
                    ("pipeline split", str(answer["scale"]["pipeline_split"]))]
                   + [("note", n) for n in answer["scale"]["notes"]]),
             paragraph(f"Profile: {profile['dominant_wall']} dominates ({profile['why']}); walls: "
                       + ", ".join(f"{w} {100 * s:.1f}%" for w, s in profile["wall_shares"].items()))]
    moves = [[m["rule"], " ".join(f"{k}={v}" for k, v in m["change"].items()), f"{100 * m['predicted_gain']:+.1f}%",
              f"{m['new_tokens_per_s_per_gpu']:,.0f}", m["why"], m["source"]] for m in answer["retune"]]
    parts.append(table(["retune", "change", "gain", "tok/s/GPU", "why", "source"], moves) if moves else
                 paragraph("Retune: no move the seeds name is predicted faster and fits."))
    maps = answer["default_mappings"]
    parts.append(pairs([("platform", maps["platform"]), ("dispatcher", maps["dispatcher"]),
                        ("FP8 recipe", maps["fp8_recipe"]), ("CUDA graph scope", ",".join(maps["cuda_graph_scope"])),
                        ("from", maps["source"])]))
    if answer["checks"]:
        parts.append(table(["severity", "rule", "message"],
                           [[c["severity"], c["rule"], c["message"]] for c in answer["checks"]]))
    return "".join(parts)


def _sweep(ingest: dict) -> str:
    rows = [[c["folder"], c["status"], f"{c['predicted_tokens_per_s_per_gpu']:,.0f}",
             "-" if c["measured_tokens_per_s_per_gpu"] is None else f"{c['measured_tokens_per_s_per_gpu']:,.0f}",
             "-" if c["error"] is None else f"{100 * c['error']:+.1f}%"] for c in ingest["candidates"]]
    bars = [(f"{c['folder']} {kind}", [(kind, c[f"{kind}_tokens_per_s_per_gpu"])])
            for c in ingest["candidates"] if c["measured_tokens_per_s_per_gpu"] is not None
            for kind in ("predicted", "measured")]
    said = ingest["conclusions"] or ["no candidate measured yet"]
    return (table(["candidate", "status", "predicted tok/s/GPU", "measured", "error"], rows, numeric_from=2)
            + (stacked_bars(bars, "tok/s/GPU") if bars else "") + "".join(paragraph(line) for line in said))


def render(plan: dict, answer: dict, source: str, ingest: dict | None = None) -> tuple[str, list[str]]:
    """The page for PLAN (a plan's or an estimate's JSON, from SOURCE), ANSWER (explain's JSON for its pick) and,
    where given, INGEST (sweep ingest's JSON); and the names of its sections."""
    results = saved_results(plan)
    pick = results[0]
    title = f"moetune: {pick['model']} on {pick['gpus']} x {pick['gpu']}"
    searched = (f"{plan['candidates_evaluated']:,} candidates searched in {plan['search_seconds']:.2f} s, "
                f"{plan['feasible']:,} fit; " if "candidates_evaluated" in plan else "")
    subtitle = (f"{searched}sequence {pick['workload']['seq_length']}, global batch "
                f"{pick['workload']['global_batch_size']}; from {source}")
    sections = [section("Candidates", _candidates(results)),
                section("Step time by wall (seconds a step)", _walls(results)),
                section(f"Memory of #1 by pipeline stage ({knobs_label(pick)})", _memory(pick)),
                section("Fit, Scale, Profile, Retune (#1)", _explain(answer))]
    names = ["candidates", "walls", "memory", "explain"]
    if notes := _caveats(plan):
        sections.insert(1, section("How far to trust it", *notes))
        names.insert(1, "caveats")
    if notes := saved_notes(plan):  # what plan prints under its table, and the moves it leaves out
        sections.insert(1, section("Notes (as plan prints them)", *(paragraph(n) for n in notes)))
        names.insert(1, "notes")
    if ingest is not None:
        sections.append(section("Measured on the cluster (moetune sweep)", _sweep(ingest)))
        names.append("sweep")
    return page(title, subtitle, sections), names


def _caveats(plan: dict) -> list[str]:
    """What plan prints beside its table for the reader to weigh: the FP8 / NVFP4 caveats (the published pairs against
    moetune's gain), an EP 1 pick's routing note (no published run at EP 1) and the track record (the model's published
    runs on the GPU, misses named)."""
    out = []
    if c := plan.get("fp8_caveat"):
        out.append(paragraph(f"{fp8_evidence.caveat_label(c)}: the pick runs {fp8_evidence.caveat_text(c)}"))
    if c := plan.get("nvfp4_caveat"):
        out.append(paragraph(f"{nvfp4_evidence.LABEL}: the pick runs {nvfp4_evidence.NVFP4}; "
                             f"{nvfp4_evidence.caveat_text(c)}"))
    if ep1 := plan.get("ep1_pick"):  # plan's Routing note on an EP 1 pick among EP > 1 candidates
        out.append(paragraph(f"Routing: {ep1_text(ep1)}"))
    if record := plan.get("track_record") or saved_results(plan)[0].get("track_record"):
        out.append(paragraph(f"Track record: {track_record_text(record)}"))
    return out
