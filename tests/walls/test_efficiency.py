"""User efficiency files (--efficiency): known constants only, each a number in its range; one clear error otherwise."""

import re

import pytest

from moetune.errors import MoetuneError
from moetune.walls.efficiency import check_for_gpu, efficiency, load_efficiency_file


def test_user_values_override_the_gpu_section():
    eff = efficiency("h100", {"nic_eff": 0.5, "h100": {"gemm_eff": 0.3}})
    assert eff["nic_eff"] == 0.5 and eff["gemm_eff"] == 0.3
    assert efficiency("h100")["gemm_eff"] != 0.3


def test_priors_merge_the_architecture_then_the_gpu():
    """Blackwell's shared priors reach every Blackwell GPU; NVFP4's rate is each one's own (its FP4 peak over FP8);
    Hopper and a cluster file's GPU of another architecture (under its file's name) take none."""
    for gpu, nvfp4 in (("b200", 1.078), ("gb200", 1.078), ("gb300", 1.392), ("b300", 1.392)):
        eff = efficiency(gpu, priors_only=True)
        assert (eff["ep_overlap_hide_eager"], eff["rate_fp8_delayed"], eff["rate_nvfp4"]) == (0.0, 1.151, nvfp4)
    assert efficiency("h100", priors_only=True) == efficiency("default", priors_only=True) == efficiency("blackwell")


@pytest.mark.parametrize(("user", "message"), [
    ({"gemm_eff": "x"}, "gemm_eff = 'x' must be a number in [0.001, 1]"),
    ({"h100": {"attn_eff": 1.5}}, "attn_eff = 1.5 must be a number in [0.001, 1]"),
    ({"nic_eff": 0}, "nic_eff = 0 must be a number in [0.001, 1]"),
    ({"gemm_eff": 1e-300}, "gemm_eff = 1e-300 must be a number in [0.001, 1]"),  # a step of years
    ({"ep_overlap_hide": True}, "ep_overlap_hide = True must be a number in [0, 1]"),
    ({"host_us_per_layer": -5}, "host_us_per_layer = -5 must be a number in [0, 1e+06]"),
    ({"host_us_per_layer": float("inf")}, "host_us_per_layer = inf must be a number in [0, 1e+06]"),
    ({"a2a_latency_us": float("nan")}, "a2a_latency_us = nan must be a number in [0, 1e+06]"),
    ({"a2a_gbps_per_sm": 0}, "a2a_gbps_per_sm = 0 must be a number in (0, 1e+06]"),  # it divides
    ({"grouped_m_half": 0}, "grouped_m_half = 0 must be a number in (0, 1e+06]"),
    ({"warp_eff": 0.5}, "unknown constant(s) warp_eff"),
    ({"a2a_eff_deepep": 0}, "a2a_eff_deepep = 0 must be a number in [0.001, 1e+06]"),
    ({"rate_fp8_blockwise": 0}, "rate_fp8_blockwise = 0 must be a number in [0.001, 1e+06]"),  # a rate divides
    ({"h100": {"a2a_eff_deepep": 1.3}}, "a2a_eff_deepep = 1.3 (yours) times nic_eff = 0.8 (shipped for h100; "
                                         "the larger link efficiency) is 1.04 of the link, over 1; set "
                                         "a2a_eff_deepep <= 1.25 beside nic_eff"),
])
def test_bad_values_are_one_error(user, message):
    with pytest.raises(MoetuneError, match=re.escape(message)):
        check_for_gpu(user, "h100")


def test_zero_costs_are_allowed():
    assert efficiency("h100", check_for_gpu({"a2a_latency_us": 0, "p2p_exposed": 0.0}, "h100"))["a2a_latency_us"] == 0


def test_calibrates_own_output_is_a_valid_efficiency_file():
    """An all-to-all efficiency is a multiplier on the link's: the fit's 1.187 on H100 (0.95 of the link) is legal,
    as is every constant `moetune calibrate --write` writes."""
    shipped = efficiency("h100")
    fitted = check_for_gpu({"h100": {k: v for k, v in shipped.items() if k.startswith("a2a_eff_")}}, "h100")
    assert efficiency("h100", fitted) == shipped


@pytest.mark.parametrize(("text", "message"), [
    ("[default]\ngemm_eff = 0.5\n", "section [default] is not a catalog GPU"),
    ("[priors.h100]\ngemm_eff = 0.5\n", "section [priors] is not a catalog GPU"),
    ("[h999]\ngemm_eff = 0.5\n", "section [h999] is not a catalog GPU"),
    ("h100 = 5\n", "h100 = 5; a GPU's constants go in a [h100] section"),
    ("[gb200]\nwarp_eff = 0.5\n", "unknown constant 'warp_eff'"),
    ("[gb200]\ngemm_eff = 1.5\n", "gemm_eff = 1.5 must be a number in [0.001, 1]"),
])
def test_a_file_that_would_be_ignored_is_an_error(text, message, tmp_path):
    """Every value in the file is read or refused: a section no GPU reads is not silently skipped."""
    path = tmp_path / "eff.toml"
    path.write_text(text)
    with pytest.raises(MoetuneError, match=re.escape(f"--efficiency {path}: {message}")):
        load_efficiency_file(str(path), None)


