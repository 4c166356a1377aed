"""`plan --baseline` (and `explain --plan`'s): the baseline must be the same job, trained with the same optimizer, for
its walls to compare with the pick's."""

from moetune.errors import MoetuneError
from moetune.layout.validate import Workload
from moetune.specs.hardware import catalog_unchanged


def same_job(path: str, base, spec, gpu_spec, gpus: int, wl: Workload, routing: str,
             token_imbalance: float | None = None) -> None:
    """A baseline compares wall by wall only with the same job: model, MTP depth, GPU, GPU count, sequence, global
    batch, routing and its dropless factor (another GPU or batch changes every wall's seconds for reasons no layout
    explains, MTP layers are training the user chose, force-balanced routing is a benchmark setting, not a layout's
    gain, and a measured --token-imbalance against the default would credit the router to the layout)."""
    ours = {"model": spec.name, "MTP layers": spec.mtp_num_layers, "GPU": _machine(gpu_spec), "GPU count": gpus,
            "seq": wl.seq_length, "GBS": wl.global_batch_size, "routing": routing,
            "token imbalance": _factor(token_imbalance)}
    theirs = {"model": base.model.name, "MTP layers": base.model.mtp_num_layers, "GPU": _machine(base.gpu),
              "GPU count": base.layout.world_size, "seq": base.workload.seq_length,
              "GBS": base.workload.gbs(base.layout), "routing": base.knobs.routing,
              "token imbalance": _factor(base.knobs.token_imbalance)}
    differ = [f"{k} {theirs[k]} vs {ours[k]}" for k in ours if theirs[k] != ours[k]]
    if differ:
        raise MoetuneError(f"--baseline {path} is another job ({', '.join(differ)}): pass an estimate of the same "
                           "model, --mtp-layers, GPU, GPU count, --seq, --gbs, --routing and --token-imbalance")


def _factor(token_imbalance: float | None) -> str:
    return "the default" if token_imbalance is None else f"{token_imbalance:g}"


def _machine(gpu) -> str:
    """A GPU as a baseline must match it: its key, and the figures a cluster file or a config's topology changed (a
    B200 baseline in a 72-GPU domain is not a plan on HGX B200s)."""
    if catalog_unchanged(gpu):
        return gpu.key
    return (f"{gpu.key} ({gpu.memory_gib:g} GiB, {gpu.gpus_per_node} a node, {gpu.nvlink_domain}-GPU NVLink domain, "
            f"{gpu.nic_gbps:g} Gb/s NIC)")


def same_optimizer(path: str, base, fixed: dict) -> dict:
    """The search under the baseline's optimizer: Muon or Adam is the training's choice, not a layout's (Kimi-K2's
    recipes run dist_muon); a pin of the other is one line."""
    if fixed.get("optimizer", base.knobs.optimizer) != base.knobs.optimizer:
        raise MoetuneError(f"--baseline {path} trains with {base.knobs.optimizer}, --fix optimizer={fixed['optimizer']}"
                           ": compare plans under one optimizer; drop the --fix")
    if base.knobs.optimizer != "muon":
        return fixed
    if any(f > 0 for f in fixed.get("optimizer_offload_fraction", [0.0])):
        raise MoetuneError(f"--baseline {path} trains with Muon, which runs without the optimizer's CPU offload: drop "
                           "--fix optimizer_offload_fraction")
    return {**fixed, "optimizer": "muon"}  # search.plan leaves Muon's offload off
