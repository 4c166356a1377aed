"""bridge_overrides.py says truly what it leaves to the recipe: its docstring had named fp8_param_gather among "the
recipe's own tuning" that stays, while the body of a plan's file sets that field (every plan writes it:
planner/knob_fields.py, the weights the memory wall sized)."""

import ast
import json
import re

import pytest
from emit_plans import PLANS

from moetune.configio import load_config
from moetune.emit import emit_all


def _snippet(config: dict) -> tuple[list[str], set[str]]:
    """(the fields the docstring says the recipe keeps, the fields the body assigns) of CONFIG's file."""
    tree = ast.parse(emit_all(config)["bridge_overrides.py"])
    kept = re.search(r"leaves unset\s*\(([^)]*)\)", ast.get_docstring(tree)).group(1).split(", ")
    assigned = {key.value for node in ast.walk(tree) if isinstance(node, ast.Dict) for key in node.keys
                if isinstance(key, ast.Constant)}
    return kept, assigned


def _config(name: str, **changes) -> dict:
    return load_config(sets=[f"{k}={json.dumps(v) if not isinstance(v, str) else v}"
                             for k, v in {**PLANS[name], **changes}.items()])


def test_a_plan_s_file_does_not_say_the_recipe_keeps_what_it_sets():
    from moetune.layout.knobs import Knobs
    from moetune.layout.layout import Layout
    from moetune.layout.validate import Workload
    from moetune.planner.config_map import to_config
    from moetune.planner.estimate import estimate
    from moetune.specs.hardware import load_gpu
    from moetune.specs.registry import load_model

    planned = to_config(estimate(load_model("qwen3-30b-a3b"), load_gpu("h100"), Layout(world_size=8, ep=8),
                                 Workload(seq_length=4096, micro_batch_size=1, global_batch_size=64),
                                 Knobs(precision="fp8-blockwise", dispatcher="deepep"), with_time=False))
    kept, assigned = _snippet(planned)
    assert "fp8_param_gather" in assigned and "fp8_param_gather" not in kept
    assert "fp8_dot_product_attention" in kept and not set(kept) & assigned


@pytest.mark.parametrize("name", sorted(PLANS))
def test_what_it_says_the_recipe_keeps_it_does_not_set(name):
    kept, assigned = _snippet(_config(name))
    assert kept and not set(kept) & assigned


def test_a_tuning_field_the_config_sets_is_not_said_to_be_the_recipe_s():
    kept, assigned = _snippet(_config("dsv3_gb200_hybridep", **{"mixed_precision.fp8_wgrad": False}))
    assert "fp8_wgrad" in assigned and "fp8_wgrad" not in kept
