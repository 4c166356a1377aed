"""Megatron's rank order and the NVLink domain (layout/ranks.py); more of it is tested beside the layouts."""

import numpy as np

from moetune.layout.ranks import hybridep_spans, hybridep_spans_on, in_domain_eps, job_nvlink_domain
from moetune.specs.hardware import load_gpu


def test_in_domain_eps_largest_first_within_the_domain_dividing_experts_and_ranks():
    """The seeds' in-domain EP: every group inside one NVLink domain of the job, dividing the experts and tiling the
    ranks with ETP and PP, largest first, down to 1 (an unknown count, 0, does not constrain)."""
    assert list(in_domain_eps(16, 1, 8)) == [8, 4, 2, 1]  # 7, 6, 5, 3 straddle two 8-rank nodes
    assert list(in_domain_eps(16, 2, 8)) == [4, 2, 1]  # EP strides by ETP: EP8 x ETP2 spans 16 ranks
    assert list(in_domain_eps(8, 1, 8, experts=60)) == [4, 2, 1]  # 8 does not divide 60, 6 straddles
    assert list(in_domain_eps(8, 1, 8, world=24, pp=2)) == [4, 2, 1]  # 24 ranks hold no EP8 x PP2 tiling
    assert next(in_domain_eps(40, 1, 60)) == 30  # EP40 in 60-rank domains straddles two (ranks 40-79)


def test_hybridep_spans_past_the_jobs_rack_domain_alone():
    """Past the job's NVLink domain on a rack HybridEP is refused (EP128 over 64-rank Slurm segments, EP40 straddling
    two 60-rank domains); across HGX nodes it reaches the others by RDMA. Which backend runs instead is the platform's
    (specs/platform.py spanning_backend, tests/specs/test_platform.py)."""
    gb200 = job_nvlink_domain(256, 4, 72)  # 256 GB200s: Slurm segments of 64 ranks
    assert gb200 == 64
    assert hybridep_spans(128, 1, 72, gb200) is False  # EP128 spans two segments
    assert hybridep_spans(64, 1, 72, gb200) is True  # one segment holds it
    assert hybridep_spans(40, 1, 72, 60) is False  # EP40 in 60-rank domains straddles two
    assert hybridep_spans(64, 1, 8, job_nvlink_domain(256, 8, 8)) is True  # H100 HGX across eight nodes


def test_hybridep_spans_one_answer_per_row():
    """The planner asks it of every candidate at once: EP 64 fits a 64-rank segment, EP 128 does not, and an
    NVL36 rack (36 GPUs) is a rack too, where the search had asked for a 72-GPU domain."""
    ep, etp = np.array([64, 128, 32]), np.array([1, 1, 2])
    assert hybridep_spans(ep, etp, 72, 64).tolist() == [True, False, True]
    assert hybridep_spans(np.array([36, 72]), np.array([1, 1]), 36, 36).tolist() == [True, False]
    assert hybridep_spans(ep, etp, 8, 8) is True  # HGX: RDMA reaches the other nodes


def test_hybridep_spans_on_a_gpu_reads_the_jobs_domain():
    """What the planner's default dispatcher and its HybridEP filter ask of a GPU and a job size: the job's segment
    (64 of 256 GB200s; the whole job of 48), not the rack's 72."""
    gb200 = load_gpu("gb200")
    assert hybridep_spans_on(gb200, 256, np.array([64, 72, 128]), np.array([1, 1, 1])).tolist() == [True, False, False]
    assert hybridep_spans_on(gb200, 48, 48, 1) is True and hybridep_spans_on(gb200, 144, 72, 1) is True
    assert hybridep_spans_on(load_gpu("h100"), 256, 256, 1) is True
