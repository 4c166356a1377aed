"""`moetune report`: a real plan's page, each figure read back from the page against the plan's own JSON."""

import contextlib
import html
import io
import json
import re
from html.parser import HTMLParser

import pytest
from tests.cli.cli_run import run

from moetune.cli.main import main
from moetune.report.plan_report import memory_groups

GIB = 1 << 30


@pytest.fixture(scope="module")
def plan_file(tmp_path_factory):
    """DeepSeek-V3 on 256 GB200 (pipeline stages to chart), its three fastest configurations."""
    path = tmp_path_factory.mktemp("plan") / "plan.json"
    with contextlib.redirect_stdout(io.StringIO()) as out:
        assert main(["plan", "deepseek-v3", "--gpu", "gb200", "--gpus", "256", "--gbs", "4096", "--top", "3",
                     "--json"]) == 0
    path.write_text(out.getvalue())
    return path


class Page(HTMLParser):
    """The page's table rows (cell texts) and SVG rects / lines (attributes), in order."""

    def __init__(self, text: str):
        super().__init__()
        self.rows, self.rects, self.lines, self.svgs, self._cell = [], [], [], [], None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th"):
            self._cell = ""
        elif tag == "svg":
            self.svgs.append(a)
        elif tag == "rect" and "data-segment" in a:
            self.rects.append({**a, "svg": len(self.svgs) - 1})
        elif tag == "line":
            self.lines.append(a)

    def handle_data(self, data):
        if self._cell is not None:
            self._cell += data

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self.rows[-1].append(self._cell)
            self._cell = None


def _report(plan_file, tmp_path, capsys, *extra) -> tuple[Page, str]:
    out = tmp_path / "report.html"
    code, _, err = run(["report", str(plan_file), "--out", str(out), *extra], capsys)
    assert code == 0, err
    return Page(out.read_text()), out.read_text()


def test_each_candidate_and_its_walls_are_the_plans(plan_file, tmp_path, capsys):
    page, text = _report(plan_file, tmp_path, capsys)
    results = json.loads(plan_file.read_text())["results"]
    speeds = [row[9] for row in page.rows if row and row[0].isdigit()]
    assert speeds == [f"{r['time']['tokens_per_s_per_gpu']:,.0f}" for r in results]
    scale = float(page.svgs[0]["data-scale"])  # the walls chart: one bar a candidate, a rect a wall
    walls = [r for r in page.rects if r["svg"] == 0]
    assert len(walls) == 4 * len(results)
    for rect, (result, wall) in zip(walls, [(r, w) for r in results for w in ("compute", "communication", "bubble",
                                                                                "host")], strict=True):
        assert rect["data-segment"] == wall
        assert float(rect["width"]) == pytest.approx(result["time"]["walls"][wall] * scale, abs=0.01)


def test_the_picks_memory_adds_up_to_each_stage_under_the_capacity_line(plan_file, tmp_path, capsys):
    page, _ = _report(plan_file, tmp_path, capsys)
    pick = json.loads(plan_file.read_text())["results"][0]
    memory = [r for r in page.rects if r["svg"] == 1]
    per_stage = len(memory) // len(pick["stages"])
    for i, stage in enumerate(pick["stages"]):
        values = [float(r["data-value"]) for r in memory[i * per_stage:(i + 1) * per_stage]]
        assert sum(values) == pytest.approx(stage["bytes"]["total"] / GIB, rel=1e-4)
    assert float(page.lines[0]["data-limit"]) == pytest.approx(pick["memory"]["capacity_bytes"] / GIB, rel=1e-5)


def test_memory_groups_keep_every_byte():
    items = {"weights": 2 * GIB, "main_grads": GIB, "act_attn_qkv": GIB, "act_expert_fc1_output": 3 * GIB,
             "nccl_buffers": GIB, "total": 8 * GIB}
    grouped = dict(memory_groups(items))
    assert grouped["activations"] == 4 and grouped["buffers and overheads"] == 1
    assert sum(grouped.values()) == 8
    # an MXFP8 stage's FP8 weights are weights, not overheads
    fp8 = dict(memory_groups({"weights": 0, "fp8_weights": 3 * GIB, "nccl_buffers": GIB, "total": 4 * GIB}))
    assert fp8["weights"] == 3 and fp8["buffers and overheads"] == 1


