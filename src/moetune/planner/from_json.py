"""Rebuild an `Estimate` from moetune's own JSON (`estimate --json`, or one result of `plan --json`)."""

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace

from moetune.configio.names import LAUNCHER
from moetune.errors import MoetuneError
from moetune.files import FileTable
from moetune.layout.knobs import Knobs
from moetune.layout.layout import Layout
from moetune.layout.modules import parse_modules, parse_offload_modules
from moetune.layout.validate import Workload
from moetune.planner.estimate import USER_FILE_KEYS, Estimate, estimate
from moetune.specs.hardware import GpuSpec, load_gpu
from moetune.specs.registry import load_model
from moetune.walls.compute import router_dtype_defaulted, router_dtype_or_plan
from moetune.walls.efficiency import check_file, check_for_gpu, sets_for


def is_saved_result(data) -> bool:
    """Whether DATA is moetune's own `plan --json` (its results) or `estimate --json` (a layout) output."""
    return isinstance(data, dict) and ("results" in data or "layout" in data)


def saved_results(data: dict) -> list[dict]:
    """A saved plan's results, or an estimate as the one result it is."""
    return data["results"] if "results" in data else [data]


def refuse_failure(data, where: str = "") -> None:
    """One line where DATA is what a failed command wrote (`{"error": ..., "exit_code": 2}`), saying its error; WHERE
    names the file (a caller that names it itself passes none)."""
    if isinstance(data, dict) and "error" in data and not is_saved_result(data):
        raise MoetuneError(f"{where + ': ' if where else ''}it holds no result: the command that wrote it failed "
                           f"({data['error']}); run it again with what the error asks")


def pick_result(data: dict, rank: int = 1) -> dict:
    """The estimate object: the JSON itself, or result number `rank` (1-based) of a plan."""
    if not isinstance(data, dict):
        raise MoetuneError("expected a JSON object from `moetune plan --json` or `moetune estimate --json`")
    refuse_failure(data)
    if "results" in data:
        if not isinstance(data["results"], list) or not all(isinstance(r, dict) for r in data["results"]):
            raise MoetuneError("the plan's results are not a list of results: pass unmodified `moetune plan --json` "
                               "output")
        if not data["results"]:
            raise MoetuneError("the plan has no results (nothing fit): no configuration in it to read")
        if rank > len(data["results"]):
            raise MoetuneError(f"--rank {rank}: the plan has only {len(data['results'])} results")
        return data["results"][rank - 1]
    if rank > 1:
        raise MoetuneError(f"--rank {rank}: an estimate holds one result; --rank picks among a plan's results")
    return data


LAUNCHERS = ("bridge", "megatron-lm")  # Estimate.launcher's values (data/megatron_names.csv cluster.launcher)


def saved_launcher(r: dict, where: str = "result") -> str | None:
    """The frontend that runs a saved result (R, picked): its "launcher"; for a result saved before moetune recorded
    it, "megatron-lm" where its FLOP counter is Megatron-LM's, which only a launch read from Megatron-LM arguments
    takes (time.flops_convention; from_config.trained_model), else "bridge"; None where it records neither (saved
    before the counter was recorded too): not known, and read as Bridge's (the caller says so)."""
    if "launcher" in r:
        if r["launcher"] not in LAUNCHERS:
            raise MoetuneError(f"{where}: launcher is {r['launcher']!r}, not one of {', '.join(LAUNCHERS)}: pass "
                               "unmodified `moetune plan/estimate --json` output")
        return r["launcher"]
    time = r.get("time")
    convention = time.get("flops_convention") if isinstance(time, dict) else None
    return None if convention is None else "megatron-lm" if convention == "megatron-lm" else "bridge"


class _NamesFile(MoetuneError):
    """An error already worded with the saved result's name (`where`): _named takes it as it is."""


def _need(obj: dict, key: str, where: str):
    if key not in obj:
        raise _NamesFile(f"{where} lacks '{key}': pass unmodified `moetune plan/estimate --json` output")
    return obj[key]


