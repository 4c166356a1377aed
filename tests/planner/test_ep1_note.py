"""An EP 1 pick among EP > 1 candidates under dropless routing (planner/ep1_note.py): the note gives what each EP > 1
candidate was charged, that no published run measures EP 1, and how to compare (the new-user audit: qwen3-235b-a22b
on 256 GB200 picked TP1 PP32 EP1 and qwen3-30b-a3b on 72 GB200 TP1 PP2v24 EP1 with no word of either)."""

import csv
from pathlib import Path

import pytest

from moetune.layout.imbalance import DROPLESS_IMBALANCE
from moetune.layout.validate import Workload
from moetune.planner.ep1_note import ep1_pick, ep1_text, etp_alone_text
from moetune.planner.search import plan
from moetune.specs.hardware import load_gpu
from moetune.specs.registry import load_model

DATA = Path(__file__).parents[2] / "src" / "moetune" / "data" / "published_runs.csv"


def _plan(**kw):
    """Qwen3-30B-A3B on 8 GB200, GBS 64: the pick is TP1 PP4v8 EP1 (tests/planner/test_pins.py), EP 2, 4 and 8
    searched beside it."""
    return plan(load_model("qwen3-30b-a3b"), load_gpu("gb200"), 8, Workload(seq_length=4096, global_batch_size=64),
                top=3, weigh_offload=False, **kw)


def test_an_ep1_pick_names_what_every_wider_ep_was_charged_and_that_no_run_measures_it():
    d = ep1_pick(_plan())
    assert d["ep_searched"] == [2, 4, 8] and d["etp"] == 1 and d["token_imbalance_set"] is None
    charged = dict(d["charged"])
    # layout/imbalance.py: the full factor from EP 8, EP2 1.19x (its comment's figure, the expected maximum of 2
    # standard normals over that of 8)
    assert charged[8] == DROPLESS_IMBALANCE and charged[2] == pytest.approx(1.19, abs=0.005)
    # the shipped published runs: none at EP 1 (their `ep` column), so the step model is unchecked there
    eps = {row["ep"] for row in csv.DictReader(DATA.open())}
    assert "1" not in eps and 1 not in d["published_ep"] and 8 in d["published_ep"]
    assert d["first_ep_row"] is None and d["compare_ep"] == 8  # no EP > 1 row shown: pin the pairs' EP
    text = ep1_text(d)
    assert "#1 runs EP 1 and pays no busiest-rank imbalance" in text
    assert "charged moetune's default 1.19x (EP 2) to 1.47x (EP 8) the mean" in text
    assert "no published run measures EP 1, so the step model is unchecked there" in text
    assert text.endswith("plan with --token-imbalance F (your router's measured factor) or --fix ep=8")


def test_a_measured_factor_is_named_as_the_users_and_not_asked_for_again():
    result = _plan(token_imbalance=1.1)
    assert result.results[0].layout.ep == 1  # 1.1 still leaves EP 1 ahead on this job
    text = ep1_text(ep1_pick(result))
    assert "charged your --token-imbalance 1.10x the mean" in text and "--token-imbalance F" not in text
    assert text.endswith("plan with --fix ep=8")


def test_no_note_where_the_pick_is_wider_the_search_had_no_wider_ep_or_routing_is_balanced():
    assert ep1_pick(_plan(fixed={"ep": 1})) is None  # nothing wider searched: nothing to compare
    assert ep1_pick(_plan(routing="force-balance")) is None  # every EP charged 1
    wider = _plan(token_imbalance=1.0)
    assert wider.results[0].layout.ep > 1 and ep1_pick(wider) is None


def test_the_note_names_expert_tp_and_the_ep_row_shown():
    d = {"etp": 4, "ep_searched": [2, 4, 8, 16], "charged": [[2, 1.19], [4, 1.34], [8, 1.47], [16, 1.47]],
         "token_imbalance_set": None, "published_ep": [8, 16, 32, 64], "first_ep_row": {"rank": 3, "ep": 2},
         "compare_ep": 2}
    text = ep1_text(d)
    assert "#1 runs EP 1 x ETP 4 (each rank a slice of every expert)" in text
    assert "1.19x (EP 2) to 1.47x (EP 8 and up)" in text and "--fix ep=2 (#3)" in text
    assert text.endswith("`explain --plan` names the seeds' EP-first layout's figure")


def test_the_note_says_what_the_published_runs_hold_at_ep1():
    """The note reads the published EP sizes saved with it (track_record.published_ep), so a published EP 1 run would
    turn "unchecked" into "checked" rather than leave the plan contradicting its own track record."""
    facts = {"etp": 1, "ep_searched": [2, 8], "charged": [[2, 1.19], [8, 1.47]], "token_imbalance_set": None,
             "first_ep_row": None, "compare_ep": 8}
    assert "no published run measures EP 1" in ep1_text({**facts, "published_ep": [8, 16, 64]})
    checked = ep1_text({**facts, "published_ep": [1, 8]})
    assert "published runs at EP 1 check the step model there" in checked and "unchecked" not in checked


def test_an_ep1_etp_pick_with_no_wider_ep_searched_says_what_ep_above_1_would_be_charged():
    """--fix ep=1 etp=2: no EP > 1 candidate, so no ep1_pick; the note instead names the default's range, EP 2's
    scaled factor (1.19x, layout/imbalance.py's comment: the expected maximum of 2 standard normals over 8's) up to the
    full factor at EP 8 and above."""
    result = _plan(fixed={"ep": 1, "etp": 2})
    pick = result.results[0]
    assert (pick.layout.ep, pick.layout.etp) == (1, 2) and ep1_pick(result) is None
    text = etp_alone_text(pick.knobs, pick.layout.etp)
    assert text.startswith("dropless on EP 1 x ETP 2: each rank holds a slice of every expert")
    assert f"1.19x (EP 2) to {DROPLESS_IMBALANCE:.2f}x (EP 8 and up)" in text
    assert text.endswith("(this search had no EP > 1 candidate to weigh against it)")
