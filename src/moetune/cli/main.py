"""The ``moetune`` command: a thin shell over the Python API.

Each sub-command lives in its own module of this package and is registered below. Errors the
user can fix are ``MoetuneError``; they are printed as one line with a non-zero exit.
"""

import json
import sys

import click

from moetune.errors import MoetuneError


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="moetune")
def cli() -> None:
    """Plan, check and diagnose Mixture-of-Experts training on Megatron-Core / Megatron Bridge."""


def _register() -> None:
    # One import per sub-command module; each module defines a click command named `command`.
    from moetune.cli import (
        calibrate_cmd,
        check_cmd,
        diagnose_cmd,
        emit_cmd,
        estimate_cmd,
        explain_cmd,
        hardware_cmd,
        models_cmd,
        plan_cmd,
        report_cmd,
        sweep_cmd,
    )

    for module in (models_cmd, hardware_cmd, estimate_cmd, plan_cmd, explain_cmd, diagnose_cmd, check_cmd, emit_cmd,
                   sweep_cmd, report_cmd, calibrate_cmd):
        cli.add_command(module.command)
    cli.add_command(estimate_cmd.memory_command)


def _fail(message: str, code: int, args: list[str]) -> int:
    """The one error line on stderr; under --json, bad input (exit 2) is also a JSON object on stdout, so a script
    reading stdout gets JSON either way (exit 1 follows output the command already wrote: rule errors, nothing fits)."""
    click.echo(f"error: {message}", err=True)
    if code == 2 and "--json" in args:
        click.echo(json.dumps({"error": message, "exit_code": code}))
    return code


def main(argv: list[str] | None = None) -> int:
    _register()
    args = sys.argv[1:] if argv is None else argv
    if not args:  # bare `moetune`: the help, not an error
        click.echo(cli.get_help(click.Context(cli, info_name="moetune")))
        return 0
    try:
        code = cli.main(args=argv, standalone_mode=False)
    except MoetuneError as err:
        return _fail(str(err), err.exit_code, args)
    except click.exceptions.Exit as ex:
        return ex.exit_code
    except click.ClickException as err:
        return _fail(err.format_message(), err.exit_code, args)
    except OSError as err:  # a file the command reads or writes that the system refuses (permissions, a full disk)
        return _fail(f"{err.filename or 'a file'}: {err.strerror or err}; check the path and its permissions", 2, args)
    except click.exceptions.Abort:
        return _fail("aborted", 1, args)
    except RecursionError:  # a YAML/JSON input nested thousands of levels deep (or an alias that holds itself)
        return _fail("an input file nests its values too deeply (or refers to itself) to read; pass the config or "
                     "result as Megatron, Bridge or moetune wrote it", 2, args)
    return code if isinstance(code, int) else 0


if __name__ == "__main__":
    sys.exit(main())
