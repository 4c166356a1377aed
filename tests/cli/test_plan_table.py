"""plan's candidates as a person reads them at 80, 120 and the piped 200 columns: every figure and layout whole on
the line of its row, each pipeline split whole on one line, and the closing line's commands run as written."""

import json
import re
import shlex

import pytest
from cli_run import run

# the README's own example: re-split pipeline layouts ~60 characters long, which the table's layout column had folded
# into ~8 lines a row, and 1,264 tokens/s split as "1,2" over "64" at 80 columns
JOB = ["plan", "deepseek-v3", "--gpu", "h100", "--gpus", "1024", "--seq", "4096", "--gbs", "8192"]


@pytest.fixture(scope="module")
def rows():
    import contextlib
    import io

    from moetune.cli.main import main
    with contextlib.redirect_stdout(io.StringIO()) as out:
        assert main([*JOB, "--json"]) == 0
    return json.loads(out.getvalue())["results"]


def _compact(lay: dict) -> str:
    """The layout as the rows write it: CP and ETP named only above 1 (the legend under the table says so)."""
    vpp = f"v{lay['vpp']}" if lay["vpp"] > 1 else ""
    cp = f" CP{lay['cp']}" if lay["cp"] > 1 else ""
    etp = f" ETP{lay['etp']}" if lay["etp"] > 1 else ""
    return f"TP{lay['tp']}{cp} PP{lay['pp']}{vpp} EP{lay['ep']}{etp} (DP{lay['dp']} EDP{lay['edp']})"


