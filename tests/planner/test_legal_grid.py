"""legal_grid's fast judge (planner/legal.py _knob_judge: the probe's layout built once, derive without its layout
steps, each rule's verdict memoized on what it reads) says of every knob set what knob_errors says, one set at a
time, over the grids plan builds (search.py _plan_once: knob_grid, release_grid, then legal_grid) for models whose
knob rules differ, pinned --fix values that break rules among them: the same sets kept, in the same order, with the
same delay_wgrad and attention-graph narrowing."""

import sys
from pathlib import Path

import pytest

from moetune.configio import load_config
from moetune.errors import MoetuneError
from moetune.layout.knobs import Knobs
from moetune.planner import legal
from moetune.planner.config_map import to_config
from moetune.planner.knob_grid import TE_SCOPED, knob_grid
from moetune.planner.release_fit import release_grid
from moetune.planner.search import LAST_RESORT_OFFLOAD
from moetune.rules.derive import derive
from moetune.specs.hardware import load_gpu
from moetune.specs.hf_config import spec_from_hf
from moetune.specs.platform import platform_defaults
from moetune.specs.registry import load_model

TESTS = Path(__file__).resolve().parents[1]
FULL = ("full_iteration",)


def _model(name: str):
    """A built-in model; MiniMax-M2 with its checkpoint's 3 MTP layers; GLM-5, DeepSeek Sparse Attention (its test
    config: tests/oracle/dsa_configs.py, none ships built in)."""
    if name == "minimax-m2+mtp3":
        return load_model("minimax-m2").with_mtp(3)
    if name != "GLM5":
        return load_model(name)
    sys.path.insert(0, str(TESTS / "oracle"))
    from dsa_configs import GLM5
    return spec_from_hf(GLM5, name=name, origin="GLM5.json")


# (model, GPU, --fix pins, routing, release, the rule that refuses every set): MLA with dense layers and shared
# experts; gated delta-net; a Mamba hybrid; attention sinks and biases on Blackwell's full-iteration graphs; DSA, whose
# attention graph a rule refuses (cudagraph.dsa_attention: the narrowing); Llama 4's probabilities on the expert input
# (the op fuser's refusal); and pins that break rules: EP overlap beside 3 MTP layers (every set), delay_wgrad pinned
# (no narrowing), the graph scope pinned on DSA (no narrowing: every set), the last-resort expert offload beside
# HybridEP's paged stash, and a release that lacks some knobs' fields.
CASES = [
    ("deepseek-v3", "h100", {}, "dropless", None, None),
    ("deepseek-v3", "h100", {"optimizer_offload_fraction": [0.0]}, "dropless", None, None),
    ("qwen3-next-80b-a3b", "h100", {}, "dropless", None, None),
    ("nemotron3-nano-30b-a3b", "gb200", {}, "force-balance", None, None),
    ("gpt-oss-120b", "b200", {}, "force-balance", None, None),
    ("GLM5", "gb200", {}, "force-balance", None, None),
    ("llama4-scout", "gb200", {"precision": ["mxfp8"]}, "force-balance", None, None),
    ("minimax-m2+mtp3", "h100", {"ep_overlap": [True]}, "dropless", None, "ep_overlap.mtp_layers"),
    ("gpt-oss-120b", "b200", {"delay_wgrad": True}, "dropless", None, None),
    ("GLM5", "gb200", {"cuda_graph_scope": [TE_SCOPED]}, "dropless", None, "cudagraph.dsa_attention"),
    ("qwen3-30b-a3b", "gb200", {"offload_modules": LAST_RESORT_OFFLOAD, "dispatcher": ["hybridep"]}, "force-balance",
     None, None),
    ("qwen3-30b-a3b", "h100", {}, "dropless", "0.15", None),
]


def _grid(model, gpu, fixed, routing, release):
    spec, gpu_spec = _model(model), load_gpu(gpu)
    grid = knob_grid(spec, gpu_spec, platform_defaults(gpu_spec), fixed, routing)
    return spec, gpu_spec, release_grid(grid, release)[0] if release else grid


