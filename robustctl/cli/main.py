"""The robustctl entry point and its one exception-to-exit-code boundary.

``main(argv) -> int`` runs a command and maps every outcome to the table in
:mod:`robustctl.exit_codes`: usage errors (typer's vendored click) → 64 (never click's own 2, which would read as
CRITICAL), :class:`~robustctl.errors.RobustctlError` → its ``exit_code`` with one line on stderr,
anything unexpected → 3 with one line (the traceback with ``-vv``). ``-v``/``--verbose`` may stand
anywhere before ``--`` (``robustctl diagnose -v`` as well as ``robustctl -v diagnose``): ``main``
counts and removes them before typer parses the rest.
"""

from __future__ import annotations

import functools
import sys
import traceback
from typing import Annotated

import typer
import typer.core

from robustctl import __version__, interrupts
from robustctl.cli import diagnose as diagnose_cmd
from robustctl.cli import inventory as inventory_cmd
from robustctl.cli.common import State
from robustctl.cli.help import examples, hide_switch_types, reflow_help
from robustctl.errors import RobustctlError
from robustctl.exit_codes import ExitCode

hide_switch_types()

app = typer.Typer(
    name="robustctl",
    help="Rapid isolation for large LLM training jobs: diagnose hosts, name suspects, over-evict.",
    epilog=examples(
        ("robustctl diagnose --dry-run", "what a diagnose of this machine would run"),
        ("robustctl diagnose -i cluster.yaml -v", "every active host; -v works after the command too"),
        ("robustctl hosts", "suspect, evicted and standby hosts, with their last finding"),
    ),
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        sys.stdout.write(f"robustctl {__version__}\n")
        raise typer.Exit(0)


@app.callback()
def root(
    ctx: typer.Context,
    verbose: Annotated[
        int,
        typer.Option(
            "--verbose", "-v", count=True, help="More detail; -vv shows tracebacks (also after the command)."
        ),
    ] = 0,
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """robustctl: name the faulty machines of a training job fast, and take them out safely."""
    State.verbose = verbose
    State.command = ctx.invoked_subcommand or ""


app.command("diagnose", epilog=diagnose_cmd.EXAMPLES)(diagnose_cmd.diagnose)
app.add_typer(inventory_cmd.app, name="inventory")


def _register_optional() -> None:
    from robustctl.cli import analyze as analyze_cmd
    from robustctl.cli import ckpt as ckpt_cmd
    from robustctl.cli import hosts as hosts_cmd
    from robustctl.cli import replay_sdc as replay_sdc_cmd
    from robustctl.cli import stacks as stacks_cmd

    app.command("stacks", epilog=stacks_cmd.EXAMPLES)(stacks_cmd.stacks)
    app.command("analyze", epilog=analyze_cmd.EXAMPLES)(analyze_cmd.analyze)
    app.command("hosts", epilog=hosts_cmd.EXAMPLES)(hosts_cmd.hosts)
    app.command("replay-sdc", epilog=replay_sdc_cmd.EXAMPLES)(replay_sdc_cmd.replay_sdc)
    app.add_typer(ckpt_cmd.app, name="ckpt")


def _register_actions() -> None:
    from robustctl.cli import audit as audit_cmd
    from robustctl.cli import evict as evict_cmd
    from robustctl.cli import playbook as playbook_cmd
    from robustctl.cli import restart as restart_cmd
    from robustctl.cli import standby as standby_cmd

    app.command("evict", epilog=evict_cmd.EVICT_EXAMPLES)(evict_cmd.evict)
    app.command("return", epilog=evict_cmd.RETURN_EXAMPLES)(evict_cmd.return_)
    app.add_typer(standby_cmd.app, name="standby")
    app.command("audit", epilog=audit_cmd.EXAMPLES)(audit_cmd.audit)
    app.command("restart", epilog=restart_cmd.RESTART_EXAMPLES)(restart_cmd.restart)
    app.command("stop", epilog=restart_cmd.STOP_EXAMPLES)(restart_cmd.stop)
    app.add_typer(playbook_cmd.app, name="playbook")
    _register_update()


def _register_update() -> None:
    from robustctl.cli import update as update_cmd

    app.add_typer(update_cmd.app, name="update")
    app.command("rollback", epilog=update_cmd.ROLLBACK_EXAMPLES)(update_cmd.rollback)


def _register_sweep() -> None:
    from robustctl.cli import sweep as sweep_cmd

    app.command("sweep", epilog=sweep_cmd.SWEEP_EXAMPLES)(sweep_cmd.sweep)
    app.command("history", epilog=sweep_cmd.HISTORY_EXAMPLES)(sweep_cmd.history)
    app.command("lemons", epilog=sweep_cmd.LEMONS_EXAMPLES)(sweep_cmd.lemons)


def _register_watch() -> None:
    from robustctl.cli import ettr as ettr_cmd
    from robustctl.cli import watch as watch_cmd

    app.command("watch", epilog=watch_cmd.WATCH_EXAMPLES)(watch_cmd.watch)
    app.command("ettr", epilog=ettr_cmd.EXAMPLES)(ettr_cmd.ettr)


_register_optional()
_register_actions()
_register_sweep()
_register_watch()
reflow_help(app)


def main(argv: list[str] | None = None) -> int:
    """Run robustctl with ``argv`` (default ``sys.argv[1:]``) and return the exit code.

    SIGINT and SIGTERM stop every command the run started (:mod:`robustctl.interrupts`), print one
    line and return 130.
    """
    State.verbose, args = _take_verbose(sys.argv[1:] if argv is None else argv)
    State.command = ""
    with interrupts.handle_signals() as caught:
        try:
            rc = _dispatch(args)
        except KeyboardInterrupt:
            caught.signame = caught.signame or "SIGINT"
    if caught.signame is not None:
        return _interrupted(caught)
    return rc


@functools.cache
def command_tree() -> typer.core.TyperGroup:
    """The click command tree typer builds from ``app``, built once per process.

    ``app(...)`` would build it anew on every call (about 35 ms for this CLI); a process that runs
    :func:`main` many times (the playbook engine's tests, the fuzz sweeps) pays it once. The tree is
    fixed once this module is imported, and click makes a fresh context for every invocation. What
    typer reads from the environment while building it (whether ``--show-completion`` detects the
    shell or takes it as a value) is read once, as in a process that runs one command;
    ``command_tree.cache_clear()`` builds it again.
    """
    command = typer.main.get_command(app)
    assert isinstance(command, typer.core.TyperGroup)  # an app of several commands
    return command


def _dispatch(args: list[str]) -> int:
    """Run the command and map its outcome to an exit code (the one exception boundary)."""
    try:
        rv = command_tree()(args=args, prog_name="robustctl", standalone_mode=False)
    except typer.Exit as exc:
        return int(exc.exit_code)
    except SystemExit as exc:  # typer's --show-completion/--install-completion exit on their own
        return (
            exc.code
            if isinstance(exc.code, int)
            else int(ExitCode.OK if exc.code is None else ExitCode.USAGE)
        )
    except typer.Abort:  # end of input at a prompt
        sys.stderr.write("robustctl: aborted\n")
        return int(ExitCode.INTERRUPTED)
    except typer.TyperException as exc:
        show = getattr(exc, "show", None)
        if callable(show):
            show()
        else:
            sys.stderr.write(f"robustctl: error: {_plain(exc.format_message())}\n")
        return int(ExitCode.USAGE)
    except RobustctlError as exc:
        sys.stderr.write(f"robustctl: error: {_plain(exc)}\n")
        if State.verbose >= 2:
            traceback.print_exc()
        return int(exc.exit_code)
    except BrokenPipeError:
        return int(ExitCode.OK)
    except Exception as exc:
        sys.stderr.write(
            f"robustctl: internal error: {type(exc).__name__}: {_plain(exc)} (run with -vv for the traceback)\n"
        )
        if State.verbose >= 2:
            traceback.print_exc()
        return int(ExitCode.UNKNOWN)
    return int(rv) if isinstance(rv, int) else 0


def _interrupted(caught: interrupts.Caught) -> int:
    """Stop every command still running (local groups, remote probes), print one line, return 130."""
    stopped = interrupts.stop_all()
    signame = caught.signame or "SIGINT"
    commands = tuple(dict.fromkeys((*caught.commands, *stopped.commands)))
    what = State.command or "command"
    if commands:
        from robustctl.inventory.hostrange import collapse

        done = f"stopped what was running on {len(commands)} host(s): {collapse(list(commands))}"
    else:
        done = "no command was running"
    sys.stderr.write(f"robustctl: {what} interrupted by {signame}; {_plain(done)}\n")
    return int(ExitCode.INTERRUPTED)


def _plain(text: object) -> str:
    """An error message safe for the terminal: control characters (ESC) as ``\\xNN``."""
    from robustctl.report.console import plain

    return plain(text)


def _take_verbose(argv: list[str]) -> tuple[int, list[str]]:
    """Count ``-v``/``-vv``/``--verbose`` before ``--`` and remove them: they may follow the subcommand."""
    count = 0
    rest: list[str] = []
    for i, a in enumerate(argv):
        if a == "--":
            rest.extend(argv[i:])
            break
        if a == "--verbose":
            count += 1
        elif a.startswith("-v") and set(a[1:]) == {"v"}:
            count += len(a) - 1
        else:
            rest.append(a)
    return count, (["-" + "v" * count, *rest] if count else rest)


def run() -> None:
    """Console-script entry point."""
    sys.exit(main())
