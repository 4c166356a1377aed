"""--gpu (and a compared plan's GPU) against the GPU a trace records: another part of the same architecture is
refused with the fix, or a note with --force-gpu; another memory size is a note. Real traces from ../shared/data/traces
and copies of one with its deviceProperties edited."""

import gzip
import hashlib
import json

import pytest

from moetune.cli.main import main
from moetune.profile import diagnose, read_trace
from moetune.profile.device import MEMORY_SLACK, model_of
from moetune.profile.synthetic import alltoall_exposed, write_trace
from moetune.specs.hardware import GIB, catalog

ALLREDUCE = "a100_2rank_allreduce.json.gz"  # NVIDIA A100-PG509-200: the 40 GB A100
SENDRECV = "a100_16rank_sendrecv_rank0.json.gz"  # NVIDIA A100-SXM4-80GB


def cli(args, capsys):
    code = main(["diagnose", *map(str, args)])
    out = capsys.readouterr()
    return code, out.out, out.err


def notes(args, capsys) -> list[str]:
    code, out, err = cli([*args, "--json"], capsys)
    assert code == 0, err
    return json.loads(out)["notes"]


def props(doc: dict) -> dict:
    """The raw deviceProperties of device 0 (the kernels of both A100 traces ran on it)."""
    return next(p for p in doc["deviceProperties"] if p["id"] == 0)


@pytest.fixture(scope="module")
def edited(traces_dir, tmp_path_factory):
    """Copies of the 2-rank A100 trace whose every device reads as another GPU (name, SMs, memory, capability)."""
    with gzip.open(traces_dir / ALLREDUCE, "rt") as fh:
        doc = json.load(fh)
    folder = tmp_path_factory.mktemp("edited")

    def copy(**fields):
        path = folder / f"{hashlib.sha1(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:12]}.json.gz"
        if not path.exists():
            with gzip.open(path, "wt", compresslevel=1) as fh:
                json.dump({**doc, "deviceProperties": [{**p, **fields} for p in doc["deviceProperties"]]}, fh)
        return path
    return copy


H20 = {"name": "NVIDIA H20", "numSms": 78, "totalGlobalMem": 102_625_181_696, "computeMajor": 9}
H100_PCIE = {"name": "NVIDIA H100 PCIe", "numSms": 114, "totalGlobalMem": 85_045_231_616, "computeMajor": 9}


@pytest.mark.parametrize("name", [ALLREDUCE, SENDRECV])
def test_the_reader_keeps_the_sm_count_kineto_records(name, traces_dir, oracle):
    assert read_trace(traces_dir / name).device_sms == props(oracle.load(traces_dir / name))["numSms"]


def test_the_shared_a100_40gb_trace_is_a_note_against_the_80gb_catalog_a100(traces_dir, oracle, capsys):
    """The shared allreduce trace ran on a 40 GB A100 (its totalGlobalMem), the catalog's a100 is the 80 GB part:
    the same part (108 SMs, the A100's name), so a note saying which memory is counted, not a refusal."""
    mem = props(oracle.load(traces_dir / ALLREDUCE))["totalGlobalMem"]
    assert mem < catalog()["a100"].capacity_bytes / MEMORY_SLACK  # the premise: another memory size
    said = [n for n in notes([traces_dir / ALLREDUCE, "--gpu", "a100"], capsys) if "of memory" in n]
    assert len(said) == 1 and f"{mem / GIB:.1f} GiB" in said[0] and "78 GiB" in said[0]


def test_a_cluster_file_of_the_traced_memory_takes_the_note_away(traces_dir, oracle, tmp_path, capsys):
    mem = props(oracle.load(traces_dir / ALLREDUCE))["totalGlobalMem"]
    toml = tmp_path / "a100_40gb.toml"
    toml.write_text(f'gpu = "a100"\nmemory_gib = {mem / GIB:.0f}\n')
    assert not [n for n in notes([traces_dir / ALLREDUCE, "--gpu", toml], capsys) if "ran on" in n]


def test_the_80gb_a100_trace_is_the_catalog_a100(traces_dir, capsys):
    assert not [n for n in notes([traces_dir / SENDRECV, "--gpu", "a100"], capsys) if "ran on" in n]


