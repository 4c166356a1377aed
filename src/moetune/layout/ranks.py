"""Megatron's rank order and which parallel groups leave the NVLink domain.

Megatron-Core numbers ranks with TP fastest, then CP, EP (expert mesh) / DP, then PP:
``order="tp-cp-ep-dp-pp"`` in parallel_state.initialize_model_parallel (RankGenerator). So a group
of size ``n`` whose consecutive members are ``stride`` ranks apart covers ``stride * n`` consecutive
ranks:

    attention mesh   TP: stride 1        CP: stride TP        DP: stride TP*CP     PP: stride world/PP
    expert mesh     ETP: stride 1        EP: stride ETP       EDP: stride ETP*EP

With an NVLink domain of ``D`` consecutive ranks (8 on HGX, 72 on NVL72), each member of such a group
shares its domain with ``min(n, max(1, D // stride))`` members (itself included). Every function
here is plain arithmetic, so it takes Python ints or numpy arrays alike (the planner passes arrays).
"""

import numpy as np

from moetune.layout.layout import Layout


def members_in_domain(size, stride, domain):
    """Members of a group (itself included) that share one NVLink domain."""
    return np.minimum(size, np.maximum(1, domain // stride))


def cross_domain_fraction(size, stride, domain):
    """Share of a member's peers that sit outside its NVLink domain (0 when the group fits in one)."""
    inside = members_in_domain(size, stride, domain)
    return np.where(size > 1, (size - inside) / np.maximum(size - 1, 1), 0.0)


def group_strides(layout: Layout) -> dict[str, tuple[int, int]]:
    """(size, stride) of every parallel group of a layout."""
    return {
        "tp": (layout.tp, 1),
        "cp": (layout.cp, layout.tp),
        "dp": (layout.dp, layout.tp * layout.cp),
        "pp": (layout.pp, layout.world_size // layout.pp),
        "etp": (layout.etp, 1),
        "ep": (layout.ep, layout.etp),
        "edp": (layout.edp, layout.etp * layout.ep),
    }


def groups_leaving_domain(layout: Layout, domain: int) -> dict[str, float]:
    """For each group of size > 1: the share of its peers outside the NVLink domain."""
    return {name: float(cross_domain_fraction(size, stride, domain))
            for name, (size, stride) in group_strides(layout).items() if size > 1}
