"""A user's own measured runs, and the per-GPU constants that fit them (``moetune calibrate --runs FILE``).

The published runs fix moetune's constants for the catalog GPUs under the releases they measured; a cluster of one's
own (another NIC, another container, a tuned kernel) runs faster or slower. A CSV with published_runs.csv's columns,
one row per measured run, refits the two per-GPU multipliers on the shipped constants (compute: GEMM, FP8 GEMM and
elementwise rates together; all-to-all: the efficiencies of the dispatchers the runs use, together), keeping the
constants shared by all GPUs (host CPU cost, the fused all-to-all's per-token and per-SM costs) as shipped: a handful
of runs cannot pin them. The two multipliers are fitted apart only where the runs tell them apart: MIN_RUNS_FOR_A2A
runs or more (two multipliers would fit two runs exactly and say nothing), enough exposed all-to-all, and a mix of
compute and all-to-all that differs between runs (a2a_unpinned). Where they do not, one multiplier moves both (TIED):
the cluster is taken as evenly off the shipped constants. Holding the all-to-all as shipped instead had put the whole
gap on compute: three GB200 Qwen3-30B-A3B runs measured 10% under the published R176/R194/R212 (13-15% under the
shipped prediction; 35-46% of their step in all-to-all, 13-19% in attention, which no multiplier moves) gave compute
x 0.697, and an EP1 plan, all compute, then lost 22.5% where the runs had lost 13-15%. The result is an --efficiency
file for estimate, plan and explain. planner/user_runs_csv.py reads the CSV.
"""

import math
from itertools import product
from pathlib import Path

import numpy as np

from moetune.errors import MoetuneError
from moetune.planner.calibrate import (
    A2A_KEYS,
    COMPUTE_KEYS,
    capped,
    mean_log_error,
    predict,
    refine,
    with_params,
)
from moetune.planner.runs import Run
from moetune.specs.hardware import GpuSpec, catalog, catalog_unchanged
from moetune.walls.efficiency import FITTED_ARCH, efficiency

MIN_RUNS_FOR_A2A = 3
# The all-to-all multiplier is fitted only where the runs pin it apart from compute (a2a_unpinned). Each run's share
# of step that scales with either multiplier is measured over a slowdown of SHARE_STEP. Some run must show at least
# MIN_A2A_SHARE of its step in exposed all-to-all, and the runs' all-to-all shares must differ from a multiple of
# their compute shares by MIN_A2A_CONTRAST (the norm of the difference): a run measured 3% off moves the fitted
# multiplier by about 3% / contrast, 20% at this bound. Recovered in the tests with runs of 5-58% all-to-all
# (contrast 0.9); three runs of one configuration that differ in batch size alone show under 1% and 0.004.
SHARE_STEP = 1.25
MIN_A2A_SHARE = 0.05
MIN_A2A_CONTRAST = 0.15
SCALE_BOUNDS = (0.25, 4.0)  # multipliers on the shipped constants


def a2a_keys(runs: list[Run]) -> tuple[str, ...]:
    """The all-to-all efficiencies the runs exercise: their dispatchers' (allgather has none), where EP > 1."""
    used = {f"a2a_eff_{r.knobs.dispatcher}" for r in runs if r.layout.ep > 1}
    return tuple(k for k in A2A_KEYS if k in used)


# The multipliers fitted, in groups that move as one: compute alone (runs without all-to-all), both apart (runs that
# pin them), or both as one (TIED: runs that cannot tell them apart)
COMPUTE_ONLY = (("compute_scale",),)
APART = (("compute_scale",), ("a2a_scale",))
TIED = (("compute_scale", "a2a_scale"),)


def _fit(runs: list[Run], base: dict, keys: tuple[str, ...], groups: tuple[tuple[str, ...], ...]) -> dict[str, float]:
    """compute_scale and a2a_scale on `base`, each of `groups` one multiplier (a multiplier in none stays 1): a log
    grid, then shrinking multiplicative steps."""
    grid = np.geomspace(*SCALE_BOUNDS, 13)
    heads = [g[0] for g in groups]

    def full(p: dict) -> dict:
        return {"compute_scale": 1.0, "a2a_scale": 1.0, **{k: p[g[0]] for g in groups for k in g}}

    def loss(p: dict) -> float:
        return mean_log_error(runs, with_params(base, full(p), keys))

    start = min((dict(zip(heads, map(float, point), strict=True)) for point in product(grid, repeat=len(heads))),
                key=loss)
    return full(refine(start, dict.fromkeys(heads, SCALE_BOUNDS), loss, steps=(1.2, 1.1, 1.05, 1.025, 1.01)))


