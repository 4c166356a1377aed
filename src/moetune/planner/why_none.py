"""Why `plan` found no legal layout: one line naming the pinned value (or the batch size) at fault and the
rule it breaks, instead of a generic "check your flags".

The search drops illegal layouts silently (enumerate.py); when nothing is left, this re-asks the layout rules
(layout/validate.py, pipeline.py) about the user's pins one at a time, so the message quotes the same rule
`estimate` would quote for that layout.
"""

from moetune.errors import MoetuneError
from moetune.layout.layout import Layout
from moetune.layout.pipeline import pipeline_chunks
from moetune.layout.validate import Workload, validate_shapes, validate_workload
from moetune.planner.enumerate import MBS_CHOICES, enumerate_layouts, pipeline_variants
from moetune.specs.hardware import GpuSpec
from moetune.specs.model import ModelSpec

LAYOUT_KEYS = ("tp", "cp", "pp", "vpp", "ep", "etp")


def _rule_broken(spec: ModelSpec, world: int, wl: Workload, pins: dict) -> str | None:
    """The layout rule these pins break on their own (the other dimensions at 1), or None when some completion
    could be legal. The layer split is judged only when no split of the planner's fits (pipeline_variants): uneven
    or embedding/loss-weighted stages can rescue a PP the even split refuses."""
    vpp = pins.get("vpp", 1)
    try:
        lay = Layout(world_size=world, **{**pins, "vpp": vpp})
        validate_shapes(spec, lay)
        validate_workload(lay, Workload(seq_length=wl.seq_length, micro_batch_size=1,
                                        global_batch_size=lay.dp))
        if lay.pp > 1 and not pipeline_variants(spec.num_layers, lay.pp, vpp, spec.mtp_num_layers):
            pipeline_chunks(lay, spec.num_layers, spec.mtp_num_layers)  # raises with the layer counts
    except MoetuneError as err:
        return str(err)
    return None


def _pins_text(pins: dict) -> str:
    return " ".join(f"--fix {k}={v}" for k, v in pins.items())


def _gbs_reason(spec: ModelSpec, gpu: GpuSpec, world: int, wl: Workload, fixed: dict, pins: dict) -> str | None:
    """The batch-size reason, when the pins have legal layouts once any GBS is allowed (GBS = world size is
    divisible by every DP)."""
    free = Workload(seq_length=wl.seq_length, micro_batch_size=1, global_batch_size=world)
    dps = sorted({lay.dp for lay in enumerate_layouts(spec, gpu, world, free, pins)})
    if not dps:
        return None
    mbs = [fixed["mbs"]] if "mbs" in fixed else list(MBS_CHOICES)
    where = f" with {_pins_text(pins)}" if pins else ""
    return (f"global batch size ({wl.global_batch_size}) is divisible by no DP x micro-batch size{where} (DP "
            f"{', '.join(map(str, dps))}; MBS {', '.join(map(str, mbs))}); choose a GBS one of them divides")


def no_layout_reason(spec: ModelSpec, gpu: GpuSpec, world: int, wl: Workload, fixed: dict) -> str:
    """One line: which pin (or the GBS) leaves no legal layout, and why."""
    pins = {k: fixed[k] for k in LAYOUT_KEYS if k in fixed}
    for key, value in pins.items():
        if enumerate_layouts(spec, gpu, world, wl, {key: value}):
            continue
        why = (_rule_broken(spec, world, wl, {key: value}) or _gbs_reason(spec, gpu, world, wl, fixed, {key: value})
               or f"no legal layout of {spec.name} on {world} GPUs has {key}={value}")
        return f"--fix {key}={value}: {why}"
    if len(pins) > 1 and not enumerate_layouts(spec, gpu, world, wl, pins):
        why = (_rule_broken(spec, world, wl, pins) or _gbs_reason(spec, gpu, world, wl, fixed, pins)
               or "drop one of them")
        return f"{_pins_text(pins)} are each legal but not together on {world} GPUs: {why}"
    return (_gbs_reason(spec, gpu, world, wl, fixed, pins)
            or f"no layout satisfies the model's shapes on {world} GPUs; change --gpus")
