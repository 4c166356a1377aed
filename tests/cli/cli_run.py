"""The CLI run in-process as a user runs it: exit code, stdout and stderr."""

from moetune.cli.main import main


def run(args, capsys):
    code = main(args)
    out = capsys.readouterr()
    return code, out.out, out.err
