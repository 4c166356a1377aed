"""Total and active parameter counts vs the figures model makers published (tests/data/published_params.csv,
each row citing its source). A figure matches when it is within 0.5%, or when the maker's stated figure is
our count rounded or truncated to the digits they printed ("2.4B" covers 2.35B..2.5B)."""

import csv
from pathlib import Path

import pytest

from moetune.specs.registry import builtin_names, load_model
from moetune.walls.model_params import main_tensors, model_counts

ROWS = list(csv.DictReader(open(Path(__file__).resolve().parents[1] / "data" / "published_params.csv")))


def _close(ours: float, published: float, unit: float) -> bool:
    rounded = abs(ours - published) <= max(0.005 * published, unit / 2)
    truncated = 0 <= ours - published < unit
    return rounded or truncated


def _embeddings(name: str) -> tuple[int, int]:
    """(input embedding, output layer) elements of the main model."""
    tensors = main_tensors(load_model(name))
    inp = sum(t.numel for t in tensors if t.name.startswith("embedding"))
    out = sum(t.numel for t in tensors if t.name.startswith("output_layer"))
    return inp, out


def test_every_builtin_model_has_a_published_row():
    assert {r["short_name"] for r in ROWS} == set(builtin_names())


@pytest.mark.parametrize("row", [r for r in ROWS if r["compare"] == "yes"], ids=lambda r: r["short_name"])
def test_total_params_match_published(row):
    counts = model_counts(load_model(row["short_name"]))
    inp, out = _embeddings(row["short_name"])
    options = {"all": [0], "no_embeddings": [inp + out], "unstated": [0, inp + out]}[row["total_definition"]]
    candidates = [counts.total_params - o for o in options]
    assert any(_close(c, float(row["total_params"]), float(row["total_unit"])) for c in candidates), candidates


ACTIVE_DEFS = {"all": lambda i, o: 0, "no_input_embedding": lambda i, o: i, "no_embeddings": lambda i, o: i + o}


@pytest.mark.parametrize("row", [r for r in ROWS if r["compare"] == "yes" and r["active_params"]],
                         ids=lambda r: r["short_name"])
def test_active_params_match_published(row):
    counts = model_counts(load_model(row["short_name"]))
    inp, out = _embeddings(row["short_name"])
    published, unit = float(row["active_params"]), float(row["active_unit"])
    definition = row["active_definition"]
    # Where the maker does not say what "active" counts, one of the usual definitions must match.
    defs = ACTIVE_DEFS.values() if definition == "unstated" else [ACTIVE_DEFS[definition]]
    candidates = [counts.active_params - d(inp, out) for d in defs]
    assert any(_close(c, published, unit) for c in candidates), (candidates, published)


def test_mtp_excluded_from_total_and_counted_apart():
    counts = model_counts(load_model("deepseek-v3"))
    # DeepSeek-V3 README: 685B on Hugging Face = 671B main model + 14B MTP module. Megatron's MTP module shares
    # the embedding and output head (2 x 129280 x 7168 = 1.85B), which the HF MTP checkpoint stores again.
    assert counts.mtp_params + 2 * 129280 * 7168 == pytest.approx(14e9, rel=0.05)