def saved_field_error(err: Exception, where: str) -> MoetuneError:
    """The one line for ERR, met reading a saved result's fields (WHERE names the file): a field missing (KeyError),
    of the wrong type, or of the right type out of range (a model check's SpecError, int("two"))."""
    if isinstance(err, KeyError):
        said = f"lacks {err}"
    elif isinstance(err, TypeError | AttributeError):
        said = f"holds a value of the wrong type ({err})"
    else:
        said = f"holds a value moetune cannot take ({err})"
    return MoetuneError(f"{where} {said}: pass unmodified `moetune plan/estimate --json` output")


@contextmanager
def saved_fields(where: str) -> Iterator[None]:
    """Reading the fields of a saved plan/estimate result that a command shows as saved (report's page): a field a
    hand edit removed or retyped is one line naming WHERE, not a traceback (moetune's own errors pass through)."""
    try:
        yield
    except MoetuneError:
        raise
    except (KeyError, TypeError, AttributeError, ValueError) as err:
        raise saved_field_error(err, where) from None


def estimate_from_json(data: dict, rank: int = 1, *, overheads: dict | None = None,
                       efficiency_overrides: dict | None = None, where: str = "result") -> Estimate:
    """A saved plan result (or estimate) rebuilt under the memory-overhead and efficiency files it was made with
    (saved in it), or under the ones given here instead; `where` names the input in errors (e.g. "--plan p.json")."""
    try:
        r = pick_result(data, rank)
    except MoetuneError as err:  # its lines do not name the input
        raise MoetuneError(f"{where}: {err}") from None
    try:
        layout, workload, knobs = _configuration(r, where)
        model = load_model(r.get("model_source", r["model"]))
        if (mtp := r.get("pipeline", {}).get("mtp_num_layers")) is not None:  # the depth the saved run trained
            model = model.with_mtp(mtp)
        if (divisor := r.get("pipeline", {}).get("vocab_divisor")) not in (None, model.vocab_divisor):
            model = replace(model, vocab_divisor=int(divisor))
        if (convention := (r.get("time") or {}).get("flops_convention")) not in (None, model.flops_convention):
            model = replace(model, flops_convention=str(convention))
        gpu = GpuSpec(**r["gpu_spec"]) if "gpu_spec" in r else load_gpu(r["gpu"])
    except MoetuneError as err:  # a field missing (_need) or a layout Megatron refuses: said once, with `where`
        raise _named(err, where) from None
    except (KeyError, TypeError, AttributeError, ValueError) as err:
        raise saved_field_error(err, where) from None
    saved = {k: r.get(k) for k in ("overheads", "efficiency_overrides")}
    for key, value in saved.items():
        if value is not None and not isinstance(value, dict):
            raise MoetuneError(f"{where}: {key} is {type(value).__name__}, not a table of constants: pass unmodified "
                               "`moetune plan/estimate --json` output")
    if saved["efficiency_overrides"]:
        check_file(saved["efficiency_overrides"], f"{where} efficiency_overrides")
        if not sets_for(saved["efficiency_overrides"], gpu.key):  # saved before such a file was refused: it changed
            saved["efficiency_overrides"] = None  # no figure of this result, so the result stands without it
    # the tables as their files: a later check names the file, and the result records it again
    paths = {k: p if isinstance(p := r.get(USER_FILE_KEYS[k]), str) else None for k in saved}
    saved = {k: FileTable(v, f"{where} {k}", paths[k]) if v else None for k, v in saved.items()}
    # the constants meet the saved GPU here: the given file's (loaded without a GPU: explain --plan), else the saved
    given = efficiency_overrides is not None  # an empty file given is refused, not passed over for the saved one
    eff = check_for_gpu(efficiency_overrides if given else saved["efficiency_overrides"], gpu.key)
    try:
        # an empty --overheads file given is the built-in figures in place of the saved ones, as check --model reads
        # it (cli/check_cmd.py), not passed over for them
        result = estimate(model, gpu, layout, workload, knobs,
                          overheads if overheads is not None else saved["overheads"], efficiency_overrides=eff)
    except MoetuneError as err:  # the saved configuration as a whole (its batch over its DP): the file is named
        raise _named(err, where) from None
    result.defaulted = _defaulted(r, model)
    if saved_launcher(r, where) == "megatron-lm":  # all a saved result keeps of its launch config: rules read it
        result.source_config = {LAUNCHER: "megatron-lm"}
    return result