def step_shares(run: Run, base: dict, params: dict, keys: tuple[str, ...]) -> tuple[float, float]:
    """(compute, all-to-all): the share of the run's step that scales with each multiplier, d log(step) / d log
    (1 / multiplier), over a slowdown of SHARE_STEP (an all-to-all that stays hidden under it counts as none)."""
    def step(compute: float, a2a: float) -> float:
        eff = with_params(base, {**params, "compute_scale": params["compute_scale"] / compute,
                                 "a2a_scale": params["a2a_scale"] / a2a}, keys)
        return 1 / predict(run, eff).predicted

    at = step(1, 1)
    return (math.log(step(SHARE_STEP, 1) / at) / math.log(SHARE_STEP),
            math.log(step(1, SHARE_STEP) / at) / math.log(SHARE_STEP))


def a2a_unpinned(runs: list[Run], base: dict, params: dict, keys: tuple[str, ...]) -> str | None:
    """Why these runs cannot fit the all-to-all multiplier apart from the compute one (None: they can). Fitted apart
    where they cannot, it trades off against compute along a valley the runs do not see (three runs of one
    configuration, all-to-all hidden under EP overlap, gave compute x 1.55 and all-to-all x 0.25 for a cluster at 0.8
    and 0.5, every run within 0.2%), and the pair predicts wrong wherever the all-to-all shows: fit_user_runs ties
    them instead."""
    if not keys:
        return "none of your runs moves tokens by all-to-all (EP 1, or the allgather dispatcher)"
    if len(runs) < MIN_RUNS_FOR_A2A:
        return (f"{len(runs)} run(s): two multipliers would fit them exactly and say nothing "
                f"({MIN_RUNS_FOR_A2A} runs or more fit both)")
    shares = np.array([step_shares(r, base, params, keys) for r in runs])
    compute, a2a = shares[:, 0], shares[:, 1]
    if a2a.max() < MIN_A2A_SHARE:
        return f"your runs expose too little all-to-all to fit it: at most {100 * a2a.max():.1f}% of their step"
    # what of the all-to-all shares a compute multiplier cannot mimic: their part orthogonal to the compute shares
    contrast = float(np.linalg.norm(a2a - compute * (compute @ a2a) / max(compute @ compute, 1e-12)))
    if contrast < MIN_A2A_CONTRAST:
        return (f"your runs split their step between compute ({100 * compute.min():.0f}-{100 * compute.max():.0f}%) "
                f"and all-to-all ({100 * a2a.min():.0f}-{100 * a2a.max():.0f}%) too alike to tell the two apart; "
                "add a run with another mix (EP size, dispatcher, node count or model)")
    return None


def gpu_label(gpu: GpuSpec) -> str:
    """A run's GPU as the user gave it: the catalog name, or the cluster file's name."""
    return Path(gpu.source).name if gpu.ref != gpu.key else gpu.key


def shipped_of(gpu_key: str) -> str:
    """Whose shipped constants a GPU runs on: its catalog GPU's, or (another architecture: hardware._family) the
    priors every GPU starts from."""
    return f"{gpu_key}'s shipped constants" if gpu_key in catalog() else "the shipped default priors"


def by_gpu(runs: list[Run]) -> dict[str, list[Run]]:
    """The runs per GPU the user gave, by label. Two cluster files are two GPUs even where both are modelled on H100's
    constants (gpu.key): another NIC or another GPU runs at its own rates, so each is fitted on its own. A label two
    files share (two h800.toml in different folders) is their full path."""
    refs = sorted({r.gpu.ref for r in runs})
    names = [gpu_label(next(r.gpu for r in runs if r.gpu.ref == ref)) for ref in refs]
    return {(name if names.count(name) == 1 else ref): [r for r in runs if r.gpu.ref == ref]
            for ref, name in zip(refs, names, strict=True)}


def sections(groups: dict[str, list[Run]]) -> dict[str, str | None]:
    """Where each GPU's constants go in the written --efficiency file: under its catalog name (every GPU a catalog
    GPU unchanged), or at the top level (one GPU, a cluster file's: --efficiency reads a section by catalog name
    only, and [h100] would apply to catalog H100 and to every other file modelled on it). One line naming the GPUs
    when the runs mix a cluster file's GPU with others."""
    gpus = {label: rs[0].gpu for label, rs in groups.items()}
    keys = [g.key for g in gpus.values()]
    if all(catalog_unchanged(g) for g in gpus.values()) and len(set(keys)) == len(keys):
        return {label: g.key for label, g in gpus.items()}
    if len(gpus) == 1:
        return dict.fromkeys(gpus)
    raise MoetuneError(f"--write: your runs are on {len(gpus)} GPUs ({', '.join(gpus)}) and an --efficiency file "
                       "holds one set of constants for a cluster file's GPU (its sections are catalog names, which "
                       "every file modelled on that GPU shares); put each GPU file's runs in a CSV of its own and "
                       "calibrate each")


