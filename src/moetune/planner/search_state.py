"""One search's inputs and running state (Search): the best candidates so far, the bound they set, and which rows of a
knob set's batch fit in memory and meet the knobs' prerequisites (with the GEMM-shape note plan gives when FP8/FP4
shapes refuse every candidate that fits).
"""

from dataclasses import dataclass, field

import numpy as np

from moetune.errors import MoetuneError
from moetune.layout.gemm_shapes import Widths, gemm_refusal, gemm_shapes_ok
from moetune.layout.knobs import Knobs
from moetune.layout.layout import Layout
from moetune.layout.ranks import hybridep_spans_on
from moetune.layout.validate import Workload
from moetune.planner.defaults import default_dispatcher
from moetune.specs.hardware import GpuSpec
from moetune.specs.model import ModelSpec
from moetune.walls.batch_bytes import batch_host_bytes, batch_memory
from moetune.walls.batch_layouts import distinct_shapes


def _fits(spec: ModelSpec, gpu: GpuSpec, batch, wl: Workload, knobs: Knobs, overheads: dict,
          roomy_bytes: float = np.inf) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(rows that fit and run, rows that also leave moves.TIGHT_SHARE of the GPU free: peak <= roomy_bytes, rows
    that fit in memory before the knobs' prerequisites are asked)."""
    try:
        gpu.peak_tflops(knobs.precision)
    except MoetuneError:
        return np.zeros(batch.size, bool), np.zeros(batch.size, bool), np.zeros(batch.size, bool)
    peak = batch_memory(spec, batch, wl.seq_length, wl.global_batch_size, knobs, overheads, arch=gpu.arch)
    fits = peak <= gpu.capacity_bytes
    if knobs.optimizer_offload_fraction > 0 and gpu.host_capacity_bytes is not None:  # and the host holds the rest
        fits &= batch_host_bytes(batch, knobs) <= gpu.host_capacity_bytes
    in_memory = fits.copy()
    fits = _runs(fits, batch, knobs, gpu, spec, wl.seq_length)
    return fits, fits & (peak <= roomy_bytes), in_memory


def _runs(fits: np.ndarray, batch, knobs: Knobs, gpu: GpuSpec, spec: ModelSpec, seq: int) -> np.ndarray:
    """The rows of `fits` whose knobs' prerequisites the layout meets (`Search.fits` counts the ones that fit in
    memory and fail only here, so plan's "nothing fits" can tell the two causes apart)."""
    f = batch.fields
    if knobs.precision != "bf16":  # the tokens per rank and per-rank widths its GEMMs accept (estimate refuses alike)
        fits &= _gemm_shapes(batch, spec, gpu, knobs.precision, seq)
    if knobs.dispatcher == "hybridep":  # on a rack each HybridEP EP group must lie in one of the job's NVLink domains
        # (rule dispatcher.hybridep_ep_exceeds_domain); across 8-GPU nodes it reaches the other nodes over RDMA
        # (Bridge's H100 DeepSeek-V3 recipe: EP64)
        fits &= hybridep_spans_on(gpu, f.world_size.flat[0], f.ep[:, 0], f.etp[:, 0])
    if knobs.dispatcher == "hybridep" and "full_iteration" in knobs.cuda_graph_scope:  # the TE op fuser that
        # config_map.STATIC_EXPERTS writes there fuses the experts only at ETP 1 (rule compute.op_fuser_expert_tp)
        fits &= f.etp[:, 0] == 1
    if knobs.dispatcher != "alltoall":  # at EP=1 no token leaves the rank: a flex backend is the alltoall run again,
        fits &= f.ep[:, 0] > 1  # so it is listed once (estimate defaults EP=1 to alltoall likewise)
    if knobs.ep_overlap:  # EP-overlap prerequisites (seeds/003): EP > 1, and VPP whenever PP > 1
        fits &= (f.ep[:, 0] > 1) & ((f.pp[:, 0] == 1) | (f.vpp[:, 0] > 1))
    return fits


def _gemm_shapes(batch, spec: ModelSpec, gpu: GpuSpec, precision: str, seq: int) -> np.ndarray:
    """The rows whose GEMM shapes this FP8/FP4 recipe accepts (layout/gemm_shapes.py), judged once per distinct
    (MBS, TP, CP, ETP, SP) shape and recipe of the plan's batch."""
    def make() -> np.ndarray:
        u, inverse = distinct_shapes(batch.root())
        ok = gemm_shapes_ok(Widths.of(spec), precision, gpu.arch, seq=seq, mbs=u.mbs[:, 0], tp=u.tp[:, 0],
                            cp=u.cp[:, 0], sp=u.sp[:, 0], etp=u.etp[:, 0])
        return np.broadcast_to(ok, u.mbs[:, 0].shape)[inverse]
    root = batch.root().memo(("gemm_shapes", precision, seq), make)
    return root if batch.origin is None else batch.memo(("gemm_shapes", precision, seq), lambda: root.take(batch.rows))


@dataclass(kw_only=True, slots=True)
class Search:
    """One search's inputs and running state: the best candidates so far and the bound they set."""
    spec: ModelSpec
    gpu: GpuSpec
    wl: Workload
    eff: dict
    overheads: dict  # the memory wall's, with the user's on top
    user_overheads: dict | None  # the user's --overheads figures alone (estimate merges them itself)
    top: int
    resplit: bool  # re-split the leading candidates' pipeline ranks (not when --fix pipeline_layout pins the string)
    progress: object
    total: int
    roomy_bytes: float = np.inf  # a peak at most this leaves moves.TIGHT_SHARE of the (whole) GPU free
    done: int = 0  # knob sets weighed (search_grid: timed, or bounded out)
    bounded: int = 0  # knob sets a recompute floor weighed without timing them (search_grid._Floors)
    feasible: int = 0
    bound: float = np.inf  # candidates slower than this cannot reach the top (ranking.bound)
    memory_fits: bool = False  # some candidate fit in memory under some knob set, prerequisites aside
    # where candidates fit in memory but none runs: the GEMM shape an FP8/FP4 recipe refused in one of them
    gemm_note: str | None = None
    # the FP8/FP4 recipes with candidates that fit in memory, and whether their GEMM shapes let any of those run:
    # where none, a BF16 pick says why (planner/shape_note.py)
    quantized_in_memory: set = field(default_factory=set)
    quantized_shapes_ok: bool = False
    best: list = field(default_factory=list)  # (step seconds, preference, layout, mbs, knobs, re-split bound)
    fastest: list = field(default_factory=list)  # the `kept` least step seconds of `best` as the search fills it
    short_cp: bool = False  # collect short_cp_best: a search that shows plan's note, below the long-context regime
    # below the long-context regime, the fastest CP > 1 candidates by their own prediction (the ranking weighs CP
    # there: ranking.cp_weight), so plan can say where the weight hid a faster layout: (reach, layout, mbs, knobs)
    short_cp_best: list = field(default_factory=list)
    dispatchers: frozenset = frozenset()  # the dispatchers the grid searches
    defaults: dict = field(default_factory=dict)  # (EP, ETP) -> dispatcher(): it depends on the expert mesh alone
    # the re-split's time-only estimates by (layout, MBS, batch_keys.step_key): knob sets priced alike (DeepEP and
    # HybridEP on Hopper) share them, each still fitted under its own knobs (planner/resplit.py _evaluator)
    step_estimates: dict = field(default_factory=dict)

    def dispatcher(self, lay: Layout) -> str | None:
        """The layout's default dispatcher, which ranking.preference favours among near-ties: the platform's where
        it runs, alltoall at EP 1 and where no flex backend spans the EP group (defaults.default_dispatcher), not the
        platform's alone, which an EP-1 layout cannot run. None where the search does not run it (--fix
        dispatcher=alltoall on H100): no candidate of that layout runs its default, so none is ranked down."""
        key = (lay.ep, lay.etp)
        if key not in self.defaults:
            default = default_dispatcher(self.gpu, lay)
            self.defaults[key] = default if default in self.dispatchers else None
        return self.defaults[key]

    @property
    def kept(self) -> int:
        """Candidates each knob set may add, and the rank whose time bounds the rest: 4 x top, at least 20."""
        return max(4 * self.top, 20)

    def fits(self, batch, knobs: Knobs) -> np.ndarray:
        fits, roomy, in_memory = _fits(self.spec, self.gpu, batch, self.wl, knobs, self.overheads, self.roomy_bytes)
        self.feasible += int(fits.sum())
        self.memory_fits |= bool(in_memory.any())
        if knobs.precision != "bf16" and in_memory.any():
            self.quantized_in_memory.add(knobs.precision)
            self.quantized_shapes_ok = self.quantized_shapes_ok or bool(
                (in_memory & _gemm_shapes(batch, self.spec, self.gpu, knobs.precision, self.wl.seq_length)).any())
        if self.gemm_note is None and knobs.precision != "bf16" and in_memory.any() and not fits.any():
            i = int(np.argmax(in_memory))
            lay = batch.layout(i)
            self.gemm_note = gemm_refusal(Widths.of(self.spec), knobs.precision, self.gpu.arch,
                                          seq=self.wl.seq_length, mbs=int(batch.mbs[i, 0]), tp=lay.tp, cp=lay.cp,
                                          sp=lay.sp, etp=lay.etp)
        return fits, roomy