def test_an_h20_trace_as_gpu_h100_is_refused_with_the_gpu_to_pass(edited, capsys):
    trace = edited(**H20)
    code, _, err = cli([trace, "--gpu", "h100"], capsys)
    assert code == 2 and "NVIDIA H20 (78 SMs)" in err and "(132 SMs)" in err and "pass --gpu h20" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not [n for n in notes([trace, "--gpu", "h20"], capsys) if "ran on" in n]


def test_force_gpu_without_a_gpu_to_force_is_one_line(edited, capsys):
    """--force-gpu forces the GPU named (--gpu, or the plan's) on the traces: alone it had done nothing, silently."""
    code, _, err = cli([edited(**H20), "--force-gpu"], capsys)
    assert code == 2 and err == "error: --force-gpu prices the run on --gpu or the --plan's GPU; give one of them, " \
        "or drop it\n"


def test_an_unknown_gpu_is_named_once_by_its_flag(edited, capsys):
    code, _, err = cli([edited(**H20), "--gpu", "h999"], capsys)
    assert code == 2 and err.startswith("error: --gpu: unknown GPU 'h999': use one of a100, h100")


def test_force_gpu_prices_another_part_with_a_note(edited, capsys):
    trace = edited(**H20)
    said = notes([trace, "--gpu", "h100", "--force-gpu"], capsys)
    assert "NVIDIA H20 (78 SMs)" in said[0] and "--force-gpu" in said[0]  # first: above the trace's own notes


def test_another_sm_count_of_a_catalog_name_is_another_part(edited, tmp_path, capsys):
    """An H100 PCIe names the h100 but has 114 SMs to the SXM5's 132: the fix is a cluster file saying so."""
    trace = edited(**H100_PCIE)
    code, _, err = cli([trace, "--gpu", "h100"], capsys)
    assert code == 2 and "(114 SMs)" in err and 'gpu = "h100", sms = 114' in err
    toml = tmp_path / "h100_pcie.toml"
    toml.write_text('gpu = "h100"\nsms = 114\n')
    assert cli([trace, "--gpu", toml], capsys)[0] == 0


def test_a_gpu_the_catalog_lacks_is_a_note(edited, capsys):
    trace = edited(name="NVIDIA H800", numSms=132, computeMajor=9,
                     totalGlobalMem=H100_PCIE["totalGlobalMem"])
    said = [n for n in notes([trace, "--gpu", "h100"], capsys) if "ran on" in n]
    assert len(said) == 1 and "NVIDIA H800, which the catalog lacks" in said[0]


def test_a_plan_for_another_part_is_refused_too(edited, tmp_path, capsys):
    """--plan without --gpu: the plan's GPU is what the comparison prices, so it is checked the same way."""
    plan = tmp_path / "plan.json"
    assert main(["estimate", "olmoe-1b-7b", "--gpu", "h100", "--gpus", "2", "--ep", "2", "--json"]) == 0
    plan.write_text(capsys.readouterr().out)
    trace = edited(**H20)
    code, _, err = cli([trace, "--plan", plan], capsys)
    assert code == 2 and "--plan's GPU h100" in err and "compare a plan made with --gpu h20" in err
    assert cli([trace, "--plan", plan, "--force-gpu"], capsys)[0] == 0


@pytest.mark.parametrize("name, model", [("NVIDIA H100 80GB HBM3", "h100"), ("NVIDIA A100-PG509-200", "a100"),
                                         ("NVIDIA GB200", "gb200"), ("NVIDIA H20-3e", "h20"),
                                         ("NVIDIA B300 SXM6 AC", "b300"), ("Tesla V100-SXM2-32GB", "v100"),
                                         ("AMD Instinct MI300X", None), (None, None)])
def test_model_numbers_in_device_names(name, model):
    assert model_of(name) == model


def test_every_catalog_name_names_its_own_key():
    """The catalog's names carry their keys' model numbers, so a catalog GPU is never another part of itself."""
    assert all(model_of(g.name) == key for key, g in catalog().items())


