"""The GPU catalog (from shared/data/hardware.csv) and user cluster files."""

import csv
import os
import re
from dataclasses import FrozenInstanceError

import pytest

import moetune.specs.hardware as hardware
from moetune.errors import MoetuneError
from moetune.files import read_toml
from moetune.specs.hardware import catalog, load_gpu
from moetune.walls.efficiency import efficiency

CSV_ROWS = {"a100": "A100 80GB SXM4", "h100": "H100 SXM5", "h200": "H200 SXM", "b200": "B200 (HGX B200)",
            "gb200": "GB200 (NVL72)", "gb300": "GB300 (NVL72)"}


def test_catalog_matches_the_shared_csv(shared_data):
    rows = {r["gpu"]: r for r in csv.DictReader(open(shared_data / "hardware.csv"))}
    for key, name in CSV_ROWS.items():
        gpu, row = catalog()[key], rows[name]
        assert gpu.bf16_tflops == float(row["bf16_dense_tflops"])
        assert gpu.nvlink_domain == int(row["nvlink_domain_size"])
        assert gpu.nvlink_gbps == float(row["nvlink_bw_per_gpu_GBps"]) / 2  # the CSV is bidirectional
        assert gpu.hbm_tbps == float(row["hbm_bandwidth_TBps"])


def test_fp8_and_fp4_rates():
    assert catalog()["h100"].peak_tflops("fp8-blockwise") == 1978.9
    assert catalog()["gb300"].peak_tflops("nvfp4") == 15000
    with pytest.raises(MoetuneError, match="needs a Blackwell GPU"):
        catalog()["h100"].peak_tflops("mxfp8")
    with pytest.raises(MoetuneError, match="no fp8-blockwise Tensor Core rate"):
        catalog()["a100"].peak_tflops("fp8-blockwise")


def test_custom_gpu_table(tmp_path):
    path = tmp_path / "lab.toml"
    path.write_text('gpus_per_node = 4\n[gpu]\nname = "X"\narch = "hopper"\nbf16_tflops = 500\nfp8_tflops = 1000\n'
                    'fp4_tflops = 0\nmemory_gib = 64\nhbm_tbps = 2\nnvlink_gbps = 200\nnvlink_domain = 4\n'
                    'gpus_per_node = 4\nnic_gbps = 200\nhost_link_gbps = 64\ngemm_tile = 128\ntdp_w = 500\n')
    gpu = load_gpu(str(path))
    assert (gpu.bf16_tflops, gpu.nvlink_domain, gpu.capacity_bytes) == (500, 4, 64 * 2**30)
    path.write_text('[gpu]\nname = "X"\n')
    with pytest.raises(MoetuneError, match="missing"):
        load_gpu(str(path))
    path.write_text("gpu = [1,\n")
    with pytest.raises(MoetuneError, match="not valid TOML"):
        load_gpu(str(path))


TABLE = ('[gpu]\nname = "X"\narch = "hopper"\nbf16_tflops = 500\nfp8_tflops = 1000\nfp4_tflops = 0\nmemory_gib = 64\n'
         'hbm_tbps = 2\nnvlink_gbps = 200\nnvlink_domain = 4\ngpus_per_node = 4\nnic_gbps = 200\nhost_link_gbps = 64\n'
         'gemm_tile = 128\ntdp_w = 500\n')


def test_a_described_gpu_is_modelled_as_its_architectures_catalog_gpu_whatever_the_file_name(tmp_path):
    """Its fitted constants, rules and defaults are looked up by key: the file's name said nothing about it."""
    for name in ("lab.toml", "h100.toml", "gb300.toml"):
        (tmp_path / name).write_text(TABLE)
        assert load_gpu(str(tmp_path / name)).key == "h100"
    (tmp_path / "bw.toml").write_text(TABLE.replace('"hopper"', '"blackwell"').replace("nvlink_domain = 4",
                                                                                       "nvlink_domain = 72"))
    assert load_gpu(str(tmp_path / "bw.toml")).key == "gb200"


def test_sms_is_optional_in_a_gpu_table_and_inherited_from_a_catalog_gpu(tmp_path):
    """A table that leaves it out is not checked against a trace's SM count (0); gpu = "h100" keeps the H100's."""
    (tmp_path / "lab.toml").write_text(TABLE)
    (tmp_path / "h100_lab.toml").write_text('gpu = "h100"\nnic_gbps = 200\n')
    assert load_gpu(str(tmp_path / "lab.toml")).sms == 0
    assert load_gpu(str(tmp_path / "h100_lab.toml")).sms == catalog()["h100"].sms > 0


