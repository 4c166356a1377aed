"""Built-in model names: exact in any case, and an unknown one names its nearest built-in."""

import pytest

from moetune.errors import MoetuneError
from moetune.specs.registry import builtin_names, load_model


def test_a_builtin_name_loads_in_any_case():
    """GPU names are case-insensitive (specs/hardware.py load_gpu); model names as a Hugging Face page spells them
    (Qwen3-30B-A3B) had been refused."""
    assert load_model("Qwen3-30B-A3B") == load_model("qwen3-30b-a3b")
    assert load_model("Qwen3-30B-A3B").name == "qwen3-30b-a3b"


@pytest.mark.parametrize(("typed", "meant"), [
    ("qwen3-nxt-80b", "qwen3-next-80b-a3b"),
    ("Qwen/Qwen3-30B-A3B-Instruct-2507", "qwen3-30b-a3b"),
    ("moonshotai/Kimi-K2-Instruct", "kimi-k2"),
    ("phi-3.5-moe-instruct", "phi-3.5-moe"),
])
def test_an_unknown_name_suggests_the_nearest_builtin(typed, meant):
    assert meant in builtin_names()
    with pytest.raises(MoetuneError) as err:
        load_model(typed)
    assert f"unknown model '{typed}' (did you mean {meant}?): use a built-in name (" in str(err.value)


def test_a_name_near_none_suggests_nothing():
    with pytest.raises(MoetuneError) as err:
        load_model("nosuch")
    assert str(err.value).startswith("unknown model 'nosuch': use a built-in name (dbrx, ")
