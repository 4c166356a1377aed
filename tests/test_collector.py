"""moetune/collector.py pauses the cyclic collector over a plan and leaves it as it found it, also where the call
raises (a refused plan) or runs inside another paused call."""

import gc

import pytest

from moetune.collector import collector_paused
from moetune.errors import MoetuneError


@collector_paused
def _seen(fail: bool = False) -> bool:
    if fail:
        raise MoetuneError("refused")
    return gc.isenabled()


def test_paused_inside_and_enabled_after():
    assert gc.isenabled()
    assert _seen() is False
    assert gc.isenabled()


def test_enabled_again_after_a_refusal():
    with pytest.raises(MoetuneError):
        _seen(fail=True)
    assert gc.isenabled()


def test_a_caller_that_paused_it_finds_it_paused_after():
    gc.disable()
    try:
        assert _seen() is False
        assert not gc.isenabled()
    finally:
        gc.enable()
