"""The CLI run in-process as a user runs it: exit code, stdout and stderr."""

import contextlib
import io
from pathlib import Path

from moetune.cli.main import main


def run(args, capsys):
    code = main(args)
    out = capsys.readouterr()
    return code, out.out, out.err


def saved(path: Path, args: list[str]) -> Path:
    """The --json output of ARGS (a plan or estimate), run in-process, saved at PATH."""
    with contextlib.redirect_stdout(io.StringIO()) as out:
        assert main([*args, "--json"]) == 0
    path.write_text(out.getvalue())
    return path
