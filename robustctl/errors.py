"""The robustctl error hierarchy.

The library raises these and never prints; ``robustctl.cli.main.main`` translates them once into a
one-line message and an :class:`~robustctl.exit_codes.ExitCode`.
"""

from __future__ import annotations

from robustctl.exit_codes import ExitCode


class RobustctlError(Exception):
    """Base of every error robustctl raises on purpose.

    Attributes:
        exit_code: the process exit code the CLI maps this error to.
    """

    exit_code: ExitCode = ExitCode.UNKNOWN


class UsageError(RobustctlError):
    """A command-line argument is invalid (bad host pattern, unknown level, ...)."""

    exit_code = ExitCode.USAGE


class ConfigError(RobustctlError):
    """A configuration file is malformed or names an unknown key.

    The message starts with ``FILE:LINE:`` when the location is known.
    """

    exit_code = ExitCode.CONFIG


class InventoryError(ConfigError):
    """The inventory is invalid: bad host range, duplicate host, unknown host or job."""


class HostError(RobustctlError):
    """An error about one host: ``str()`` is ``"HOST: reason"``; ``reason`` is the part after it.

    Args:
        host: inventory name.
        message: one line, without the host (kept as ``reason``).
    """

    exit_code = ExitCode.UNKNOWN

    def __init__(self, host: str, message: str) -> None:
        super().__init__(f"{host}: {message}")
        self.host = host
        self.reason = message


class TransportError(HostError):
    """Running a command on a host failed for a reason other than the command itself."""


class HostUnreachable(TransportError):
    """The host could not be connected to or authenticated against."""


class HostKeyError(HostUnreachable):
    """The host's key is unknown or does not match known_hosts (a possible man-in-the-middle)."""


class CommandTimeout(TransportError):
    """A remote command ran past its deadline and was abandoned."""


class OutputTooLarge(TransportError):
    """A host printed more than the bound on one command's output; the command was stopped.

    A broken or compromised host must not exhaust the controller's memory
    (:data:`robustctl.transport.base.MAX_STDOUT_BYTES`).
    """


class ProbeError(HostError):
    """A node-side probe crashed or printed something that is not its JSON document."""


class ActionRefused(RobustctlError):
    """A destructive action was refused by a safety rail; the message names the rule and the override."""

    exit_code = ExitCode.CRITICAL
