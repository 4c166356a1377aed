"""explain's Retune section (seeds/000 First Answer Checklist: Retune): the single moves that predict a gain on one
configuration, measured, not asserted. Each move the seeds list (data/retune_moves.toml) is applied, re-estimated,
and kept when it still fits and gains without adding a rule error; the layout moves Scale names
(planner/explain_scale.py) are ranked with them, and a run that does not fit is offered the fastest move that makes
it fit. plan reuses it for the moves it leaves out of its search on purpose (unsearched_gains).
"""

from moetune.planner.config_map import to_config
from moetune.planner.ep_domain import in_domain_ep
from moetune.planner.estimate import Estimate
from moetune.planner.fp8_evidence import applies
from moetune.planner.moves import GIB, apply_move, move_change, moves, tight
from moetune.planner.pipeline_balance import even_out
from moetune.planner.ranking import SMALLEST_GAIN
from moetune.planner.rule_findings import findings, rule_errors
from moetune.specs.platform import platform_of


def retune_rows(e: Estimate, found: list, blocked: list | None = None, only=lambda move: True) -> list[dict]:
    """The single moves (those `only` keeps) that predict a gain and fit, best first; those that would gain but do
    not fit go to `blocked` (each with the memory it needs), so an empty Retune can say what memory stops."""
    base = e.time["tokens_per_s_per_gpu"]
    broken = set(rule_errors(e, found))  # a move is refused for the errors it adds, not for those it inherits
    out = []
    for move_id, move in moves().items():
        if not only(move) or move.get("platform") and platform_of(e.gpu) not in move["platform"]:
            continue
        if any(getattr(e.knobs, name) not in values for name, values in move.get("from_knobs", {}).items()):
            continue
        if move.get("hybrid_only") and e.model.mamba is None:
            continue
        if move.get("when_not_fit") is not None and move["when_not_fit"] == e.fits and not broken:
            continue  # a refused run takes any move that clears its error, a memory move included
        new = apply_move(e, move)
        if new is not None and not new.fits and e.fits and blocked is not None and not set(rule_errors(new)) - broken \
                and (gain := new.time["tokens_per_s_per_gpu"] / base - 1) > SMALLEST_GAIN:
            blocked.append({"rule": move_id, "predicted_gain": gain, "new_peak_gib": new.peak_bytes / GIB})
        if new is None or not new.fits:
            continue
        errors = set(rule_errors(new))
        if errors - broken or (broken and errors == broken):  # on a refused run, only a move that clears an error
            continue
        gain = new.time["tokens_per_s_per_gpu"] / base - 1
        if gain > SMALLEST_GAIN or not e.fits or broken:
            out.append({"rule": move_id, "change": move_change(move, e, new), "predicted_gain": gain,
                        "new_tokens_per_s_per_gpu": new.time["tokens_per_s_per_gpu"],
                        "new_peak_gib": new.peak_bytes / GIB, "why": move["why"], "source": move["source"],
                        "tight": tight(new),
                        # a move onto FP8 for a narrow model: its gain is moetune's, the published pairs measured none
                        "unconfirmed": not applies(e.model, e.knobs) and applies(new.model, new.knobs)})
    # on a run that does not fit, offloading comes after every other fix whatever it costs (seeds/000 Phase 1: add
    # offloading only when recompute and parallelism are still insufficient)
    last = (lambda r: "offload" in r["rule"]) if not e.fits else (lambda r: False)
    return _without_borrowed_gains(sorted(out, key=lambda r: (last(r), -r["predicted_gain"])))


# Moves that change a second thing on top of another move: kept only where they beat that move alone, so a row
# never shows the other move's gain as its own (EP overlap with VPP against more virtual stages alone).
COMPOUND = {"ep_overlap_with_vpp": "more_virtual_stages", "ep_overlap_delay_wgrad": "ep_overlap"}
# A compound move is listed only where it adds this much to the gain of its part alone: EP overlap with VPP had led
# Retune at +19.4% where VPP alone gave +19.3% (explain audit), crediting the overlap with the bubble's gain
COMPOUND_MARGIN = SMALLEST_GAIN