def test_another_architecture_in_a_file_named_as_a_catalog_gpu_runs_on_the_priors(tmp_path):
    """An AMD GPU's table in h100.toml is not an H100: not H100's fitted constants, not its track record."""
    (tmp_path / "h100.toml").write_text(TABLE.replace('"hopper"', '"cdna3"'))
    gpu = load_gpu(str(tmp_path / "h100.toml"))
    assert gpu.key == "h100-cdna3" and efficiency(gpu.key) == efficiency("default", priors_only=True)
    (tmp_path / "mi300x.toml").write_text(TABLE.replace('"hopper"', '"cdna3"'))
    assert load_gpu(str(tmp_path / "mi300x.toml")).key == "mi300x"


@pytest.mark.parametrize("text, needle", [
    ('gpu = "h100"\nnic_gbps = nan\n', "nic_gbps (nan) must be a finite number"),
    ('gpu = "h100"\nmemory_gib = inf\n', "memory_gib (inf) must be a finite number"),
    ('gpu = "h100"\nsource = "x"\n', "unknown field(s) source"),
    (TABLE + "memory_gb = 40\n", "[gpu] table has unknown field(s) memory_gb"),
    ('gpu = "h100"\nsms = -1\n', "sms (-1) must be positive"),
    ('gpu = "h100"\nsms = 113.5\n', "sms (113.5) must be a whole number"),
])
def test_impossible_cluster_files_are_one_line(text, needle, tmp_path):
    path = tmp_path / "c.toml"
    path.write_text(text)
    with pytest.raises(MoetuneError, match=re.escape(needle)):
        load_gpu(str(path))


def test_b300_is_catalogued_from_its_own_sources():
    """B300 is not in shared/data/hardware.csv: its peaks are the HGX B300 datasheet's dense figures (36 PFLOPS sparse
    BF16 over 8 GPUs, halved), its memory what nvidia-smi reports for 'NVIDIA B300 SXM6 AC' (275,040 MiB), and its
    NVLink domain an HGX node's, so it is modelled as an 8-GPU board, not an NVL72 rack."""
    gpu = catalog()["b300"]
    assert gpu.bf16_tflops == 36_000 / 2 / 8 and gpu.fp8_tflops == 2 * gpu.bf16_tflops
    assert gpu.memory_gib == round(275_040 / 1024, 1)
    assert (gpu.arch, gpu.nvlink_domain, gpu.gpus_per_node, gpu.nic_gbps) == ("blackwell", 8, 8, 800)
    assert "glennklockwood" in gpu.source and "275,040 MiB" in gpu.source
    assert efficiency("b300")["gemm_eff"] != efficiency("gb300")["gemm_eff"]  # fitted on its own runs
    assert gpu.nic_gbps_observed == 400  # what its cross-node published runs read as (known_gaps R243)


def test_an_observed_nic_above_the_datasheet_is_refused(tmp_path):
    path = tmp_path / "lab.toml"
    path.write_text(TABLE + "nic_gbps_observed = 400\n")  # the table's NIC is 200 Gb/s
    with pytest.raises(MoetuneError, match=r"nic_gbps_observed \(400\) must be between 0 \(none\) and nic_gbps"):
        load_gpu(str(path))


@pytest.mark.parametrize(("extra", "observed"), [("nic_gbps = 200\n", 0.0), ("nic_gbps = 800\n", 0.0),
                                                 ("nic_gbps = 800\nnic_gbps_observed = 400\n", 400.0), ("", 400.0)])
def test_a_b300_cluster_file_with_its_own_nic_drops_the_catalogs_reading(tmp_path, extra, observed):
    """The catalog's 400 Gb/s is what the published B300 cluster's runs read as: a file that states its own NIC
    describes another fabric (one at 200 Gb/s had been refused as 'nic_gbps_observed (400) must be ... <= 200')."""
    path = tmp_path / "mine.toml"
    path.write_text('gpu = "b300"\n' + extra)
    assert load_gpu(str(path)).nic_gbps_observed == observed


