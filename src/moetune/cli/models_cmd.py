"""``moetune models``: list the built-in models; ``moetune models show MODEL``: their key figures."""

import click

from moetune.cli.output import billions, console, emit_json, print_model_notes, table
from moetune.specs.registry import builtin_names, load_model
from moetune.walls.model_params import model_counts
from moetune.words import closest


def model_summary(name: str, spec=None) -> dict:
    """The key figures of NAME (SPEC: the model already loaded)."""
    spec = spec or load_model(name)
    counts = model_counts(spec)
    return {
        "name": spec.name,
        "model_type": spec.model_type,
        **counts.as_dict(),
        "num_layers": spec.num_layers,
        "num_moe_layers": spec.num_moe_layers,
        "num_experts": spec.num_moe_experts,
        "topk": spec.moe_router_topk,
        "shared_experts": spec.num_shared_experts,  # as the config counts them, not shared width / expert width
        "shared_expert_intermediate_size": spec.moe_shared_expert_intermediate_size,
        "hidden_size": spec.hidden_size,
        "vocab_size": spec.vocab_size,
        "attention": spec.attention + ("+dsa" if spec.dsa else ""),  # DeepSeek Sparse Attention rides on MLA
        "mtp_layers": spec.mtp_num_layers,
        "mtp_checkpoint_layers": spec.mtp_checkpoint_layers,
        "source": spec.source,
        "notes": list(spec.notes),  # fields the config.json leaves out, read at their config class's defaults
    }


def _not_a_command(word: str) -> str:
    """`models WORD` where WORD is no sub-command: a model's name (or a config.json), or one near a built-in name, is
    what `models show` takes."""
    names = builtin_names()
    model = word if word.lower() in names or word.endswith(".json") else closest(word.lower(), names)
    if model is None and closest(word.lower(), ["show"]):
        return f"No such command '{word}'; did you mean moetune models show MODEL?"
    if model is None:
        return (f"No such command '{word}': `moetune models` lists the built-in models, `moetune models show MODEL` "
                "gives one's key figures")
    meant = "" if model == word else " (the nearest built-in name)"
    return f"No such command '{word}'; for a model's key figures: moetune models show {model}{meant}"


class _ModelsGroup(click.Group):
    def resolve_command(self, ctx: click.Context, args: list[str]):
        try:
            return super().resolve_command(ctx, args)
        except click.UsageError:  # the one refusal here: no sub-command of that name
            raise click.UsageError(_not_a_command(args[0]), ctx) from None


@click.group(name="models", cls=_ModelsGroup, invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
def command(ctx: click.Context, as_json: bool) -> None:
    """List the built-in models (or `models show MODEL`)."""
    if ctx.invoked_subcommand:
        return
    rows = [model_summary(n) for n in builtin_names()]
    if as_json:
        emit_json(rows)
        return
    cols = ["model", "type", "attention", "total", "active", "layers", "moe", "experts", "topk", "shared", "mtp"]
    console().print(table("Built-in models", cols, [
        [r["name"], r["model_type"], r["attention"], billions(r["total_params"]), billions(r["active_params"]),
         r["num_layers"], r["num_moe_layers"], r["num_experts"], r["topk"], r["shared_experts"], r["mtp_layers"]]
        for r in rows], justify_right_from=3))


@command.command(name="show")
@click.argument("model")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def show(model: str, as_json: bool) -> None:
    """Key figures of MODEL (a built-in name or a config.json path)."""
    spec = load_model(model)
    info = model_summary(model, spec)
    if as_json:
        emit_json(info)
        return
    rows = [[k, billions(v) if k.endswith("_params") else v] for k, v in info.items() if k != "notes"]
    console().print(table(f"Model {info['name']}", ["field", "value"], rows))
    if note := _mtp_note(spec, info):
        console().print(note)
    print_model_notes(console(), spec)


def _mtp_note(spec, info: dict) -> str:
    """Where the MTP trained by default is not what the model could train: said, with the flag that changes it."""
    if spec.mtp_layer_kind is None or info["mtp_layers"]:
        return ""
    shipped = info["mtp_checkpoint_layers"]
    held = (f"the checkpoint ships {shipped}, which Megatron Bridge maps" if shipped else
            "the checkpoint's MTP modules are not mapped by Megatron Bridge (they would start from scratch)")
    return (f"MTP: none trained by default, as its config.json builds it; {held}: estimate and plan take "
            f"--mtp-layers N to train N")