# Layout moves Scale names, ranked with the knob moves, or Retune's top row could be a smaller gain than one Scale
# names (explain audit: +3.1% first where a re-split predicts +23.0%; +0.9% where EP inside the domain does +1.3%)
LAYOUT_MOVES = {
    "pipeline_resplit": ("layers move off the slowest pipeline rank while that is faster and every rank still fits",
                         "seeds/000 Three Walls: better PP layout; seeds/004 Key Interactions: a poor PP or VPP layout "
                         "can erase dispatcher gains"),
    "ep_inside_nvlink": ("the largest EP whose all-to-all stays inside the NVLink domain",
                         "seeds/000 Phase 2: keep hot communication (the EP all-to-all) inside the fast interconnect")}


def with_layout_moves(e: Estimate, found: list, retune: list[dict]) -> list[dict]:
    """Retune with the layout moves Scale names (pipeline_balance.py even_out, ep_domain.py in_domain_ep), each where
    it fits and gains under retune_rows' error rules; its overrides are the config fields it changes."""
    broken = set(rule_errors(e, found))
    rows = list(retune)
    for rule, new in (("pipeline_resplit", even_out(e)), ("ep_inside_nvlink", in_domain_ep(e, found))):
        errors = set(rule_errors(new)) if new is not None and new is not e and new.fits else None
        if errors is None or errors - broken or (broken and errors == broken):  # as retune_rows: a refused run takes
            continue  # only a move that clears an error
        if (gain := new.time["tokens_per_s_per_gpu"] / e.time["tokens_per_s_per_gpu"] - 1) <= SMALLEST_GAIN:
            continue
        before, after = to_config(e), to_config(new)
        rows.append({"rule": rule, "change": {k: v for k, v in after.items() if before.get(k) != v},
                     "predicted_gain": gain, "new_tokens_per_s_per_gpu": new.time["tokens_per_s_per_gpu"],
                     "new_peak_gib": new.peak_bytes / GIB, "why": LAYOUT_MOVES[rule][0],
                     "source": LAYOUT_MOVES[rule][1], "tight": tight(new), "unconfirmed": False})
    return sorted(rows, key=lambda r: -r["predicted_gain"])


def _without_borrowed_gains(rows: list[dict]) -> list[dict]:
    gain = {r["rule"]: r["predicted_gain"] for r in rows}
    return [r for r in rows if r["rule"] not in COMPOUND
            or gain[r["rule"]] > gain.get(COMPOUND[r["rule"]], -1.0) + COMPOUND_MARGIN]


def faster_fix(steps: list[dict], retune: list[dict]) -> dict | None:
    """The fastest single Retune move that makes a run fit without offloading (each is re-estimated and fits), where
    it beats where the seeds' ladder ends: the memory wall's fixes include a better PP layout (seeds/000 Three Walls
    table), which can cost nothing where recompute costs a fifth."""
    fixes = [r for r in retune if "offload" not in r["rule"]]
    fitted = next((s for s in steps if s.get("fits") and "change" in s), None)
    if fixes and (fitted is None or fixes[0]["new_tokens_per_s_per_gpu"] > fitted["tokens_per_s_per_gpu"]):
        return fixes[0]
    return None


def unsearched_gains(e: Estimate, found: list | None = None) -> list[dict]:
    """The Retune moves `plan` leaves out of its search on purpose (retune_moves.toml `unsearched`: the seeds'
    starting choice stays the planner's) that gain on this pick, so plan says what explain would offer; `found`:
    the pick's rule findings where the caller has them."""
    return retune_rows(e, findings(e) if found is None else found, only=lambda move: move.get("unsearched", False))
