"""What the published FP8-vs-BF16 A/B pairs (data/fp8_ab_pairs.toml) say about an FP8 pick.

moetune's FP8 gain is optimistic for narrow models (docs/time.md): the pairs measured FP8 at 0.95-1.06x of BF16
where moetune predicts 1.17-1.24x (tests/planner/test_fp8_evidence.py holds the gap). So when `plan` or `explain`
lands on FP8 (or FP4) for a model no wider than the widest model of those pairs, it says so, with the measured ratios
and moetune's own FP8 gain next to them, instead of letting the predicted gain stand as if it were measured.
"""

from dataclasses import dataclass, replace
from functools import cache

from moetune.files import shipped_toml
from moetune.layout.knobs import Knobs
from moetune.planner.estimate import Estimate
from moetune.planner.runs import published_rows
from moetune.planner.search import PlanResult, plan
from moetune.specs.model import ModelSpec
from moetune.specs.registry import load_model


@dataclass(frozen=True, kw_only=True, slots=True)
class Fp8Pair:
    """One published pair: the same model, cluster and layout in FP8 and in BF16."""

    fp8: str  # run id (published_runs.csv)
    bf16: str
    model: str
    hidden_size: int
    measured: float  # FP8 throughput over BF16 throughput, one source and release


def _metric(row: dict) -> float:
    return float(row["tokens_per_s_per_gpu"] or row["tflops_per_gpu"])


@cache
def fp8_pairs() -> tuple[Fp8Pair, ...]:
    table = shipped_toml("fp8_ab_pairs.toml")
    rows = published_rows()
    out = []
    for p in table["pair"]:
        a, b = rows[p["fp8"]], rows[p["bf16"]]
        out.append(Fp8Pair(fp8=p["fp8"], bf16=p["bf16"], model=a["model"],
                           hidden_size=load_model(a["model"]).hidden_size, measured=_metric(a) / _metric(b)))
    return tuple(out)


def widest_measured() -> int:
    """Hidden size of the widest model whose FP8 gain was measured in a pair."""
    return max(p.hidden_size for p in fp8_pairs())


def applies(spec: ModelSpec, knobs: Knobs) -> bool:
    return knobs.precision != "bf16" and spec.hidden_size <= widest_measured()


def evidence() -> dict:
    """The pairs in brief: measured FP8/BF16 range, run ids, models, the widest hidden size among them."""
    pairs = fp8_pairs()
    return {"measured_fp8_over_bf16": [min(p.measured for p in pairs), max(p.measured for p in pairs)],
            "pairs": [f"{p.fp8}/{p.bf16}" for p in pairs], "widest_hidden_size": widest_measured(),
            "models": sorted({p.model for p in pairs})}


def evidence_text(ev: dict, runs: bool = True) -> str:
    """The measured pairs in words; `runs` False: counted, not named (plan's terminal line, which `explain --plan`
    and the JSON's `pairs` name)."""
    lo, hi = ev["measured_fp8_over_bf16"]
    pairs = ", ".join(ev["pairs"]) if runs else f"{len(ev['pairs'])} pairs, named by `explain --plan`"
    sep = ", " if runs else "; "
    return (f"the published FP8-vs-BF16 A/B runs of models this narrow (hidden size <= {ev['widest_hidden_size']}: "
            f"{', '.join(ev['models'])}{sep}{pairs}) measured FP8 at {lo:.2f}-{hi:.2f}x of BF16")


def caveat(pick: Estimate, bf16: Estimate | None, bf16_what: str) -> dict:
    """The measured ratios next to moetune's predicted gain of `pick` over `bf16` (the fastest BF16 candidate, or the
    same configuration in BF16: `bf16_what` says which)."""
    out = {"precision": pick.knobs.precision, "hidden_size": pick.model.hidden_size, **evidence()}
    if bf16 is not None:
        out.update(comparison(pick, bf16, bf16_what, "bf16", "predicted_fp8_gain"))
    return out


