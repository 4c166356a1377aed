"""hardware, and a GPU given as a cluster file: the catalog, a [gpu] table of one's own, and cluster files
of the wrong types refused in one line."""

import json

import pytest
from cli_run import run


def test_models_and_hardware_list(capsys):
    assert run(["models"], capsys)[0] == 0
    code, out, _ = run(["hardware", "--json"], capsys)
    assert code == 0 and {g["key"] for g in json.loads(out)} >= {"a100", "h100", "h200", "b200", "b300", "gb200",
                                                                 "gb300"}
    a100 = next(g for g in json.loads(out) if g["key"] == "a100")
    assert a100["fp8_tflops"] is None and a100["bf16_tflops"] > 0  # no FP8 on Ampere: null, as the table's "-"
    code, out, _ = run(["hardware", "b300"], capsys)  # the table names what its published runs read as
    assert code == 0 and "as if the NIC ran at 400 Gb/s a GPU, not 800" in out.replace("\n", " ")
    assert "NIC ran" not in run(["hardware", "b200"], capsys)[1]


LAB_GPU = ('gpus_per_node = 4\n[gpu]\nname = "X"\narch = "hopper"\nbf16_tflops = 500\nfp8_tflops = 1000\n'
           'fp4_tflops = 0\nmemory_gib = 64\nhbm_tbps = 2\nnvlink_gbps = 200\nnvlink_domain = 4\n'
           'gpus_per_node = 4\nnic_gbps = 200\nhost_link_gbps = 64\ngemm_tile = 128\ntdp_w = 500\n')


def test_a_gpu_of_ones_own_runs_every_command(tmp_path, capsys):
    """A cluster file with its own [gpu] table: its name is no catalog key, so the rule checks and the dispatcher
    search must read the file back (GpuSpec.ref), as the estimate JSON does; they once asked the catalog for it."""
    lab = tmp_path / "lab.toml"
    lab.write_text(LAB_GPU)
    base = ["qwen3-30b-a3b", "--gpu", str(lab), "--gpus", "16"]
    assert run(["estimate", *base, "--ep", "8", "--gbs", "256", "--json"], capsys)[0] == 0
    assert run(["explain", *base, "--ep", "8", "--gbs", "256"], capsys)[0] == 0
    code, out, _ = run(["plan", *base, "--gbs", "256", "--top", "1", "--json"], capsys)
    assert code == 0 and json.loads(out)["results"][0]["gpu"] == str(lab)


def test_user_cluster_toml(tmp_path, capsys):
    toml = tmp_path / "mycluster.toml"
    toml.write_text('gpu = "h100"\nmemory_gib = 70\nnic_gbps = 200\n')
    code, out, _ = run(["estimate", "mixtral-8x7b", "--gpu", str(toml), "--gpus", "8", "--ep", "8", "--json"], capsys)
    assert code == 0 and json.loads(out)["memory"]["capacity_bytes"] == 70 * 2**30
    toml.write_text('gpu = "h100"\nwarp_drive = 1\n')
    code, _, err = run(["estimate", "mixtral-8x7b", "--gpu", str(toml), "--gpus", "8"], capsys)
    assert code == 2 and "unknown field(s) warp_drive" in err


