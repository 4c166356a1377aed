"""bridge_releases.csv and bridge_pins.csv (tools/bridge_releases.py) against facts read from the sources, and the
pins against the Bridge mirror where it is on the machine."""

import shutil
import subprocess
from pathlib import Path

import pytest

from moetune.configio.releases import (
    bridge_pins,
    describe,
    has,
    known_release,
    newest_having,
    parse_bridge_pins,
    releases,
    span,
)
from moetune.errors import MoetuneError

BRIDGE = Path("/work/.mirror/NVIDIA-NeMo+Megatron-Bridge/repo")


def test_the_releases_are_the_tags_that_pin_megatron_lm():
    order = releases("bridge").order
    assert order == ("0.2.0", "0.2.1", "0.2.2", "0.3.0", "0.3.1", "0.4.0", "0.4.1", "0.4.2", "0.5.0", "0.5.1", "0.6.0")
    assert tuple(bridge_pins()) == order
    for name, got in releases("bridge").have.items():
        assert got != set(order), name  # a name every release has is not listed


def test_bridge_own_fields():
    """mixed_precision.fp4_param_gather: MixedPrecisionConfig field from v0.4.2 (mixed_precision.py:66 @v0.4.2, absent
    @v0.4.1). dataset.seq_length: a GPTDatasetConfig field from v0.6.0 (config.py:230 @v0.6.0); v0.5.x has it as a
    property over Megatron-Core's sequence_length (config.py:410 @v0.5.0), which dotted overrides do not see."""
    assert span("mixed_precision.fp4_param_gather", "bridge") == "from 0.4.2 on"
    assert not has("0.4.1", "mixed_precision.fp4_param_gather") and has("0.4.2", "mixed_precision.fp4_param_gather")
    assert span("dataset.seq_length", "bridge") == "from 0.6.0 on"
    assert has("0.2.0", "dataset.sequence_length")  # Megatron-Core's, in every release: not listed


def test_the_pinned_megatron_core_s_fields():
    """Bridge 0.4.2 pins Megatron-LM 2edffadb528e (Megatron-Core 0.17.1): no moe_paged_stash (a TransformerConfig
    field from core_v0.18.0 on), which 0.5.0's pin (0.18.0) has; the flex backend field (core_v0.16.0 on) is in every
    pin, 0.2.0's (a main commit before 0.16.0) included."""
    assert not has("0.4.2", "model.moe_paged_stash") and has("0.5.0", "model.moe_paged_stash")
    assert newest_having("model.moe_paged_stash", "bridge") == "0.5.0"
    assert has("0.2.0", "model.moe_flex_dispatcher_backend")
    assert describe("0.4.2") == "Megatron Bridge 0.4.2 (Megatron-Core 0.17.1 at Megatron-LM 2edffadb528e)"


def test_an_unknown_bridge_release_is_one_line():
    with pytest.raises(MoetuneError, match=r"^--megatron-bridge 0\.4: not a release .* use one of 0\.2\.0, 0\.2\.1,"):
        known_release("0.4", "bridge")


PINS = ("# a comment, as the shipped file's first lines\nbridge,tag,bridge_commit,megatron_lm_commit,megatron_core\n"
        "0.3.0,v0.3.0,21b02e0cfb2f,b0cc2706ddc6,0.16.0\n")


def test_pins_read_from_text_keep_their_core_version():
    pins = parse_bridge_pins(PINS + "0.4.0,v0.4.0,0fbfe7d3e970,d7288711ba27,0.17.0rc0\n")
    assert {b: p["megatron_core"] for b, p in pins.items()} == {"0.3.0": "0.16.0", "0.4.0": "0.17.0rc0"}


@pytest.mark.parametrize("core", ["main", "0.17", "0.l7.0", "v0.17.0", "0.17.0-rc0", ""])
def test_a_pin_whose_core_is_no_version_is_one_line_naming_file_line_release_and_value(core):
    """release_check.bridge_on_core compares release_number(pin)[:2], None for 'main' (a TypeError there); the loader
    refuses it first. The bad row is line 4 (after a comment, the header and one good pin)."""
    said = (rf"^pins\.csv line 4: Bridge release '0\.4\.0' pins megatron_core '{core}', not a Megatron-Core version "
            r"\(X\.Y\.Z or X\.Y\.ZrcN")
    with pytest.raises(MoetuneError, match=said):
        parse_bridge_pins(PINS + f"0.4.0,v0.4.0,0fbfe7d3e970,d7288711ba27,{core}\n", "pins.csv")


def test_a_pin_row_short_of_its_core_column_is_one_line():
    said = r"^bridge_pins\.csv line 4: Bridge release '0\.4\.0' pins megatron_core None"
    with pytest.raises(MoetuneError, match=said):
        parse_bridge_pins(PINS + "0.4.0,v0.4.0,0fbfe7d3e970,d7288711ba27\n")


@pytest.mark.skipif(not BRIDGE.is_dir() or shutil.which("git") is None, reason="no Megatron-Bridge mirror here")
def test_each_pin_is_the_tag_s_submodule_commit():
    for release, row in bridge_pins().items():
        tree = subprocess.run(["git", "-C", str(BRIDGE), "ls-tree", row["tag"], "3rdparty/Megatron-LM"],
                              capture_output=True, text=True, check=True).stdout.split()
        assert tree[2].startswith(row["megatron_lm_commit"]), release


def test_muon_runs_from_bridge_0_3_0():
    """Bridge's setup_optimizer routes Muon to get_megatron_muon_optimizer from v0.3.0 (training/optim.py:22, :62-71
    @v0.3.0); v0.2.x sends every name to get_megatron_optimizer, which raises for it (optimizer/__init__.py:415 at the
    pin 0d8e0714cd29), though the pin's own parser lists muon."""
    for value in ("optimizer.optimizer=muon", "optimizer.optimizer=dist_muon"):
        assert span(value, "bridge") == "from 0.3.0 on" and not has("0.2.2", value)


@pytest.mark.skipif(not BRIDGE.is_dir() or shutil.which("git") is None, reason="no Megatron-Bridge mirror here")
def test_the_tool_reads_muon_off_bridge_s_own_optimizer_setup():
    import sys
    sys.path.insert(0, str(Path(__file__).parents[2] / "tools"))
    from bridge_releases import bridge_optimizers
    pinned = {"optimizer.optimizer=muon": "value", "model.cuda_graph_scope=attn": "value"}
    assert bridge_optimizers("v0.2.2", pinned) == {"model.cuda_graph_scope=attn": "value"}
    assert bridge_optimizers("v0.3.0", pinned) == pinned