def test_force_gpu_on_another_architecture_says_it_forces_only_a_part(traces_dir, capsys):
    """--force-gpu prices another part of the traced architecture, not another architecture's run: the refusal of an
    A100 trace as --gpu h100 --force-gpu had read as if the flag had not been given."""
    code, _, err = cli([traces_dir / SENDRECV, "--gpu", "h100", "--force-gpu"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "ran on NVIDIA A100-SXM4-80GB (ampere" in err and "--force-gpu forces another part of" in err


def test_a_plan_of_another_architecture_beside_the_right_gpu_names_the_plan(traces_dir, tmp_path, capsys):
    """An H100 plan against A100 traces with --gpu a100: the plan is at fault, so the line names it and asks for one
    made with the run's GPU, where it had asked for '(--gpu)', which was given."""
    plan = tmp_path / "plan.json"
    assert main(["estimate", "olmoe-1b-7b", "--gpu", "h100", "--gpus", "16", "--ep", "16", "--json"]) == 0
    plan.write_text(capsys.readouterr().out)
    code, _, err = cli([traces_dir / SENDRECV, "--plan", plan, "--gpu", "a100"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "the --plan's prediction is for h100 (hopper)" in err and "made with --gpu of the run's GPU" in err


B200 = {"name": "NVIDIA B200", "numSms": 148, "totalGlobalMem": 191_514_476_544, "computeMajor": 10, "computeMinor": 0}


def facts_and_notes(args, capsys) -> tuple[dict, list[str]]:
    code, out, err = cli([*args, "--json"], capsys)
    assert code == 0, err
    data = json.loads(out)
    return data["facts"], [n for n in data["notes"] if "ran on" in n]


def test_gpu_given_is_the_platform_the_advice_reads_with_one_note(edited, tmp_path, capsys):
    """A B200 trace as a cluster file's B200s in a 72-GPU NVLink domain (the seeds' NVL72 row, specs/platform.py
    platform_of): the facts had read the platform from the device name (the catalog's b200, an 8-GPU HGX) while the
    capacity and a prediction read --gpu's; now all read --gpu's, and one note says the name's platform differs."""
    trace, toml = edited(**B200), tmp_path / "b200_nvl72.toml"
    toml.write_text('gpu = "b200"\nnvlink_domain = 72\n')
    facts, said = facts_and_notes([trace, "--gpu", toml], capsys)
    assert facts["gpu.nvl72"] is True and facts["gpu.arch"] == "blackwell"
    assert said == [f"{trace} ran on NVIDIA B200: advised on --gpu {toml}'s platform (blackwell-nvl72), not the "
                    "blackwell the catalog's b200 is on"]
    facts, said = facts_and_notes([trace, "--gpu", "b200"], capsys)  # the name's own platform: nothing to say
    assert facts["gpu.nvl72"] is False and not said


def test_a_forced_part_is_advised_on_its_own_platform_in_the_forced_note(edited, capsys):
    """A GB200 trace as --gpu b200 --force-gpu had been priced as a B200 but advised as the GB200 NVL72 it names."""
    trace = edited(**{**B200, "name": "NVIDIA GB200", "numSms": 152})
    facts, said = facts_and_notes([trace, "--gpu", "b200", "--force-gpu"], capsys)
    assert facts["gpu.nvl72"] is False and len(said) == 1
    assert "priced as B200 (HGX B200) all the same (--force-gpu); advised on --gpu b200's platform (blackwell), " \
        "not the blackwell-nvl72 the catalog's gb200 is on" in said[0]


@pytest.mark.parametrize(("device", "gpu", "backend"), [("NVIDIA B200", "gb200", "hybridep"),
                                                        ("NVIDIA GB200", "b200", "deepep")])
def test_the_dispatcher_advice_is_the_gpu_givens(tmp_path, device, gpu, backend):
    """Exposed all-to-all on a Blackwell trace: the dispatcher the seeds give --gpu's platform (seed 000 default
    mappings: HybridEP on GB200/GB300 NVL72, DeepEP on B200), not the one the traced name's platform takes."""
    trace = write_trace(alltoall_exposed(device_name=device, compute_capability=(10, 0)), tmp_path / "r.json.gz")
    r = diagnose([trace], gpu=catalog()[gpu], force_gpu=True)
    dispatcher = next(rec for rec in r.recommendations if rec.rule == "comm.dispatcher")
    assert dispatcher.overrides["model.moe_flex_dispatcher_backend"] == backend
