"""The robustctl entry point and its one exception-to-exit-code boundary.

``main(argv) -> int`` runs a command and maps every outcome to the table in
:mod:`robustctl.exit_codes`: usage errors (typer's vendored click) → 64 (never click's own 2, which would read as
CRITICAL), :class:`~robustctl.errors.RobustctlError` → its ``exit_code`` with one line on stderr,
anything unexpected → 3 with one line (the traceback with ``-vv``).
"""

from __future__ import annotations

import sys
import traceback
from typing import Annotated

import typer

from robustctl import __version__
from robustctl.cli import diagnose as diagnose_cmd
from robustctl.cli import inventory as inventory_cmd
from robustctl.cli.common import State
from robustctl.errors import RobustctlError
from robustctl.exit_codes import ExitCode

app = typer.Typer(
    name="robustctl",
    help="Rapid isolation for large LLM training jobs: diagnose hosts, name suspects, over-evict.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        sys.stdout.write(f"robustctl {__version__}\n")
        raise typer.Exit(0)


@app.callback()
def root(
    verbose: Annotated[
        int, typer.Option("--verbose", "-v", count=True, help="More detail; -vv shows tracebacks.")
    ] = 0,
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """robustctl: name the faulty machines of a training job fast, and take them out safely."""
    State.verbose = verbose


app.command("diagnose")(diagnose_cmd.diagnose)
app.add_typer(inventory_cmd.app, name="inventory")


def _register_optional() -> None:
    from robustctl.cli import analyze as analyze_cmd
    from robustctl.cli import stacks as stacks_cmd

    app.command("stacks")(stacks_cmd.stacks)
    app.command("analyze")(analyze_cmd.analyze)


def _register_actions() -> None:
    from robustctl.cli import audit as audit_cmd
    from robustctl.cli import evict as evict_cmd
    from robustctl.cli import standby as standby_cmd

    app.command("evict")(evict_cmd.evict)
    app.command("return")(evict_cmd.return_)
    app.add_typer(standby_cmd.app, name="standby")
    app.command("audit")(audit_cmd.audit)


_register_optional()
_register_actions()


def main(argv: list[str] | None = None) -> int:
    """Run robustctl with ``argv`` (default ``sys.argv[1:]``) and return the exit code."""
    args = sys.argv[1:] if argv is None else argv
    State.verbose = sum(a.count("v") for a in args if a.startswith("-v") and set(a[1:]) == {"v"})
    State.verbose += args.count("--verbose")
    try:
        rv = app(args=args, prog_name="robustctl", standalone_mode=False)
    except typer.Exit as exc:
        return int(exc.exit_code)
    except typer.Abort:
        sys.stderr.write("robustctl: aborted\n")
        return 130
    except typer.TyperException as exc:
        show = getattr(exc, "show", None)
        if callable(show):
            show()
        else:
            sys.stderr.write(f"robustctl: error: {exc.format_message()}\n")
        return int(ExitCode.USAGE)
    except RobustctlError as exc:
        sys.stderr.write(f"robustctl: error: {exc}\n")
        if State.verbose >= 2:
            traceback.print_exc()
        return int(exc.exit_code)
    except KeyboardInterrupt:
        sys.stderr.write("robustctl: interrupted\n")
        return 130
    except BrokenPipeError:
        return int(ExitCode.OK)
    except Exception as exc:
        sys.stderr.write(
            f"robustctl: internal error: {type(exc).__name__}: {exc} (run with -vv for the traceback)\n"
        )
        if State.verbose >= 2:
            traceback.print_exc()
        return int(ExitCode.UNKNOWN)
    return int(rv) if isinstance(rv, int) else 0


def run() -> None:
    """Console-script entry point."""
    sys.exit(main())