def fit_user_runs(runs: list[Run]) -> dict[str, dict]:
    """Per GPU of the runs (by_gpu): the multipliers found and the constants they give (on the shipped ones of the
    catalog GPU it is modelled on). The all-to-all multiplier moves only the efficiencies of the dispatchers the runs
    use; apart from compute where the runs pin it, else with it (`tied`; a2a_unpinned says why, in `a2a_note`)."""
    out = {}
    for label, mine in by_gpu(runs).items():
        gpu = mine[0].gpu
        base, keys = efficiency(gpu.key), a2a_keys(mine)
        params = _fit(mine, base, keys, COMPUTE_ONLY)
        note = a2a_unpinned(mine, base, params, keys)
        if keys:
            params = _fit(mine, base, keys, TIED if note else APART)
        constants = with_params(base, params, keys)
        out[label] = {**params, "gpu": gpu.ref, "gpu_key": gpu.key, "catalog_unchanged": catalog_unchanged(gpu),
                      "runs": len(mine), "constants": constants, "a2a_keys": list(keys), "a2a_note": note,
                      "tied": bool(keys) and note is not None, "limits": _limits(params, base, constants, keys)}
    return out


def multipliers(f: dict) -> str:
    """A GPU's refit in words (fit_user_runs' entry): each multiplier, or the one both share where the runs could not
    tell them apart, or compute's alone where they move no tokens by all-to-all."""
    keys = ", ".join(f["a2a_keys"])
    if f["tied"]:
        return f"compute and all-to-all ({keys}) x {f['compute_scale']:.3f} together"
    if not keys:
        return f"compute x {f['compute_scale']:.3f}, all-to-all as shipped"
    return f"compute x {f['compute_scale']:.3f}, all-to-all x {f['a2a_scale']:.3f} ({keys})"


def _limits(params: dict, base: dict, constants: dict, a2a: tuple[str, ...]) -> list[str]:
    """The multipliers the fit left at a bound, or whose constants hit their cap (calibrate.with_params), with
    the multiplier each got in effect: there the runs ask for more than the model allows, and the refit does not meet
    them. `a2a`: the all-to-all efficiencies fitted (none: the multiplier stayed at 1)."""
    out = [f"{k} at its bound {params[k]:g}" for k in ("compute_scale", "a2a_scale") if params[k] in SCALE_BOUNDS]
    scale = {**dict.fromkeys(COMPUTE_KEYS, params["compute_scale"]), **dict.fromkeys(a2a, params["a2a_scale"])}
    held = capped(base, constants, scale)
    shipped = [k for k, f in held.items() if f <= 1 + 1e-9]  # the shipped value is the cap already
    return out + ([f"capped: {', '.join(f'{k} (x{f:.2f} in effect)' for k, f in held.items())}" + (
        f" ({', '.join(shipped)} shipped at the cap: the published runs ask for more too)" if shipped else "")]
                  if held else [])


def user_toml(fitted: dict, where: dict[str, str | None], by: str = "moetune calibrate --runs") -> str:
    """The fitted constants as an --efficiency file, each GPU's under the section `where` names (sections; None: at
    the top level); BY: the command that wrote it."""
    lines = [f"# Written by `{by}`: the shipped constants refitted to your measured runs.",
             "# Pass it to estimate, plan and explain with --efficiency."]
    for label, f in fitted.items():
        what = f"{f['runs']} run(s) on {label}; {multipliers(f)} on {shipped_of(f['gpu_key'])}"
        if where[label] is None:  # a cluster file's GPU: its architecture kept, so another's is refused the file
            lines.append(f"\n# Top level, for --gpu {f['gpu']}: {what}. They apply to a GPU of its architecture.")
            if (family := catalog().get(f["gpu_key"])) is not None:  # a GPU on the priors has no family to keep
                lines.append(f'{FITTED_ARCH} = "{family.arch}"')
        else:
            lines.append(f"\n[{where[label]}]  # {what}")
        lines += [f"{k} = {f['constants'][k]:.4g}" for k in (*COMPUTE_KEYS, *f["a2a_keys"])]
    return "\n".join(lines) + "\n"