def comparison(pick: Estimate, other: Estimate, what: str, prefix: str, gain_key: str) -> dict:
    """moetune's predicted gain of `pick` over `other` (under `gain_key`), and `other` in brief under `prefix`_ keys:
    which configuration it is (`what`), its layout, whether it fits, its throughput."""
    return {f"{prefix}_what": what, f"{prefix}_layout": other.layout.short(), f"{prefix}_fits": other.fits,
            f"{prefix}_peak_gib": other.peak_bytes / 2**30, "capacity_gib": other.gpu.capacity_bytes / 2**30,
            f"{prefix}_tokens_per_s_per_gpu": other.time["tokens_per_s_per_gpu"],
            gain_key: pick.time["tokens_per_s_per_gpu"] / other.time["tokens_per_s_per_gpu"] - 1}


def comparison_text(c: dict, prefix: str, gain_key: str) -> str:
    """`comparison` in words: moetune predicts +N% over <what> (<layout>, <tokens/s>[, which does not fit ...])."""
    fits = "" if c[f"{prefix}_fits"] else \
        f", which does not fit: {c[f'{prefix}_peak_gib']:.2f} GiB of {c['capacity_gib']:.2f}"
    return (f"moetune predicts {100 * c[gain_key]:+.0f}% over {c[f'{prefix}_what']} "
            f"({c[f'{prefix}_layout']}, {c[f'{prefix}_tokens_per_s_per_gpu']:,.0f} tokens/s/GPU{fits})")


def same_config_in(e: Estimate, precision: str) -> Estimate:
    """`e` with only its recipe changed: the switches that belong to one recipe (the MXFP8 LM head, FP8 or FP4
    weights) go back to the new recipe's presets."""
    return e.variant(knobs=replace(e.knobs, precision=precision, fp8_output_proj=False, fp8_param_gather=None,
                                   fp4_param_gather=None))


def same_config_in_bf16(e: Estimate) -> Estimate:
    return same_config_in(e, "bf16")


def plan_caveat(result: PlanResult, spec: ModelSpec, gpu, world: int, wl, fixed: dict, **plan_kwargs) -> dict | None:
    """For a plan whose pick is FP8/FP4 on a narrow model: the caveat against the fastest BF16 candidate (a second
    search with the precision pinned), or against the pick's own configuration in BF16 when the user pinned the
    precision. The second search's candidates and seconds are added to `result`'s (a plan's reported effort is all
    of it)."""
    if not result.results or not applies(spec, result.results[0].knobs):
        return None
    pick = result.results[0]
    if "precision" in fixed:
        return caveat(pick, same_config_in_bf16(pick), "the same configuration in BF16")
    bf16 = plan(spec, gpu, world, wl, fixed={**fixed, "precision": ["bf16"]}, **{**plan_kwargs, "top": 1},
                weigh_offload=False)  # the caveat reads the BF16 pick alone
    result.candidates_evaluated += bf16.candidates_evaluated
    result.search_seconds += bf16.search_seconds
    return caveat(pick, bf16.results[0] if bf16.results else None, "the fastest BF16 candidate")


def _format(c: dict) -> str:
    """The low-precision format a caveat is about: NVFP4 for a 4-bit pick, whose nearest evidence is the FP8 pairs."""
    return "NVFP4" if c["precision"] == "nvfp4" else "FP8"


def caveat_label(c: dict) -> str:
    return f"{_format(c)} caveat"


def caveat_line(c: dict, subject: str = "this configuration", runs: bool = True) -> str:
    """The caveat as plan and explain print it, as nvfp4_evidence.caveat_line words its own (`runs`: evidence_text)."""
    return f"[bold]{caveat_label(c)}[/bold]: {subject} runs {caveat_text(c, runs)}"


def caveat_text(c: dict, runs: bool = True) -> str:
    nearest = " (no published run measures NVFP4 against BF16: the FP8 pairs are the nearest evidence)" \
        if c["precision"] == "nvfp4" else ""
    text = f"{c['precision']} on a model of hidden size {c['hidden_size']}; {evidence_text(c, runs)}{nearest}"
    if "predicted_fp8_gain" in c:
        text += f"; {comparison_text(c, 'bf16', 'predicted_fp8_gain')}"
    if c.get("predicted_fp8_gain", 1.0) < 0:  # slower here anyway (host-bound FP8: TE's quantizer launches)
        return text + ": BF16 is the faster choice on moetune's own numbers; measure both precisions."
    return text + (f". Its {_format(c)} gain is optimistic here (quantization is charged at the rate Transformer "
                   "Engine's benchmark measures on a hidden-4096 model, and weighs more on a narrower one): measure "
                   "both precisions.")
