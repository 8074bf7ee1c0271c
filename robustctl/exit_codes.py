"""The one exit-code table of robustctl.

Every command returns one of these. The values follow the Nagios plugin convention for the
health states (0-3) and BSD ``sysexits.h`` for misuse (64 ``EX_USAGE``, 78 ``EX_CONFIG``), so a
typo or a bad inventory never exits like a broken node.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """Process exit codes. See the README's "Exit codes" table."""

    OK = 0
    """Everything checked is healthy (or not applicable)."""
    WARNING = 1
    """Degraded: something is below par but under the action threshold."""
    CRITICAL = 2
    """Faults or suspects found."""
    UNKNOWN = 3
    """Could not check: a host was unreachable, timed out, or a probe failed."""
    USAGE = 64
    """Bad command line (unknown option, bad argument value)."""
    CONFIG = 78
    """Bad configuration or inventory file."""
    INTERRUPTED = 130
    """Interrupted by SIGINT or SIGTERM (128 + SIGINT, the shell convention); every command the run
    had started was stopped."""