def test_the_picks_retune_moves_are_explains(plan_file, tmp_path, capsys):
    page, text = _report(plan_file, tmp_path, capsys)
    code, out, _ = run(["explain", "--plan", str(plan_file), "--json"], capsys)
    moves = json.loads(out)["retune"]
    shown = [row[0] for row in page.rows if row and row[0] in {m["rule"] for m in moves}]
    assert shown == [m["rule"] for m in moves]


def test_a_sweep_of_another_plan_is_refused(plan_file, tmp_path, capsys):
    other = tmp_path / "other.json"
    with contextlib.redirect_stdout(io.StringIO()) as out:
        main(["plan", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--gbs", "512", "--top", "2", "--json"])
    other.write_text(out.getvalue())
    assert run(["sweep", "write", str(other), "--out", str(tmp_path / "s"), "--top", "1"], capsys)[0] == 0
    code, _, err = run(["report", str(plan_file), "--out", str(tmp_path / "r.html"), "--sweep", str(tmp_path / "s")],
                       capsys)
    assert code == 2 and "is not result 1 of this plan" in err
    page, _ = _report(other, tmp_path, capsys, "--sweep", str(tmp_path / "s"))
    assert ["r01", "no log"] == [row[:2] for row in page.rows if row and row[0] == "r01"][0]


@pytest.mark.parametrize(("make", "words"), [
    (lambda p: p.write_text('{"a": 1}'), "not a `moetune plan --json` or `estimate --json` output"),
    (lambda p: p.write_text('{"results": []}'), "the plan has no results"),
])
def test_bad_input_is_one_line(tmp_path, capsys, make, words):
    bad = tmp_path / "bad.json"
    make(bad)
    code, _, err = run(["report", str(bad), "--out", str(tmp_path / "r.html")], capsys)
    assert code == 2 and words in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(("edit", "words"), [
    (lambda rs: rs[1].update(time={}), "lacks 'dominant_wall'"),  # a result below the pick: only the page reads it
    (lambda rs: rs[2].pop("layout"), "lacks 'layout'"),
    (lambda rs: rs[1].update(memory="x"), "holds a value of the wrong type"),
    (lambda rs: rs[0]["time"].update(mfu="high"), "holds a value moetune cannot take"),
    (lambda rs: rs[0].pop("stages"), "lacks 'stages'"),
])
def test_a_hand_edited_result_is_one_line(plan_file, tmp_path, capsys, edit, words):
    """The page shows every result's saved figures: one a hand edit removed or retyped had raised a traceback."""
    data = json.loads(plan_file.read_text())
    edit(data["results"])
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(data))
    code, _, err = run(["report", str(edited), "--out", str(tmp_path / "r.html")], capsys)
    assert code == 2 and err.startswith(f"error: {edited} {words}") and len(err.strip().splitlines()) == 1
    assert err.strip().endswith("pass unmodified `moetune plan/estimate --json` output")
    assert not (tmp_path / "r.html").exists()


def test_an_out_path_in_no_directory_is_one_line(plan_file, tmp_path, capsys):
    code, _, err = run(["report", str(plan_file), "--out", str(tmp_path / "no" / "r.html")], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and re.search(r"--out .*r\.html", err)


def test_a_sweeps_conclusions_are_on_the_page(tmp_path, capsys):
    plan = tmp_path / "plan.json"
    with contextlib.redirect_stdout(io.StringIO()) as out:
        main(["plan", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--gbs", "512", "--top", "2", "--json"])
    plan.write_text(out.getvalue())
    assert run(["sweep", "write", str(plan), "--out", str(tmp_path / "s")], capsys)[0] == 0
    (tmp_path / "s" / "r01" / "train-1.log").write_text("Starting training loop at iteration 0\n"
                                                        "torch.OutOfMemoryError: CUDA out of memory.\n")
    _, text = _report(plan, tmp_path, capsys, "--sweep", str(tmp_path / "s"))
    assert "false fit: r01 ran out of memory" in text and "--headroom above" in text
    code, _, err = run(["report", str(plan), "--out", str(tmp_path / "r.html"), "--sweep", str(tmp_path / "no")],
                       capsys)
    assert code == 2 and err.startswith("error: --sweep ") and "no such directory" in err


def test_the_caveats_plan_prints_are_on_the_page(tmp_path, capsys):
    """A page to share keeps what plan prints for the reader to weigh: the FP8 caveat of a narrow model (its published
    FP8-vs-BF16 pairs against moetune's gain) and the track record, misses named."""
    plan = tmp_path / "plan.json"
    code, out, _ = run(["plan", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--gbs", "256", "--top", "2",
                        "--json"], capsys)
    assert code == 0
    plan.write_text(out)
    data = json.loads(out)
    page, text = _report(plan, tmp_path, capsys)
    assert data["fp8_caveat"]["hidden_size"] == 2048 and "FP8 caveat: the pick runs fp8-blockwise" in text
    assert "Track record: 13 published qwen3-30b-a3b run(s) on h100" in text and "R029 +53%" in text


@pytest.mark.parametrize("job, key", [
    # Qwen3-30B-A3B on 64 H100 at 8k: the DeepEP row predicts +0.6% over the HybridEP pick but leaves under 3% free
    (["qwen3-30b-a3b", "--gpu", "h100", "--gpus", "64", "--seq", "8192", "--gbs", "512"], "near_tie"),
    # Mixtral-8x7B on 16 H100 at 8k: a CP 2 layout predicts more, ranked off below 16k (test_plan_cmd.py)
    (["mixtral-8x7b", "--gpu", "h100", "--gpus", "16", "--seq", "8192", "--gbs", "64", "--top", "3"],
     "short_cp_alternative"),
    # GLM-4.5 at 128k on 136 H100: full recompute, the optimizer offload alternative named (test_plan_cmd.py)
    (["glm-4.5", "--gpu", "h100", "--gpus", "136", "--seq", "131072", "--gbs", "136", "--top", "1"],
     "offload_alternative"),
    # Qwen3-30B-A3B on 64 H100 at 4,097 tokens: no FP8 GEMM shape runs, the pick is BF16 (planner/shape_note.py)
    (["qwen3-30b-a3b", "--gpu", "h100", "--gpus", "64", "--seq", "4097", "--gbs", "512", "--top", "1"],
     "shape_refusal")])
def test_the_notes_plan_prints_are_on_the_page(job, key, tmp_path, capsys):
    """The page had left out the notes plan prints under its table (the near-tie, the headroom, a faster CP layout,
    the offload alternative) and the moves the search leaves out: each note plan prints is on the page, word for
    word, read from the saved JSON."""
    plan = tmp_path / "plan.json"
    code, out, _ = run(["plan", *job, "--json"], capsys)
    data = json.loads(out)
    assert code == 0 and key in data
    plan.write_text(out)
    code, printed, _ = run(["plan", *job], capsys)
    notes = [line.split(": ", 1)[1] for line in printed.splitlines() if line.startswith(("note: ", "Not searched"))]
    page, text = _report(plan, tmp_path, capsys)
    said = html.unescape(text)
    assert code == 0 and len(notes) >= 1 + bool(data.get("unsearched_moves"))
    assert all(note in said for note in notes), [n for n in notes if n not in said]
    if key == "near_tie":
        assert data["near_tie"]["why"] in said and "Not searched (the seeds' starting choice stays the pick's): " \
            f"fp8_current_scaling predicts {data['unsearched_moves'][0]['predicted_gain']:+.1%}" in said
