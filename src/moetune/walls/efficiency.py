"""Efficiency constants of the step-time model: data/efficiency.toml, [default], the modelling priors of the GPU's
architecture ([priors.<arch>]) and its own ([priors.<gpu>]), the GPU's fitted table, then an optional user TOML (same
keys, flat or under the GPU's name)."""

import math
from functools import cache

from moetune.errors import MoetuneError
from moetune.files import FileTable, read_toml, shipped_toml
from moetune.layout.knobs import PRECISIONS
from moetune.specs.hardware import catalog


@cache
def _table() -> dict:
    return shipped_toml("efficiency.toml")


def efficiency(gpu_key: str, user: dict | None = None, *, priors_only: bool = False) -> dict[str, float]:
    """[default], the GPU's priors, then the GPU's section (fitted values; skipped with priors_only), then what the
    user's table sets for the GPU (checked where the file met the GPU: check_for_gpu)."""
    table = _table()
    out = {**table["default"], **priors(gpu_key), **({} if priors_only else table.get(gpu_key, {}))}
    return {**out, **user_constants(user, gpu_key)} if user else out


# A top-level key `calibrate --runs --write` sets beside constants fitted on a cluster file's GPU: the architecture of
# the runs, which a file used with another architecture's GPU would overwrite that GPU's own constants with
FITTED_ARCH = "fitted_arch"


def user_constants(user: dict, gpu_key: str) -> dict:
    """What a user's table sets for this GPU: its top-level constants, then its [gpu_key] section's over them."""
    return {**{k: v for k, v in user.items() if not isinstance(v, dict) and k != FITTED_ARCH},
            **user.get(gpu_key, {})}