def test_other_gpus_sections_are_legal_and_apply_to_their_gpu(tmp_path):
    path = tmp_path / "eff.toml"
    path.write_text("[gb200]\ngemm_eff = 0.5\n[h100]\nnic_eff = 0.5\n")
    user = load_efficiency_file(str(path), "gb200")
    assert load_efficiency_file(str(path), "h100") == user
    assert efficiency("gb200", user)["gemm_eff"] == 0.5 and efficiency("h100", user)["gemm_eff"] != 0.5


def test_a_link_efficiency_that_the_shipped_all_to_all_passes_names_the_file_and_the_fix(tmp_path):
    """nvlink_eff = 0.9 alone is refused on H100, whose shipped DeepEP/HybridEP efficiency (1.187) sits at 0.95 of a
    0.8 link: the message names the file, says the all-to-all value is the shipped one, and gives the largest the
    user may set beside it; set, the file is taken."""
    path = tmp_path / "nvlink.toml"
    path.write_text("nvlink_eff = 0.9\n")
    with pytest.raises(MoetuneError) as err:
        load_efficiency_file(str(path), "h100")
    assert str(err.value) == (f"--efficiency {path}: a2a_eff_deepep = 1.187 (shipped for h100) times nvlink_eff = 0.9 "
                              "(yours; the larger link efficiency) is 1.07 of the link, over 1; set a2a_eff_deepep "
                              "<= 1.111, a2a_eff_hybridep <= 1.111 beside nvlink_eff in the file")
    path.write_text("nvlink_eff = 0.9\na2a_eff_deepep = 1.111\na2a_eff_hybridep = 1.111\n")
    assert efficiency("h100", load_efficiency_file(str(path), "h100"))["a2a_eff_deepep"] == 1.111


@pytest.mark.parametrize(("user", "message"), [
    # 5x the FP8 peak: fp8_gemm_eff x rate is the share of the FP8 peak a recipe's GEMMs run at
    ({"fp8_gemm_eff": 1.0, "rate_fp8_current": 5},
     "fp8_gemm_eff = 1 (yours) x rate_fp8_current = 5 (yours) = 5 puts fp8-current GEMMs at 5x the FP8 peak"),
    # the shipped fit (about 0.33 on H100) times 3.1 passes the peak; its digits move with each refit
    ({"rate_mxfp8": 3.1}, "(shipped for h100) x rate_mxfp8 = 3.1 (yours) = 1.0"),
    # NVFP4 may pass the FP8 peak, up to the largest FP4 peak of the catalog (GB300: 3x its FP8 peak)
    ({"fp8_gemm_eff": 0.5, "rate_nvfp4": 6.1}, "past the FP4 peak (at most 3x the FP8 peak on a catalog GPU)"),
])
def test_a_recipe_rate_past_its_peak_is_refused(user, message):
    with pytest.raises(MoetuneError, match=re.escape(message)):
        check_for_gpu(user, "h100")


def test_a_recipe_rate_at_its_peak_is_taken():
    for gpu, user in (("h100", {"fp8_gemm_eff": 0.5, "rate_fp8_current": 2.0}),
                      ("gb300", {"fp8_gemm_eff": 0.5, "rate_nvfp4": 6.0})):
        assert efficiency(gpu, check_for_gpu(user, gpu)).items() >= user.items()


@pytest.mark.parametrize("text, sections", [("[gb200]\nnvlink_eff = 0.7\n", r"\[gb200\]"), ("", "none")])
def test_a_file_that_sets_nothing_for_the_gpu_is_refused(tmp_path, text, sections):
    """A file with only another GPU's section, or none at all, changed no figure yet was reported as in use."""
    path = tmp_path / "eff.toml"
    path.write_text(text)
    with pytest.raises(MoetuneError, match=rf"sets no constant for h100 \(sections: {sections}\)"):
        load_efficiency_file(str(path), "h100")
    with pytest.raises(MoetuneError, match=rf"sets no constant for h100 \(sections: {sections}\)"):
        check_for_gpu(load_efficiency_file(str(path), None), "h100")  # a saved result's GPU, met later
    if text:
        assert efficiency("gb200", load_efficiency_file(str(path), "gb200"))["nvlink_eff"] == 0.7