@pytest.mark.parametrize(("model", "gpu", "fixed", "routing", "release", "refused_all"), CASES)
def test_the_fast_judge_keeps_what_knob_errors_keeps(model, gpu, fixed, routing, release, refused_all, monkeypatch):
    spec, gpu_spec, grid = _grid(model, gpu, fixed, routing, release)
    flags = {"optional_delay_wgrad": "delay_wgrad" not in fixed, "optional_attn_graph": "cuda_graph_scope" not in fixed}
    fast = legal._knob_judge(spec, gpu_spec, 4096)
    asked: list[Knobs] = []

    def slow(*_):  # each set legal_grid asks of, judged as the plan judged it before: knob_errors, set by set
        def breaks(k: Knobs) -> bool:
            asked.append(k)
            return bool(legal.knob_errors(spec, gpu_spec, k, 4096))
        return breaks

    def kept(judge):
        monkeypatch.setattr(legal, "_knob_judge", judge)
        try:
            return legal.legal_grid(spec, gpu_spec, grid, 4096, **flags)
        except MoetuneError as err:
            return str(err)

    want = kept(slow)
    assert kept(lambda *_: fast) == want
    assert [fast(k) for k in asked] == [bool(legal.knob_errors(spec, gpu_spec, k, 4096)) for k in asked]
    assert any(fast(k) for k in asked)  # every case has sets the rules refuse
    if refused_all:
        assert f"no knob set passes the rule table ({refused_all})" in want
    else:
        assert want and all(isinstance(k, Knobs) for k in want)


def test_the_cases_narrow_as_legal_grid_does():
    """The cases reach both narrowings: a set refused only with delay_wgrad keeps EP overlap without it (gpt-oss's
    biased attention under an attention graph: ep_overlap.delay_wgrad_graph_bias), and a DSA set refused for its
    attention graph keeps the rest of the scope (cudagraph.dsa_attention)."""
    spec, gpu, grid = _grid("gpt-oss-120b", "b200", {}, "force-balance", None)
    out = legal.legal_grid(spec, gpu, grid, 4096)
    assert any(k.ep_overlap and not k.delay_wgrad and "attn" in k.cuda_graph_scope for k in out)
    spec, gpu, grid = _grid("GLM5", "gb200", {}, "force-balance", None)
    out = legal.legal_grid(spec, gpu, grid, 4096)
    assert any(k.cuda_graph_scope and "attn" not in k.cuda_graph_scope and k.cuda_graph_scope != FULL for k in out)
    assert not any("attn" in k.cuda_graph_scope for k in out)


def _knob_rule_names() -> frozenset[str]:
    return frozenset().union(*(r.when.names for r in legal.knob_rules().rules))


def _layout_blind(config: dict) -> None:
    """derive(config, layout=False) gives no fact derive(config) lacks, and every fact a knob rule reads as
    derive(config) gives it (present or absent alike): the facts it leaves out or leaves unnarrowed
    (recommended_backend, which the cluster's EP groups narrow) are read by none."""
    full, blind = derive(config), derive(config, layout=False)
    assert blind.keys() <= full.keys()
    differ = {f"derived.{k}" for k in full if blind.get(k, "absent") != full[k]}
    assert not differ & _knob_rule_names()
    assert differ - {"derived.recommended_backend"} <= {f"derived.{k}" for k in full.keys() - blind.keys()}


@pytest.mark.parametrize("case", CASES[::3])
def test_the_layout_steps_give_no_fact_a_knob_rule_reads_on_the_probes(case):
    spec, gpu_spec, grid = _grid(*case[:5])
    for k in grid:
        _layout_blind(to_config(legal._probe(spec, gpu_spec, k, 4096)))


def test_the_layout_steps_give_no_fact_a_knob_rule_reads_on_any_rule_case(tmp_path):
    """Every rule's breaking config (tests/rules/rule_cases.py) and the real Bridge recipes: configs that between them
    set every fact the table reads, laid out far from the probe's."""
    sys.path.insert(0, str(TESTS / "rules"))
    from rule_cases import CASES as RULE_CASES
    from rule_cases import FIXTURES, RECIPES
    for case in RULE_CASES.values():
        if case.gpu != "@cdna3":  # a cluster file the rule case test writes; its facts are the platform's
            _layout_blind(load_config(sets=case.sets, gpu=case.gpu, gpus=case.gpus))
    for name, (gpu, gpus) in RECIPES.items():
        _layout_blind(load_config([FIXTURES / name], gpu=gpu, gpus=gpus))
