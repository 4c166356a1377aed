"""Published measured runs (data/published_runs.csv, each row cited) as moetune configurations."""

import csv
from dataclasses import dataclass
from functools import cache
from typing import get_args

from moetune.files import shipped_text, shipped_toml
from moetune.layout.knobs import Knobs
from moetune.layout.layout import Layout
from moetune.layout.modules import parse_modules, parse_offload_modules
from moetune.layout.validate import Workload
from moetune.planner.model_fields import bridge_router_dtype
from moetune.specs.hardware import GpuSpec, load_gpu
from moetune.specs.model import ModelSpec
from moetune.specs.registry import load_model
from moetune.walls.model_flops import Convention, megatron_model_flops

# The bar each published run is held to: tokens/s/GPU within 15% (the issue's; track_record, calibrate, repeats)
TOLERANCE = 0.15

CONFIG = ("model", "gpu", "num_gpus", "seq_length", "global_batch_size", "micro_batch_size", "tp", "cp", "pp",
          "vpp", "ep", "etp", "precision", "dispatcher", "recompute", "ep_overlap", "routing")
REQUIRED = (*CONFIG, "tokens_per_s_per_gpu")


@dataclass(kw_only=True, slots=True)
class Run:
    run_id: str
    model: ModelSpec
    gpu: GpuSpec
    layout: Layout
    workload: Workload
    knobs: Knobs
    tokens_per_s_per_gpu: float | None  # None: the source published TFLOP/s only
    tflops_per_gpu: float | None
    ab_group: str
    release: str
    source: str


def _int(text: str, default: int | None = None) -> int | None:
    if not text.strip():
        return default
    try:
        return int(float(text))
    except OverflowError:  # "1e400" or thousands of digits: past a float
        raise ValueError(f"{text[:20]!r}{'...' if len(text) > 20 else ''} is not a usable whole number") from None


def run_from_row(row: dict) -> Run:
    spec = load_model(row["model"])
    mtp = _int(row.get("mtp", ""))
    if mtp is not None:  # a run without the model's MTP layers (--mtp-num-layers unset)
        try:
            spec = spec.with_mtp(mtp)
        except ValueError as err:
            raise ValueError(f"mtp = {mtp}: {err}; leave mtp empty or 0") from None
    layout = Layout(world_size=_int(row["num_gpus"]), tp=_int(row["tp"]), cp=_int(row["cp"]), pp=_int(row["pp"]),
                    vpp=_int(row["vpp"], 1), ep=_int(row["ep"]), etp=_int(row["etp"]),
                    pipeline_layout=row["pipeline_layout"] or None,
                    first_stage_layers=_int(row.get("first_stage_layers") or ""),
                    last_stage_layers=_int(row.get("last_stage_layers") or ""),
                    account_for_embedding=row["account_for_embedding"] == "true",
                    account_for_loss=row["account_for_loss"] == "true")
    if row["vpp"].strip() and _int(row["vpp"]) != layout.vpp:  # Layout reads vpp 1 as unset beside a layout string
        raise ValueError(f"vpp = {row['vpp']} contradicts pipeline_layout ({layout.vpp} virtual stages); fix either")
    modules = parse_modules(row["recompute_modules"])
    knobs = Knobs(
        precision=row["precision"], recompute=row["recompute"] if row["recompute"] != "none" else "none",
        recompute_modules=modules if row["recompute"] == "selective" else frozenset(),
        dispatcher=row["dispatcher"], flex_num_sms=_int(row["flex_num_sms"]),
        cuda_graph_scope=tuple(row["cuda_graph_scope"].split()),
        ep_overlap=row["ep_overlap"] == "true", delay_wgrad=row["delay_wgrad"] == "true",
        routing=row["routing"], main_grads_fp32=False,  # perf recipes: grad_reduce_in_fp32=False (notes item 1)
        offload_modules=parse_offload_modules(row["offload_modules"]),
        # blank: on, as Megatron Bridge's recipes set them (ddp.overlap_grad_reduce / overlap_param_gather = True);
        # a row says "false" where its recipe turns one off
        overlap_grad_reduce=row["overlap_grad_reduce"] != "false",
        overlap_param_gather=row["overlap_param_gather"] != "false",
        # blank: off, Megatron's default and what the Bridge MoE recipes set (CommOverlapConfig(tp_comm_overlap=False))
        tp_comm_overlap=row["tp_comm_overlap"] == "true",
        fp8_output_proj=row["fp8_output_proj"] == "true",
        # blank: Adam; "muon": dist_muon, Muon under the layer-wise distributed optimizer (Kimi-K2's recipes)
        optimizer=row.get("optimizer") or "adam",
        # the model bridge's: the rows ran Bridge recipes, which leave it to the bridge (gpt-oss': unset, BF16
        # probabilities). The Megatron-LM recipe rows (DeepSeek-V3, Qwen3) train models without expert biases, where
        # it changes no prediction (only walls/compute.py expert_bias_seconds reads it)
        moe_router_dtype=bridge_router_dtype(spec),
    )
    return Run(run_id=row["run_id"], model=spec, gpu=load_gpu(row["gpu"]), layout=layout,
               workload=Workload(seq_length=_int(row["seq_length"]), micro_batch_size=_int(row["micro_batch_size"]),
                                 global_batch_size=_int(row["global_batch_size"])),
               knobs=knobs,
               tokens_per_s_per_gpu=float(row["tokens_per_s_per_gpu"]) if row["tokens_per_s_per_gpu"] else None,
               tflops_per_gpu=float(row["tflops_per_gpu"]) if row["tflops_per_gpu"] else None,
               ab_group=row["ab_group"], release=row["release"], source=row["source"])