def on_plan_budget(e: Estimate, data: dict) -> tuple[Estimate, float]:
    """(E judged against the memory its plan searched in, the GPU's less the plan's --headroom; that headroom in GiB,
    0 where none): explain's and report's moves of a plan made with --headroom had read "fits" against the whole GPU
    where the plan itself had refused them. The time is the same: memory does not price it."""
    headroom = data.get("headroom_gib") if isinstance(data, dict) else None
    if not isinstance(headroom, int | float) or headroom <= 0 or headroom >= e.gpu.memory_gib:
        return e, 0.0
    return replace(e, gpu=replace(e.gpu, memory_gib=e.gpu.memory_gib - headroom)), float(headroom)


# A saved result's own fix where the error's is worded in flags (its batch over its DP): no flag changes a file
def _saved_fix(err: MoetuneError) -> str:
    """The fix of an error worded in flags, worded for a saved result: its fields to edit."""
    return f"edit the file's {err.file_fields or 'configuration'} to fit, or save the result again with " \
           "`moetune plan/estimate --json`"


def _named(err: MoetuneError, where: str) -> MoetuneError:
    """The error naming the saved result once (_NamesFile's name it already), with a fix for the file where the
    error's is worded in flags."""
    text = f"{err.problem}; {_saved_fix(err)}" if err.flags_fix else str(err)
    return MoetuneError(text if isinstance(err, _NamesFile) else f"{where}: {text}", same_as=err.same_as)


def _defaulted(r: dict, model) -> list[str]:
    """What the saved result lists as defaulted (an estimate's: knobs left to the platform and its global batch), and
    moe_router_dtype where a result saved before the knob was recorded is rebuilt with FP32 (_configuration), said
    where estimate's options say it (compute.router_dtype_defaulted)."""
    saved = r.get("defaulted")
    out = [str(name) for name in saved] if isinstance(saved, list) else []
    if router_dtype_defaulted(model, given="moe_router_dtype" in r["knobs"]) and "moe_router_dtype" not in out:
        out.append("moe_router_dtype")
    return out


# The layout's sizes as plan/estimate --json write them: whole numbers, each checked by name before any is compared
_LAYOUT_SIZES = ("tp", "cp", "pp", "vpp", "ep", "etp")


def _whole_sizes(r: dict, lay: dict, where: str) -> None:
    """The GPU count and the layout's sizes a hand edit retyped (a string, a fraction, true) are named in one line."""
    for name, value in (("gpus", _need(r, "gpus", where)), *((f"layout.{k}", _need(lay, k, where))
                                                             for k in _LAYOUT_SIZES)):
        if type(value) is not int:
            raise _NamesFile(f"{where} holds {name} {value!r}, not a whole number: pass unmodified "
                             "`moetune plan/estimate --json` output")


