"""Megatron's rank order and the NVLink domain (layout/ranks.py); more of it is tested beside the layouts."""

from moetune.layout.ranks import in_domain_eps


def test_in_domain_eps_largest_first_within_the_domain_dividing_experts_and_ranks():
    """The seeds' in-domain EP: every group inside one NVLink domain of the job, dividing the experts and tiling the
    ranks with ETP and PP, largest first, down to 1 (an unknown count, 0, does not constrain)."""
    assert list(in_domain_eps(16, 1, 8)) == [8, 4, 2, 1]  # 7, 6, 5, 3 straddle two 8-rank nodes
    assert list(in_domain_eps(16, 2, 8)) == [4, 2, 1]  # EP strides by ETP: EP8 x ETP2 spans 16 ranks
    assert list(in_domain_eps(8, 1, 8, experts=60)) == [4, 2, 1]  # 8 does not divide 60, 6 straddles
    assert list(in_domain_eps(8, 1, 8, world=24, pp=2)) == [4, 2, 1]  # 24 ranks hold no EP8 x PP2 tiling
    assert next(in_domain_eps(40, 1, 60)) == 30  # EP40 in 60-rank domains straddles two (ranks 40-79)