@cache
def _rows() -> tuple[dict, ...]:
    """published_runs.csv, read once per process (rows are not modified)."""
    text = shipped_text("published_runs.csv")
    return tuple(csv.DictReader(text.splitlines()))


def columns() -> tuple[str, ...]:
    """published_runs.csv's column names."""
    return tuple(_rows()[0])


def published_rows() -> dict[str, dict]:
    """Every row of published_runs.csv by run_id, as text fields."""
    return {r["run_id"]: r for r in _rows()}


def load_runs() -> list[Run]:
    """Rows with every field the planner needs and tokens/s (the others lack a published config field)."""
    return [run_from_row(r) for r in _rows() if all(r[k].strip() for k in REQUIRED)]


def tokens_from_tflops(run: Run) -> float | None:
    """Tokens/s/GPU of a run published as TFLOP/s/GPU only, or None when the FLOP count depends on which
    release counted it (walls/model_flops.py conventions: GPT-OSS's non-SiLU GLU, sliding windows, hybrid stacks)
    and the source does not pin the release's convention."""
    if run.tflops_per_gpu is None:
        return None
    counts = {megatron_model_flops(run.model, run.workload.seq_length, 1, tp=run.layout.tp, convention=c)
              for c in get_args(Convention)}
    if max(counts) > min(counts) * (1 + 1e-9):
        return None
    return run.tflops_per_gpu * 1e12 / (min(counts) / run.workload.seq_length)


def load_configured_runs() -> list[Run]:
    """Rows whose configuration is complete, whether they publish tokens/s or only TFLOP/s."""
    return [run_from_row(r) for r in _rows() if all(r[k].strip() for k in CONFIG)]


@cache
def known_gaps() -> dict:
    """data/known_gaps.toml: the published runs moetune misses by more than 15% ("runs": complete runs,
    "tflops_only": runs published as TFLOP/s only), each with its reason, and the A/B pairs it misses ("ab": one entry
    per cause, its pairs under "order" and "ties"; ab_gaps reads them by pair)."""
    return shipped_toml("known_gaps.toml")


def ab_gaps(kind: str) -> dict[tuple[str, str], str]:
    """The A/B pairs of known_gaps.toml's `kind` ("order": predicted in the other order; "ties": a tie put apart),
    each (its two run ids, sorted) with its cause's reason."""
    return {tuple(pair.split()): cause["reason"] for cause in known_gaps()["ab"] for pair in cause.get(kind, ())}
