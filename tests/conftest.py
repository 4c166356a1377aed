from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    path = SHARED / "data"
    if not path.exists():
        pytest.skip("../shared/data is not beside the repository")
    return path


@pytest.fixture(autouse=True)
def _piped_width(monkeypatch):
    """Output captured by a test lays out at the piped width (cli/output.py console), not at a COLUMNS the shell that
    runs pytest exports; a test that wants a width sets COLUMNS itself."""
    monkeypatch.delenv("COLUMNS", raising=False)
