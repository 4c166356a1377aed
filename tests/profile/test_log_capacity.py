"""The GPU's capacity from a log's OOM message: PyTorch's allocator states the device's total memory on running out
(c10/cuda/CUDACachingAllocator.cpp: "GPU 0 has a total capacity of 79.11 GiB of which 1.02 GiB is free.", format_size's
two decimals of GiB = 2**30 bytes; older releases "(GPU 0; 79.15 GiB total capacity; ...)"). A log alone with such an
OOM had said "GPU capacity unknown"; now the capacity is read from it where --gpu and traces give none, and said so."""

import re

import pytest

from moetune.errors import MoetuneError
from moetune.profile import diagnose, parse_log
from moetune.profile.synthetic import compute_bound, write_trace
from moetune.specs.hardware import catalog

BRIDGE = "megatron_bridge_oom.log"  # peak reserved 79.1 GB (1e9 bytes) and an OOM stating 79.11 GiB, at line 15
MLM = "megatron_lm_qwen3_30b_a3b.log"
NEW_OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of " \
          "79.11 GiB of which 1.02 GiB is free."


def _bridge(fixtures_dir, tmp_path, oom: str):
    text = (fixtures_dir / BRIDGE).read_text()
    assert text.count(NEW_OOM) == 1
    path = tmp_path / "oom.log"
    path.write_text(text.replace(NEW_OOM, oom))
    return path


def test_a_log_alone_takes_the_capacity_its_oom_message_states(fixtures_dir):
    r = diagnose(log=fixtures_dir / BRIDGE)
    assert r.memory["capacity_bytes"] == pytest.approx(79.11 * 2**30)
    assert r.memory["fraction"] == pytest.approx(79.1e9 / (79.11 * 2**30))  # 0.931
    assert r.memory["capacity_source"] == "capacity from the log's OOM message, line 15"
    assert f"peak reserved memory 73.7 GiB of 79.1 GiB (93%; capacity from the log's OOM message, line 15) [log " \
           f"{fixtures_dir / BRIDGE}]" in r.evidence


@pytest.mark.parametrize("oom, capacity", [
    # PyTorch before the "has a total capacity of" wording, as a RuntimeError behind torchrun's rank prefix
    ("[rank3]: RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 3; 79.15 GiB total capacity; "
     "77.20 GiB already allocated; 11.25 MiB free; 78.01 GiB reserved in total by PyTorch)", 79.15 * 2**30),
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 7 has a total capacity of 139.81 GiB "
     "of which 512.00 MiB is free. Including non-PyTorch memory, this process has 139.30 GiB memory in use.",
     139.81 * 2**30)])
def test_the_capacity_in_each_wording(fixtures_dir, tmp_path, oom, capacity):
    log = parse_log(_bridge(fixtures_dir, tmp_path, oom).read_text())
    assert log.oom_capacity_bytes == pytest.approx(capacity) and log.oom_capacity_line == 15


def test_gpu_or_a_trace_gives_the_capacity_before_the_log(fixtures_dir, tmp_path):
    """--gpu h100 (78 GiB in the catalog) and a trace's deviceProperties are the run's GPU, said as before."""
    r = diagnose(log=fixtures_dir / BRIDGE, gpu=catalog()["h100"])
    assert r.memory["capacity_bytes"] == 78 * 2**30 and r.memory["capacity_source"] is None
    assert not any("OOM message" in e for e in r.evidence)
    sc = compute_bound(world_size=16)
    trace = write_trace(sc, tmp_path / "rank0.json.gz")
    step_ms = diagnose([trace]).step_seconds * 1e3  # the log timed as the trace (one run's)
    log = tmp_path / "run.log"
    log.write_text(re.sub(r"elapsed time per iteration \(ms\): [0-9.]+", f"elapsed time per iteration (ms): {step_ms}",
                          (fixtures_dir / MLM).read_text()) + NEW_OOM + "\n")
    r = diagnose([trace], log=log)
    assert sc.device_memory_bytes != pytest.approx(79.11 * 2**30)  # the premise: the two differ
    assert r.memory["capacity_bytes"] == sc.device_memory_bytes
    assert r.memory["capacity_source"] is None


def test_an_oom_that_states_no_capacity_leaves_it_unknown(fixtures_dir, tmp_path):
    r = diagnose(log=_bridge(fixtures_dir, tmp_path, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
                                                     "2.00 GiB."))
    assert r.memory["capacity_bytes"] is None
    assert any("(GPU capacity unknown: pass a trace or --gpu)" in e for e in r.evidence)


def test_a_peak_above_the_stated_capacity_names_where_it_came_from(fixtures_dir, tmp_path):
    """73.7 GiB reserved on a GPU whose OOM says 70 GiB in all: not one GPU's figures, and the error says whose."""
    path = _bridge(fixtures_dir, tmp_path, NEW_OOM.replace("79.11 GiB", "70.00 GiB"))
    with pytest.raises(MoetuneError, match=r"exceeds the GPU's 70.0 GiB \(capacity from the log's OOM message, line "
                                           r"15\): pass the log and traces of one run"):
        diagnose(log=path)


def test_a_failed_last_launch_states_the_capacity_of_the_run_before_it(fixtures_dir):
    """The run's own lines hold no OOM; the relaunch that ran out of memory at start-up ran on the job's GPUs."""
    text = (fixtures_dir / MLM).read_text()
    header = text[text.index("using world size"):text.index("[after dataloaders")]
    log = parse_log(text + header + NEW_OOM + "\n")
    assert [it.iteration for it in log.iterations] == list(range(1, 9)) and not log.oom_lines
    assert log.oom_capacity_bytes == pytest.approx(79.11 * 2**30)
    assert log.oom_capacity_line == len(text.splitlines()) + len(header.splitlines()) + 1


def test_a_gpu_given_that_the_oom_message_contradicts_is_said(fixtures_dir):
    """The log's OOM states 79.11 GiB: diagnosed against an H200 (139 GiB usable, data/hardware.toml) the note says
    the run was on another GPU; against an H100 (78 GiB usable) the two agree within CAPACITY_APART and nothing is
    said."""
    h200 = diagnose(log=fixtures_dir / BRIDGE, gpu=catalog()["h200"])
    h100 = diagnose(log=fixtures_dir / BRIDGE, gpu=catalog()["h100"])
    said = [n for n in h200.notes if "its OOM message (line 15) states 79.1 GiB" in n]
    assert len(said) == 1 and "139.0 GiB" in said[0] and "--gpu" in said[0]
    assert not any("its OOM message" in n for n in h100.notes)