@pytest.mark.parametrize(("text", "domain"), [('gpu = "h100"\ngpus_per_node = 4\n', 4),
                                               ('gpu = "h100"\ngpus_per_node = 4\nnvlink_domain = 8\n', 8),
                                               ('gpu = "gb200"\ngpus_per_node = 2\n', 72)])
def test_a_smaller_node_of_a_board_gpu_is_its_nvlink_domain(tmp_path, text, domain):
    """HGX H100's NVLink stops at the node: a file of 4-GPU nodes that names no domain had kept the catalog's 8, so
    an EP 8 group over two nodes ran at NVLink speed. A domain the file names stands, and NVL72's spans nodes."""
    path = tmp_path / "c.toml"
    path.write_text(text)
    assert load_gpu(str(path)).nvlink_domain == domain


def test_a_cluster_file_is_read_once_until_it_changes(tmp_path, monkeypatch):
    """config_gpu asks for the file's GPU once per knob set a plan checks: it is parsed once, an edit (even one that
    keeps the size) is read again, and the GpuSpec handed out is frozen, so no caller can change the cached one."""
    reads = []
    monkeypatch.setattr(hardware, "read_toml", lambda path, what: reads.append(path) or read_toml(path, what))
    path = tmp_path / "rack.toml"
    path.write_text('gpu = "b200"\nnvlink_domain = 72\ngpus_per_node = 4\n')
    gpu = load_gpu(str(path))
    assert load_gpu(str(path)) is gpu and len(reads) == 1
    with pytest.raises(FrozenInstanceError):
        gpu.nvlink_domain = 8
    path.write_text('gpu = "b200"\nnvlink_domain = 36\ngpus_per_node = 4\n')  # the same size
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))  # past a coarse clock's tick
    assert load_gpu(str(path)).nvlink_domain == 36 and len(reads) == 2
    path.write_text('gpu = "b200"\n')
    assert load_gpu(str(path)).nvlink_domain == 8 and len(reads) == 3


def test_a_misspelt_field_of_a_gpu_table_is_named_with_the_field_meant(tmp_path):
    """hbm_tbs had been reported only as a missing hbm_tbps, the typo itself never named."""
    path = tmp_path / "c.toml"
    path.write_text('[gpu]\nname = "x"\narch = "hopper"\nbf16_tflops = 989\nmemory_gib = 80\nhbm_tbs = 3.35\n')
    with pytest.raises(MoetuneError, match=r"has unknown field\(s\) hbm_tbs \(hbm_tbps\?\); is missing"):
        load_gpu(str(path))


@pytest.mark.parametrize(("text", "rack", "several_nodes"), [
    ('gpu = "gb200"\n', True, True),  # NVL72: 72 GPUs of 4-GPU trays (hardware.toml gb200)
    ('gpu = "gb300"\n', True, True),
    ('gpu = "h100"\n', False, False),  # HGX: NVLink stops at the 8-GPU node
    ('gpu = "h100"\nnvlink_domain = 16\ngpus_per_node = 8\n', False, True),  # two nodes of NVLink: no rack
    ('gpu = "b200"\nnvlink_domain = 72\ngpus_per_node = 72\n', True, False),  # a rack read as one node
])
def test_rack_scale_and_a_domain_of_several_nodes_are_two_questions(tmp_path, text, rack, several_nodes):
    """GpuSpec.rack_scale is the one answer to "is this NVLink domain a rack (NVL36/NVL72)?" (platform_of's NVL72 row,
    HybridEP kept inside it); spans_nodes says whether a domain holds several nodes, which the job's rank arithmetic
    turns on (layout/ranks.py job_gpu): a 16-GPU domain of 8-GPU nodes spans nodes and is no rack."""
    from moetune.layout.ranks import hybridep_spans_on
    from moetune.specs.hardware import spans_nodes
    from moetune.specs.platform import on_nvl72
    path = tmp_path / "c.toml"
    path.write_text(text)
    gpu = load_gpu(str(path))
    assert gpu.rack_scale is rack
    assert spans_nodes(gpu.nvlink_domain, gpu.gpus_per_node) is several_nodes
    # HybridEP's EP 128 over 256 GPUs leaves a rack's domain (Bridge refuses it there), not two HGX nodes' NVLink
    assert hybridep_spans_on(gpu, 256, 128, 1) is not rack
    assert on_nvl72(gpu) is (rack and gpu.arch == "blackwell")