def _configuration(r: dict, where: str) -> tuple[Layout, Workload, Knobs]:
    lay = _need(r, "layout", where)
    _whole_sizes(r, lay, where)
    # the split of a pipeline: without it a first/last-stage or layout-string split reads as an even one
    pipe = _need(r, "pipeline", where) if lay.get("pp", 1) > 1 else r.get("pipeline", {})
    wl, k = _need(r, "workload", where), _need(r, "knobs", where)
    layout = Layout(world_size=_need(r, "gpus", where), tp=lay["tp"], cp=lay["cp"], pp=lay["pp"], vpp=lay["vpp"],
                    ep=lay["ep"], etp=lay["etp"], first_stage_layers=pipe.get("first_stage_layers"),
                    last_stage_layers=pipe.get("last_stage_layers"), pipeline_layout=pipe.get("pipeline_layout"),
                    account_for_embedding=pipe.get("account_for_embedding", False),
                    account_for_loss=pipe.get("account_for_loss", False),
                    sequence_parallel=pipe.get("sequence_parallel"))
    modules = parse_modules(k.get("recompute_modules", [])) if k.get("recompute") == "selective" else frozenset()
    knobs = Knobs(precision=k["precision"], recompute=k["recompute"], recompute_modules=modules,
                  distributed_optimizer=k["distributed_optimizer"], optimizer=k.get("optimizer", "adam"),
                  optimizer_offload_fraction=k["optimizer_offload_fraction"], main_grads_fp32=k["main_grads_fp32"],
                  adam_moments_bytes=k.get("adam_moments_bytes", 4), dispatcher=k["dispatcher"],
                  flex_num_sms=k.get("flex_num_sms"),
                  cuda_graph_scope=tuple(_listed(k, "cuda_graph_scope")), ep_overlap=k["ep_overlap"],
                  delay_wgrad=k["delay_wgrad"], tp_comm_overlap=k.get("tp_comm_overlap", False),
                  routing=k["routing"],
                  token_imbalance=None if k["routing"] == "force-balance" else
                  k["token_imbalance_set"] if "token_imbalance_set" in k else k.get("token_imbalance"),
                  offload_modules=parse_offload_modules(k.get("offload_modules", [])),
                  overlap_grad_reduce=k.get("overlap_grad_reduce", True),
                  overlap_param_gather=k.get("overlap_param_gather", True),
                  fp8_output_proj=k.get("fp8_output_proj", False),
                  fp8_param_gather=_switch(k, "fp8_param_gather"), fp4_param_gather=_switch(k, "fp4_param_gather"),
                  cp_comm_type=k.get("cp_comm_type", "p2p"), hcp_a2a_size=k.get("hcp_a2a_size"),
                  torch_fsdp2=k.get("torch_fsdp2", False),
                  fsdp2_reshard_after_forward=k.get("fsdp2_reshard_after_forward", True),
                  megatron_fsdp=k.get("megatron_fsdp"),
                  hidden_dropout=k.get("hidden_dropout", 0.0), attention_dropout=k.get("attention_dropout", 0.0),
                  num_distributed_optimizer_instances=k.get("num_distributed_optimizer_instances", 1),
                  outer_dp_sharding_strategy=k.get("outer_dp_sharding_strategy", "no_shard"),
                  fsdp_double_buffer=k.get("fsdp_double_buffer", False),
                  suggested_communication_unit_size=k.get("suggested_communication_unit_size"),
                  routed_buffer_factor=k.get("routed_buffer_factor"),
                  # a result saved before the knob was recorded: the FP32 router every plan's config sets
                  moe_router_dtype=router_dtype_or_plan("moe_router_dtype" in k, k.get("moe_router_dtype")))
    workload = Workload(seq_length=wl["seq_length"], micro_batch_size=wl["micro_batch_size"],
                        global_batch_size=wl["global_batch_size"])
    return layout, workload, knobs


def _listed(k: dict, name: str) -> list:
    """A list the JSON holds (a string there had been taken letter by letter: scope 'attn' as a, t, t, n)."""
    if not isinstance(value := k[name], list):
        raise TypeError(f"knobs.{name} is {type(value).__name__} {value!r:.40}, not a list")
    return value


def _switch(k: dict, name: str) -> bool | None:
    """A quantized-parameter switch as given (`<name>_set`: null where it took the preset, so a move to another recipe
    takes that recipe's preset as the same flags would); a result saved before that key, as sized."""
    return k[f"{name}_set"] if f"{name}_set" in k else k.get(name)