def check_for_gpu(user: dict | None, gpu_key: str) -> dict | None:
    """A user's table (a FileTable names itself in errors) where it meets the GPU it is used with, once: it sets
    something for the GPU, each constant known and in its range, and beside the GPU's shipped values no all-to-all
    past its link nor recipe past its peak. Called where a file is loaded for a GPU (load_efficiency_file) and where
    a saved result's table meets its GPU (planner/from_json.py), so that efficiency() only merges."""
    if user is None:
        return None
    where, mine = getattr(user, "where", "efficiency file"), user_constants(user, gpu_key)
    family = catalog().get(gpu_key)  # None: a GPU on the priors, of no catalog family
    if (fitted := user.get(FITTED_ARCH)) is not None and family is not None and fitted != family.arch:
        raise MoetuneError(f"{where} was fitted on {fitted} runs ({FITTED_ARCH}), and its top-level constants would "
                           f"replace {gpu_key}'s own ({family.arch}): pass it with a {fitted} GPU, or calibrate "
                           f"--runs on {gpu_key} runs")
    if not mine:  # a file that changes nothing must not be reported as in use (sets_for)
        sections = ", ".join(f"[{k}]" for k, v in user.items() if isinstance(v, dict)) or "none"
        raise MoetuneError(f"{where} sets no constant for {gpu_key} (sections: {sections}): put them at the top "
                           f"level for every GPU, or in a [{gpu_key}] section")
    known, out = _table()["default"], {**efficiency(gpu_key), **mine}  # efficiency(gpu_key, user), built once
    if unknown := sorted(set(out) - set(known)):
        raise MoetuneError(f"{where}: unknown constant(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    for key, value in mine.items():
        _check(key, value, where)

    def origin(key: str, note: str = "") -> str:  # whose value it is: the file's, or the shipped one
        return f"{key} = {out[key]:g} ({'yours' if key in mine else f'shipped for {gpu_key}'}{note})"

    _check_links(out, where, origin)
    _check_peaks(out, where, origin)
    return user


def sets_for(user: dict, gpu_key: str) -> bool:
    """Whether a user's table sets any constant for this GPU: at the top level, or in its [gpu_key] section."""
    return bool(user_constants(user, gpu_key))


def priors(gpu_key: str) -> dict[str, float]:
    """A catalog GPU's modelling priors: its architecture's table, then its own over it, so that what a family shares
    is written once. Only catalog keys have an architecture here: a cluster file's GPU of another architecture runs
    under its file's name, which must not pick up a table that happens to share it."""
    gpu, tables = catalog().get(gpu_key), _table().get("priors", {})
    return {**tables.get(gpu.arch, {}), **tables.get(gpu_key, {})} if gpu else {}


def _check_links(eff: dict, where: str, origin) -> None:
    """An all-to-all efficiency multiplies the link's (nvlink_eff, nic_eff): the share of a link it achieves, their
    product, cannot pass 1. A user who lowers a link's efficiency may meet this with the shipped all-to-all values
    (H100's DeepEP 1.187 sits at 0.95 of a 0.8 link): the message says whose each value is and what to set."""
    link_key = max(("nvlink_eff", "nic_eff"), key=lambda k: eff[k])
    link = eff[link_key]
    over = [k for k in eff if k.startswith("a2a_eff_") and eff[k] * link > 1]
    if over:
        largest = math.floor(1000 / link) / 1000  # rounded down: the value suggested passes
        raise MoetuneError(f"{where}: {origin(over[0])} times {origin(link_key, '; the larger link efficiency')} is "
                           f"{eff[over[0]] * link:.2f} of the link, over 1; set "
                           f"{', '.join(f'{k} <= {largest:g}' for k in over)} beside {link_key} in the file")


def _check_peaks(eff: dict, where: str, origin) -> None:
    """A low-precision recipe's GEMMs run at fp8_gemm_eff x rate_<recipe> of the FP8 peak (compute.gemm_rate): at
    most the FP8 peak for an FP8 recipe, the FP4 peak for NVFP4 (the GPU is not known here: at most the largest FP4
    over FP8 peak of the catalog, GB300's 3)."""
    for rate, recipe in ((k, RECIPE_RATES[k]) for k in eff if k in RECIPE_RATES):  # in the table's order
        limit = fp4_over_fp8() if recipe == "nvfp4" else 1.0
        peak = f"the FP4 peak (at most {limit:g}x the FP8 peak on a catalog GPU)" if recipe == "nvfp4" else "it"
        product = eff["fp8_gemm_eff"] * eff[rate]
        if product > limit * (1 + 1e-9):
            raise MoetuneError(f"{where}: {origin('fp8_gemm_eff')} x {origin(rate)} = {product:.3g} puts {recipe} "
                               f"GEMMs at {product:.3g}x the FP8 peak, past {peak}; lower either so that their "
                               f"product is <= {limit:g}")


def rate_key(precision: str) -> str:
    """The efficiency.toml constant of a low-precision recipe's GEMM rate (compute.gemm_rate): rate_fp8_blockwise for
    fp8-blockwise."""
    return "rate_" + precision.replace("-", "_")


# Each low-precision recipe's GEMM-rate constant -> the recipe (rate_mxfp8 -> mxfp8), in PRECISIONS' order; and those
# whose GEMMs run at most at the FP8 peak, all but NVFP4's (the FP4 peak): what --efficiency (_check_peaks) and
# calibrate's FP8 cap (calibrate.with_params) both read
RECIPE_RATES = {rate_key(p): p for p in PRECISIONS if p != "bf16"}
FP8_RATES = tuple(k for k, recipe in RECIPE_RATES.items() if recipe != "nvfp4")


@cache
def fp4_over_fp8() -> float:
    """The largest FP4 peak over FP8 peak of a catalog GPU."""
    return max(g.fp4_tflops / g.fp8_tflops for g in catalog().values() if g.fp8_tflops > 0)


# The most of its peak a fitted compute efficiency may reach, and of a link's rate an all-to-all's achieved share
# (calibrate.with_params). Not 1: no GEMM, memory-bound kernel or link sustains its datasheet peak over a whole step,
# and runs the model under-predicts (or a user's mismeasured ones) would otherwise drive a multiplier to the peak
# itself. 0.95 is the best share of a link's per-direction datasheet rate measured for bulk transfers, a NIC's:
# NCCL's maintainers take 24 GB/s of nccl-tests busbw (which its doc/PERFORMANCE.md defines for comparing with the
# hardware peak) as the peak of a 200 Gb/s NIC's 25 GB/s, and 12 of 12.5 at 100 Gb/s, 0.96 (NVIDIA/nccl-tests#119;
# NVIDIA/nccl#412); DeepEP's normal kernels move 43-47 GB/s over a 400 Gb/s CX7's 50 on H800, 0.86-0.94 (its README
# at ebfe47e; the later table's 50-58 GB/s pass the line rate, as its test counts the tokens a node keeps too:
# tests/test_internode.py num_rdma_token_sent). NVLink measures lower, 0.77-0.80 of 200 GB/s a direction (400
# bidirectional): 160 GB/s busbw on 8 A800 (NVIDIA/nccl#412), DeepEP's 153-158 on H800 (the 160 it calls NVLink's
# maximum). Compute stays far under it (cuBLAS's large BF16 GEMMs ~0.75 of H100's peak, efficiency.toml gemm_eff;
# the fitted 0.32-0.56), so it binds the all-to-all alone: the HGX GPUs' DeepEP/HybridEP sit at 0.95 of the NIC.
# A user's --efficiency file may still set up to 1 (_range).
EFFICIENCY_CAP = 0.95

# The largest cost or factor a file may give (a microsecond, byte or GB/s count this large is a typo, and past it
# the step's arithmetic overflows to inf and nan), and the least fraction of a peak (below it a step runs for years)
MAX_CONSTANT, MIN_EFFICIENCY = 1e6, 1e-3


def _range(key: str) -> tuple[float, float, bool]:
    """(low, high, low excluded): efficiencies are fractions of a peak (a zero one would divide by zero), the
    hidden/exposed shares fractions of a time, the rest non-negative costs and factors up to MAX_CONSTANT."""
    if key.startswith("a2a_eff_"):  # a multiplier on nvlink_eff / nic_eff: _check_links bounds the product
        return MIN_EFFICIENCY, MAX_CONSTANT, False
    if key.endswith("_eff") or "_eff_" in key:  # attn_eff_hdim64 is a fraction of the peak too
        return MIN_EFFICIENCY, 1.0, False
    if key.startswith("rate_"):  # a recipe's GEMM rate over the reference FP8 rate: a zero one divides by zero
        return MIN_EFFICIENCY, MAX_CONSTANT, False
    if key.endswith("_hide") or "_hide_" in key or key == "p2p_exposed" or key.startswith(("graph_capture_",
                                                                                             "host_part_")):
        return 0.0, 1.0, False
    if key == "host_norm":  # a p-norm: 1 adds the CPU and GPU times, larger tends to their maximum
        return 1.0, 64.0, False
    return 0.0, MAX_CONSTANT, key in ("grouped_m_half", "fp8_host_factor", "cpu_optimizer_gbps", "mem_passes",
                                      "attn_keys_half", "a2a_gbps_per_sm")


def _check(key: str, value, where: str = "efficiency file") -> None:
    low, high, open_low = _range(key)
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if not number or not (low < value if open_low else low <= value) or not value <= high:  # nan fails it too
        span = f"{'(' if open_low else '['}{low:g}, {high:g}]"
        raise MoetuneError(f"{where}: {key} = {value!r} must be a number in {span}")


def check_file(user: dict, where: str) -> dict:
    """A user's efficiency file: constants at the top level (every GPU) or under a catalog GPU's section, each a
    known constant in its range; anything else is one error line naming the key and `where` (the file)."""
    known, gpus = _table()["default"], catalog()
    for key, value in user.items():
        if key == FITTED_ARCH:  # calibrate's note of the runs' architecture (check_for_gpu reads it)
            if value not in {g.arch for g in gpus.values()}:
                raise MoetuneError(f"{where}: {FITTED_ARCH} = {value!r}; one of "
                                   f"{', '.join(sorted({g.arch for g in gpus.values()}))}")
            continue
        if isinstance(value, dict) and key not in gpus:
            raise MoetuneError(f"{where}: section [{key}] is not a catalog GPU; use one of {', '.join(gpus)}, or put "
                               f"the constants at the top level for every GPU")
        if key in gpus and not isinstance(value, dict):
            raise MoetuneError(f"{where}: {key} = {value!r}; a GPU's constants go in a [{key}] section")
        for name, number in value.items() if isinstance(value, dict) else [(key, value)]:
            if name not in known:
                raise MoetuneError(f"{where}: unknown constant '{name}'; known: {', '.join(sorted(known))}")
            _check(name, number, where)
    return user


def load_efficiency_file(path: str | None, gpu_key: str | None) -> FileTable | None:
    """The user's --efficiency file, checked key by key, then with the shipped values of the GPU it is used with
    (check_for_gpu), its errors naming it; gpu_key None where the GPU is a saved result's, whose reader
    (planner/from_json.py) checks it there."""
    if not path:
        return None
    where = f"--efficiency {path}"
    table = FileTable(check_file(read_toml(path, "--efficiency"), where), where, path)
    return table if gpu_key is None else check_for_gpu(table, gpu_key)