@pytest.mark.parametrize("width", [80, 120, 200])
def test_each_row_reads_whole_at_the_terminal_width(width, rows, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", str(width))
    code, out, _ = run(JOB, capsys)
    lines = out.splitlines()
    start = lines.index("Fastest configurations that fit")
    end = next(i for i, line in enumerate(lines) if re.match(r"#\d+(, #\d+)*: ", line))  # the splits below
    shown = lines[start:end]
    assert code == 0 and "…" not in out and all(len(line) <= width for line in shown), max(map(len, shown))
    for rank, r in enumerate(rows, 1):
        # the row's first line: a table's "│ 1 │" (the results table comes first), a block's "#1"
        first = next(line for line in shown if line.startswith((f"│ {rank} │", f"#{rank} ")))
        figures = [f"{r['time']['tokens_per_s_per_gpu']:,.0f}", f"{r['time']['tflops_per_gpu']:.0f}",
                   f"{r['memory']['peak_bytes'] / 2**30:.1f}"]
        assert all(re.search(rf"(?<![\d,.]){re.escape(f)}(?![\d,.])", first) for f in figures), (figures, first)
        assert any(_compact(r["layout"]) in line for line in shown), _compact(r["layout"])
        # the split, whole on one line below the rows, to be passed again as --pipeline-layout
        assert any(line.endswith(f"pipeline layout {r['pipeline']['pipeline_layout']}") and f"#{rank}" in line
                   for line in lines[end:]), r["pipeline"]["pipeline_layout"]
    assert "Layouts name CP and ETP only above 1." in lines


def test_the_knobs_of_every_row_are_still_shown(rows, capsys, monkeypatch):
    """At 80 columns the knobs move into each row's block: each row's recompute modules and graph scope are there."""
    monkeypatch.setenv("COLUMNS", "80")
    _, out, _ = run(JOB, capsys)
    text = " ".join(out.split())
    for rank, r in enumerate(rows, 1):
        k = r["knobs"]
        block = text.split(f"#{rank} ", 1)[1].split(f"#{rank + 1} ", 1)[0]
        recompute = k["recompute"] + (f" ({','.join(k['recompute_modules'])})" if k["recompute"] == "selective" else "")
        assert f"dispatcher {k['dispatcher']}" in block and f"recompute {recompute}" in block, block
        assert f"cuda graphs {','.join(k['cuda_graph_scope'])}" in block, block
        assert f"mbs {r['workload']['micro_batch_size']}" in block and k["precision"] in block, block


def test_the_closing_line_s_commands_run_as_written(tmp_path, capsys, monkeypatch):
    """plan's Next line: save the plan, explain it, emit it and check what emit wrote, each command as the line
    gives it (the check as emit itself prints it, the release the plan was searched for included)."""
    monkeypatch.chdir(tmp_path)
    job = ["plan", "olmoe-1b-7b", "--gpu", "h100", "--gpus", "8", "--gbs", "64", "--top", "1", "--megatron-core",
           "0.15"]
    code, out, _ = run(job, capsys)
    line = " ".join(out.split()).split("Next: ", 1)[1]
    commands = re.findall(r"`([^`]+)`", line)
    assert code == 0 and commands[0] == "--json > plan.json" and out.rstrip().endswith(line.split()[-1])
    code, saved, _ = run([*job, "--json"], capsys)
    (tmp_path / "plan.json").write_text(saved)
    emitted = None
    for command in commands[1:]:
        words = shlex.split(command)
        assert words[0] == "moetune"
        code, said, err = run(words[1:], capsys)
        assert code == 0, (command, err)
        if words[1] == "emit":
            emitted = " ".join(said.split()).split("check the launch as it runs: ", 1)[1]
    check = next(c for c in commands if c.startswith("moetune check"))
    assert emitted == check and "--megatron-core 0.15" in check
    assert (tmp_path / "run" / "megatron_lm_args.txt").exists() and (tmp_path / "plan.html").exists()


def test_a_dispatcher_twin_takes_no_row_of_its_own(capsys, monkeypatch):
    """Qwen3-30B-A3B on 64 H100 at 8k (a new user's plan): DeepEP and HybridEP rows had stood as #2 and #3 with the
    same 12,957 tokens/s/GPU. Now each of the 5 rows is a distinct candidate; a twin is named on its row, in the
    table (`deepep (=hybridep)`), in JSON (`same_prediction`, with its own peak) and in a note giving that peak."""
    job = ["plan", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "64", "--seq", "8192", "--gbs", "512"]
    code, out, _ = run([*job, "--json"], capsys)
    rows = json.loads(out)["results"]
    apart = {(json.dumps(r["layout"]), r["workload"]["micro_batch_size"],
              json.dumps({**r["knobs"], "dispatcher": None, "flex_num_sms": None})) for r in rows}
    assert code == 0 and len(rows) == len(apart) == 5
    second = rows[1]
    assert second["knobs"]["dispatcher"] == "deepep" and [t["dispatcher"] for t in second["same_prediction"]] == \
        ["hybridep"]
    assert second["same_prediction"][0]["peak_bytes"] < second["memory"]["peak_bytes"]  # HybridEP's buffers: 1 GiB
    monkeypatch.setenv("COLUMNS", "80")
    code, out, _ = run(job, capsys)
    text = " ".join(out.split())
    block = text.split("#2 ", 1)[1].split("#3 ", 1)[0]
    assert code == 0 and "dispatcher deepep (=hybridep)," in block
    assert f"#2 hybridep {second['same_prediction'][0]['peak_bytes'] / 2**30:.1f} GiB" in text


@pytest.mark.parametrize("width", [80, 120])
def test_the_notes_wrap_to_the_terminal_with_a_hanging_indent(width, capsys, monkeypatch):
    """The notes under the table had been single lines of up to 600 characters with the code's own references in them
    (planner/ranking.py preference, layout/imbalance.py DROPLESS_IMBALANCE, seeds/001, R151-R158). Each now fills
    the terminal's width, its later lines hung under the text after its label, and keeps its figures; the references
    are the JSON's (near_tie `source`) or `explain --plan`'s (the routing factor's source, the FP8 pairs' run ids)."""
    monkeypatch.setenv("COLUMNS", str(width))
    job = ["plan", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "64", "--seq", "8192", "--gbs", "512"]
    code, out, _ = run(job, capsys)
    lines = out.splitlines()
    below = lines[lines.index("Layouts name CP and ETP only above 1.") + 1:]
    assert code == 0 and all(len(line) <= width for line in below), max(below, key=len)
    labels = {"note: ": 6, "Routing: ": 9, "FP8 caveat: ": 12, "Track record: ": 14, "Next: ": 6}
    starts = [i for i, line in enumerate(below) if not line.startswith(" ")]
    for i, j in zip(starts, [*starts[1:], len(below)]):
        label = next((lab for lab in labels if below[i].startswith(lab)), None)
        hang = labels.get(label, 4)  # a longer label ("Not searched (...): ") hangs its lines by 4
        # a note breaks only where the next word would pass the width (a `command`, and a figure with its unit,
        # "13,599 tokens/s/GPU", count as one word: each is read, or copied, whole)
        for line, after in zip(below[i:j - 1], below[i + 1:j]):
            words = after.split()
            word = "`" + after.split("`")[1] + "`" if words[0].startswith("`") else words[0]
            if len(words) > 1 and words[1].rstrip(",;:).") in ("s", "GiB", "tokens/s/GPU"):
                word += " " + words[1]
            assert len(line) + 1 + len(word) > width, (line, after)
        assert all(line.startswith(" " * hang) and line[hang] != " " for line in below[i + 1:j]), below[i:j]
    text = " ".join(out.split())
    for ref in ("planner/", ".py", "DROPLESS_IMBALANCE", "seeds/001", "R151", "R122/R124", "known_gaps.toml"):
        assert ref not in text, ref
    assert "charged 1.47x the mean" in text  # layout/imbalance.py DROPLESS_IMBALANCE at EP 16
    assert "measured FP8 at 0.95-1.06x of BF16" in text and "6 pairs, named by `explain --plan`" in text
    assert "R029 +53%" in text  # the track record keeps its run ids: they are its evidence
    code, out, _ = run([*job, "--json"], capsys)
    data = json.loads(out)
    assert data["near_tie"]["source"].startswith("seeds/001") and len(data["fp8_caveat"]["pairs"]) == 6


def test_a_wrapped_note_keeps_commands_and_long_words_whole():
    from moetune.cli.output import wrapped
    text = wrapped("[bold]Next[/bold]: run `moetune explain --plan plan.json` then a_word_longer_than_the_line_is "
                   "alone; 12.5 GiB\nsecond", 30)
    assert text.plain.splitlines() == ["Next: run", "      `moetune explain --plan plan.json`", "      then",
                                       "      a_word_longer_than_the_line_is", "      alone; 12.5 GiB", "      second"]
    assert [str(s.style) for s in text.spans] == ["bold"] and text.plain[:4] == "Next"  # the label keeps its style
