"""Checks of a flag's value that need more than its type: --hcp-a2a-size beside --cp-comm-type, and the CUDA-graph
scopes of --cuda-graph-scope (or plan's --fix cuda_graph_scope=), each refused in one line that says what to pass."""

from moetune.errors import MoetuneError
from moetune.layout.layout import Layout
from moetune.specs.model import ModelSpec
from moetune.walls.cp_legal import hcp_groups, rank_heads


def hcp_needs_a2a_p2p(size: int | None, comm: str | None, spec: ModelSpec, layout: Layout) -> None:
    """--hcp-a2a-size sizes a2a+p2p's a2a group; beside another exchange (or auto) it sizes nothing. One line says
    so, with the groups this CP could host: those that divide CP and split a TP rank's heads (walls/cp_legal.py
    hcp_groups, as walls/context_parallel.py _hcp_size checks once a2a+p2p is set; a group of CP runs as a2a, of 1 as
    p2p)."""
    if size is None or comm == "a2a+p2p":
        return
    cp = layout.cp
    wrong = f"--hcp-a2a-size {size} sizes the a2a group of --cp-comm-type a2a+p2p, but --cp-comm-type is " + (
        comm if comm else "left at auto")
    if cp == 1:
        raise MoetuneError(f"{wrong} and CP is 1, with nothing to exchange: drop --hcp-a2a-size, or set --cp > 1 "
                           "with --cp-comm-type a2a+p2p")
    groups = hcp_groups(*rank_heads(spec, layout.tp), cp)
    if size in groups:
        raise MoetuneError(f"{wrong}: add --cp-comm-type a2a+p2p, or drop --hcp-a2a-size")
    groups = groups[1:]  # a group of 1 is a p2p ring alone
    other = (f", or pass --cp-comm-type a2a+p2p with --hcp-a2a-size {' or '.join(map(str, groups))}" if groups else
             f" (no a2a group of 2 or more runs a2a+p2p at CP {cp} and TP {layout.tp}; auto picks an exchange that "
             "runs)")
    raise MoetuneError(f"{wrong}, and CP {cp} cannot host a group of {size} (it must divide CP and split a TP "
                       f"rank's heads): drop --hcp-a2a-size{other}")


def scope_words(text: str, flag: str) -> tuple[str, ...]:
    """CUDA-graph scopes as typed ("attn,moe_router" or "attn moe_router"); "none" alone is no graph."""
    words = text.replace(",", " ").split()
    said = f"{flag}{'' if flag.endswith('=') else ' '}{text}"  # as typed: --fix key=value, or the flag and its value
    if not words:
        raise MoetuneError(f"{flag} is empty: name the scopes (attn,moe_router,...), or 'none' for no CUDA graphs")
    if "none" in words and len(words) > 1:
        raise MoetuneError(f"{said}: 'none' turns CUDA graphs off; give it alone or drop it")
    # one graph of the whole step, no per-layer scope beside it: Megatron-LM arguments.py @core_v0.16.0 :1441
    # ("full_iteration scope is only supported with --cuda-graph-impl=local, other scopes only with transformer_engine")
    if "full_iteration" in words and len(words) > 1:
        raise MoetuneError(f"{said}: full_iteration captures the whole step and stands alone (Megatron-LM runs it "
                           "under --cuda-graph-impl local, the other scopes under transformer_engine); give it alone, "
                           "or the per-layer scopes")
    return tuple(w for w in words if w != "none")
