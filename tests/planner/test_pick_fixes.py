"""The fixes `explain` offers on real picks: applying one to the pick's config never adds a rule error (the recipe
audit found the platform-dispatcher fix asking a full-iteration HybridEP pick on H100 for DeepEP, which
cudagraph.full_iteration_static_experts refuses)."""

import pytest

from moetune.configio.normalize import Assignment, resolve
from moetune.layout.validate import Workload
from moetune.planner.config_map import to_config
from moetune.planner.rule_findings import findings
from moetune.planner.search import plan
from moetune.rules import evaluate
from moetune.specs.hardware import load_gpu
from moetune.specs.registry import load_model


def _errors(config: dict) -> set[str]:
    return {f.rule for f in evaluate(config, context="explain") if f.severity == "error"}


@pytest.mark.parametrize(("model", "gpu", "world", "gbs", "routing"), [
    ("qwen3-30b-a3b", "h100", 16, 512, "force-balance"),  # HybridEP with a full-iteration graph on H100
    ("gpt-oss-120b", "b200", 64, 1280, "force-balance"),
    ("deepseek-v3", "gb200", 256, 4096, "dropless"),
])
def test_no_offered_fix_adds_an_error(model, gpu, world, gbs, routing):
    pick = plan(load_model(model), load_gpu(gpu), world, Workload(seq_length=4096, global_batch_size=gbs), top=1,
                routing=routing).results[0]
    config = to_config(pick)
    before = _errors(config)
    for f in findings(pick):
        if f.fix:
            fixed = resolve(Assignment(key=k, value=v, origin="fix") for k, v in f.fix.items())
            assert not _errors({**config, **fixed}) - before, (f.rule, f.fix)


def _estimate(args: list[str]):
    """The estimate `moetune estimate ARGS` makes (its flags parsed by the command itself)."""
    from moetune.cli.estimate_cmd import command
    from moetune.cli.estimate_input import estimate_from_flags
    ctx = command.make_context("estimate", list(args))
    return estimate_from_flags(ctx.params.pop("model"), ctx.params)


@pytest.mark.parametrize("args", [
    # uneven stages without VPP: VPP 2 cannot split a 7-layer first stage, and EP overlap needs VPP at PP > 1
    ["kimi-k2", "--gpu", "h100", "--gpus", "512", "--pp", "8", "--ep", "64", "--first-stage-layers", "7",
     "--last-stage-layers", "6"],
    # a 'moe' recompute: EP overlap and a router graph are both refused beside it
    ["deepseek-v3", "--gpu", "h100", "--gpus", "1024", "--pp", "8", "--ep", "64", "--tp", "4", "--cp", "8",
     "--seq", "131072", "--gbs", "64", "--recompute-modules", "mla_up_proj,layernorm,moe,mlp",
     "--pipeline-layout", "Et|(tt|)*30mL", "--vpp", "4"],
])
def test_no_fix_on_an_audited_run_adds_an_error(args):
    """The explain audit's runs whose Check fixes were refused by moetune's own rules."""
    e = _estimate(args)
    config = to_config(e)
    before = _errors(config)
    found = findings(e)
    offered = [f for f in found if f.fix]
    # the audit's refused fixes (EP overlap beside PP without VPP or a 'moe' recompute; a router graph beside it) are
    # withdrawn, each naming the rule it would trip; what is still offered adds no error (plans set manual_gc, whose
    # fix this list had held too)
    assert {r for f in found for r in f.fix_withdrawn} & {"ep_overlap.pp_needs_vpp", "ep_overlap.moe_recompute"}
    for f in offered:
        fixed = resolve(Assignment(key=k, value=v, origin="fix") for k, v in f.fix.items())
        assert not _errors({**config, **fixed}) - before, (f.rule, f.fix)