@pytest.mark.parametrize(("line", "needle"), [
    ('memory_gib = "seventy"', "memory_gib ('seventy') must be a finite number"),
    ('arch = "blackwell"', "arch ('blackwell') differs from H100 SXM5's (hopper)"),
    ("nvlink_domain = 7.5", "nvlink_domain (7.5) must be a whole number"),
    # figures no machine has together
    # (a node's GPUs alone are its domain where the catalog's is one node: specs/hardware.py node_domain)
    ("gpus_per_node = 3\nnvlink_domain = 8", "nvlink_domain (8) and gpus_per_node (3) must divide one another"),
    ("nvlink_domain = 7", "nvlink_domain (7) and gpus_per_node (8) must divide one another"),
    ("tdp_w = -5", "tdp_w (-5) must be 0 or more"),
    ("fp8_tflops = -1", "fp8_tflops (-1) must be 0 or more"),
    ("host_memory_gib = -1", "host_memory_gib (-1) must be positive"),
    ("gpus_per_node = 0", "gpus_per_node (0) must be positive"),  # not the domain it would have been copied to
    # a digit too many: a figure no part has, against specs/hardware.py UPPER
    ("memory_gib = 1e9", "memory_gib (1e+09) is past the 4,096 moetune plans for"),
    ("nvlink_domain = 8000\ngpus_per_node = 8", "nvlink_domain (8,000) is past the 1,152"),
    # another unit: Tb/s for Gb/s, a fraction for a whole (specs/hardware.py LOWER); it had planned at 0 tokens/s/GPU
    ("nic_gbps = 0.4", "nic_gbps (0.4) is under the 10 moetune plans for: check its unit"),
    ("hbm_tbps = 0.0001", "hbm_tbps (0.0001) is under the 0.2"),
    ("bf16_tflops = 0.000001", "bf16_tflops (1e-06) is under the 10"),
])
def test_a_cluster_file_of_the_wrong_types_is_one_line(line, needle, tmp_path, capsys):
    path = tmp_path / "c.toml"
    path.write_text(f'gpu = "h100"\n{line}\n')
    code, _, err = run(["estimate", "qwen3-30b-a3b", "--gpu", str(path), "--gpus", "16", "--ep", "16"], capsys)
    assert code == 2 and f"{path}: " in err and needle in err


def test_a_cluster_file_with_a_misspelt_architecture_is_refused(tmp_path, capsys):
    """arch = "Hopper" had run as an unknown GPU on the priors (BF16, alltoall, no graphs: 3,427 tokens/s/GPU against
    9,172), with no word."""
    table = tmp_path / "c.toml"
    table.write_text(LAB_GPU.replace('arch = "hopper"', 'arch = "Hopper"'))
    code, _, err = run(["estimate", "qwen3-30b-a3b", "--gpu", str(table), "--gpus", "16", "--ep", "4"], capsys)
    assert code == 2 and "arch ('Hopper') must be one of ampere, hopper, blackwell" in err


def test_a_gpu_table_shows_its_own_name_and_the_catalog_gpu_that_stands_for_it(tmp_path, capsys):
    """A [gpu] table on Blackwell with an 8-GPU domain runs on B200's fitted constants (specs/hardware.py FAMILY_KEY).
    hardware had shown its gpu column as b200, and estimate's track record listed "5 published ... run(s) on b200"
    without saying the user's GPU is not a B200 (h200's says it runs on h100's constants)."""
    mine = tmp_path / "mygpu.toml"
    mine.write_text(LAB_GPU.replace('name = "X"', 'name = "MyGPU"').replace('"hopper"', '"blackwell"')
                    .replace("nvlink_domain = 4", "nvlink_domain = 8")
                    .replace("gpus_per_node = 4", "gpus_per_node = 8"))
    code, out, _ = run(["hardware", str(mine)], capsys)
    (row,) = [line for line in out.splitlines() if "MyGPU" in line and "│" in line]
    assert code == 0 and "b200" not in row.split("│")[1]  # the gpu column: the file, not the catalog key
    assert f"MyGPU ({mine}, a [gpu] table): modelled on b200" in out.replace("\n", " ")
    code, out, _ = run(["hardware", str(mine), "--json"], capsys)
    assert code == 0 and json.loads(out)[0]["modelled_on"] == "b200" and json.loads(out)[0]["name"] == "MyGPU"
    assert "modelled_on" not in json.loads(run(["hardware", "b200", "--json"], capsys)[1])[0]
    code, out, _ = run(["estimate", "qwen3-30b-a3b", "--gpu", str(mine), "--gpus", "16", "--ep", "8"], capsys)
    record = out[out.index("Track record"):].replace("\n", " ")
    assert code == 0 and record.startswith("Track record: no published run on MyGPU, a [gpu] table modelled on b200: "
                                           "it runs on b200's constants (efficiency.toml) and b200's published runs "
                                           "stand for it; on b200: ")
    code, out, _ = run(["estimate", "qwen3-30b-a3b", "--gpu", "b200", "--gpus", "16", "--ep", "8", "--json"], capsys)
    assert "modelled_on" not in json.loads(out)["track_record"]  # a catalog GPU's record is its own
