"""A saved result (`plan --json` / `estimate --json`) in a few words, for the tables of sweep and report."""


def layout_label(result: dict) -> str:
    """TP2 CP1 PP8v4 EP64 ETP1: the sizes that tell layouts apart (DP and EDP follow from them)."""
    lay = result["layout"]
    vpp = f"v{lay['vpp']}" if lay["vpp"] > 1 else ""
    return f"TP{lay['tp']} CP{lay['cp']} PP{lay['pp']}{vpp} EP{lay['ep']} ETP{lay['etp']}"


def dispatcher_label(result: dict) -> str:
    """The row's dispatcher, and each folded into it that predicts its step time too (plan's `same_prediction`)."""
    return with_twins(result["knobs"]["dispatcher"], [t["dispatcher"] for t in result.get("same_prediction", [])])


def with_twins(dispatcher: str, twins: list[str], sep: str = " ") -> str:
    """deepep (=hybridep): a dispatcher and the twins folded into its row (planner/twins.py), `sep` between."""
    return dispatcher + "".join(f"{sep}(={d})" for d in twins)


def recompute_label(result: dict) -> str:
    k = result["knobs"]
    return k["recompute"] + (f" ({','.join(k['recompute_modules'])})" if k["recompute"] == "selective" else "")


def knobs_label(result: dict) -> str:
    """What tells candidates of one layout apart: micro-batch, precision, dispatcher, recompute, graphs, EP overlap."""
    k = result["knobs"]
    graphs = ",".join(k["cuda_graph_scope"]) or "no graphs"
    return (f"mbs {result['workload']['micro_batch_size']} {k['precision']} {k['dispatcher']} "
            f"{recompute_label(result)} {graphs}" + (" EP overlap" if k["ep_overlap"] else ""))
