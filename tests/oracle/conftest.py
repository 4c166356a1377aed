"""Shared helpers for the oracle tests: real HF configs from ../shared/data/models."""

import json
from pathlib import Path

import pytest

MODELS = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "models"


def load_config(name: str) -> dict:
    return json.loads((MODELS / f"{name}.config.json").read_text())


@pytest.fixture(scope="session")
def hf_config():
    return load_config
