"""What the published NVFP4-vs-MXFP8 pairs of a MoE model (data/nvfp4_moe_pairs.toml) say about an NVFP4 run.

moetune predicts NVFP4 well over MXFP8 on MoE models (+13% on Kimi-K2 over 256 GB300 and on Nemotron-3-Nano over
8 B300, each on its published MXFP8 configuration, R201 and R250; tests/planner/test_nvfp4_evidence.py holds the
gap), from Transformer Engine's GEMM rates alone (efficiency.toml rate_nvfp4, docs/time.md): no published MoE run
in NVFP4 calibrates it (published_runs.csv has none). The only published MoE pairs, Nemotron 3 Super in Megatron
Bridge's performance summary, measured NVFP4 at 0.88-1.03x of MXFP8. So wherever `estimate`,
`explain` or `plan` lands on NVFP4 it sets moetune's gain over the same configuration in MXFP8 beside those pairs,
as the FP8 caveat (fp8_evidence.py) sets its FP8 gain beside the FP8-vs-BF16 pairs.
"""

from functools import cache

from moetune.files import shipped_toml
from moetune.planner.estimate import Estimate
from moetune.planner.fp8_evidence import comparison, comparison_text, same_config_in
from moetune.planner.runs import published_rows

NVFP4 = "nvfp4"
BASE = "mxfp8"  # the recipe each pair measured NVFP4 against, and the one the caveat compares with
GAIN = "predicted_nvfp4_gain"
LABEL = "NVFP4-vs-MXFP8 caveat"  # "NVFP4 caveat" is the FP8 caveat's label for a narrow model's NVFP4 (vs BF16)
SOURCE = ("Megatron Bridge's performance summary, NeMo 26.04.01 container: "
          "docs/fern/versions/nightly/pages/performance-summary.mdx @067f987")


@cache
def _pairs() -> tuple[dict, ...]:
    return tuple(shipped_toml("nvfp4_moe_pairs.toml")["pair"])


def published_nvfp4_runs() -> int:
    """NVFP4 runs in published_runs.csv: none today, so moetune's NVFP4 gain is calibrated on no measured run."""
    return sum(r["precision"] == NVFP4 for r in published_rows().values())


def evidence() -> dict:
    """The pairs in brief: measured NVFP4/MXFP8 range, each pair's system and ratio, the source. Built afresh on each
    call (four pairs, read once by _pairs): every caveat gets dicts and lists of its own, none shared through a cache
    for one caller's change to reach the next."""
    pairs = [{**p, "measured_nvfp4_over_mxfp8": p["nvfp4"] / p["mxfp8"], "same_layout": "tp_mxfp8" not in p}
             for p in _pairs()]
    ratios = [p["measured_nvfp4_over_mxfp8"] for p in pairs]
    return {"model": "Nemotron 3 Super, a latent MoE moetune does not model", "source": SOURCE,
            "measured_nvfp4_over_mxfp8": [min(ratios), max(ratios)], "pairs": pairs,
            "published_nvfp4_runs": published_nvfp4_runs()}


def applies(e: Estimate) -> bool:
    return e.knobs.precision == NVFP4


def caveat(e: Estimate) -> dict | None:
    """For an NVFP4 configuration: moetune's gain over the same configuration in MXFP8, beside the measured pairs."""
    if not applies(e):
        return None
    return {"precision": NVFP4, **evidence(),
            **comparison(e, same_config_in(e, BASE), "the same configuration in MXFP8", BASE, GAIN)}


def caveat_text(c: dict) -> str:
    lo, hi = c["measured_nvfp4_over_mxfp8"]
    odd = [p for p in c["pairs"] if not p["same_layout"]]
    systems = ", ".join(f"{p['gpus']} x {p['system'].upper()}" for p in c["pairs"])
    other_tp = "".join(f"; {p['system'].upper()}'s {p['measured_nvfp4_over_mxfp8']:.2f} ran NVFP4 on TP {p['tp']} "
                       f"against MXFP8's TP {p['tp_mxfp8']} ({p['why']})" for p in odd)
    slower = "MXFP8 is the faster choice on moetune's own numbers too. " if c[GAIN] < 0 else ""
    calibrated = ("that is uncalibrated: no published MoE run in NVFP4 calibrates it (data/published_runs.csv has none)"
                  if c["published_nvfp4_runs"] == 0 else
                  f"checked against {c['published_nvfp4_runs']} NVFP4 run(s) of data/published_runs.csv")
    return (f"{comparison_text(c, BASE, GAIN)}, a gain {calibrated}. The only published MoE "
            f"NVFP4-vs-MXFP8 pairs ({c['model']}, on {systems}; {c['source']}) measured NVFP4 at {lo:.2f}-{hi:.2f}x "
            f"of MXFP8{other_tp}. {slower}Measure both precisions.")


def caveat_line(c: dict, subject: str = "this configuration") -> str:
    return f"[bold]{LABEL}[/bold]: {subject} runs {NVFP4}; {caveat_text(c)}"
