"""``moetune hardware``: the GPU catalog."""

import dataclasses

import click
from rich.markup import escape

from moetune.cli.output import console, emit_json, table
from moetune.specs.hardware import ZERO_IS_NONE, catalog, load_gpu, modelled_on


@click.command(name="hardware")
@click.argument("gpu", required=False)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def command(gpu: str | None, as_json: bool) -> None:
    """List the GPU catalog, or show one GPU (a catalog name or a cluster .toml file)."""
    gpus = [load_gpu(gpu)] if gpu else list(catalog().values())
    family = modelled_on(gpus[0]) if gpu else None  # a [gpu] table's key is the catalog GPU it is modelled on
    if as_json:  # a 0 that means "none" (no FP8 on A100) or "unknown" (an SM count, host memory) as null
        emit_json([{**{k: None if k in ZERO_IS_NONE and v == 0 else v for k, v in dataclasses.asdict(g).items()},
                    **({"modelled_on": family} if family else {})} for g in gpus])
        return
    cols = ["gpu", "name", "BF16 TF", "FP8 TF", "FP4 TF", "mem GiB", "HBM TB/s", "NVLink GB/s/dir", "NVL domain",
            "GPUs/node", "NIC Gb/s", "host GiB/GPU", "SMs"]
    console().print(table("GPU catalog (dense peaks)", cols, [
        [gpu if family else g.key, g.name, g.bf16_tflops, g.fp8_tflops or "-", g.fp4_tflops or "-", g.memory_gib,
         g.hbm_tbps, g.nvlink_gbps, g.nvlink_domain, g.gpus_per_node, g.nic_gbps, g.host_memory_gib or "-",
         g.sms or "-"]
        for g in gpus],
        justify_right_from=2))
    if family:
        console().print(escape(f"{gpus[0].name} ({gpu}, a [gpu] table): modelled on {family}, whose fitted constants "
                               "it runs on (efficiency.toml) and whose published runs stand for its track record"))
    for g in gpus:  # what the GPU's published runs read, beside its datasheet (the track record prices both)
        if g.nic_gbps_observed:
            console().print(f"{g.key}: its published cross-node runs read as if the NIC ran at "
                            f"{g.nic_gbps_observed:g} Gb/s a GPU, not {g.nic_gbps:g} (nic_gbps_observed)")
