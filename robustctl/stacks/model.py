"""Typed stack dumps: the input of :mod:`robustctl.stacks.cluster`.

Collection (live, via the node-side ``diagnostics/stacks.py`` probe) and offline parsing
(:mod:`robustctl.stacks.parse`, py-spy text or JSON files) both produce :class:`ProcessDump` values;
clustering and blame never look at raw py-spy output.

Conventions:
    * ``ThreadStack.frames`` is **innermost first**, as ``py-spy dump`` prints it (index 0 is the
      frame executing now, the last one is ``<module>`` of the entry script).
    * A process py-spy could not read (EPERM, uninterruptible ``D`` state, process gone, garbage
      output) is still a :class:`ProcessDump`, with ``error`` set and no threads: it is evidence
      ("could not be read"), never dropped and never a crash.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from robustctl.errors import RobustctlError
from robustctl.exit_codes import ExitCode


class DumpParseError(RobustctlError):
    """A py-spy dump (JSON or text) is not what py-spy prints: garbage, wrong shape, empty.

    Offline analysis turns it into a per-file UNKNOWN result; it never names a suspect.
    """

    exit_code = ExitCode.UNKNOWN


@dataclass(frozen=True, slots=True)
class Frame:
    """One Python frame.

    Attributes:
        function: function name as py-spy prints it (``"all_reduce"``, ``"<module>"``).
        file: source path as py-spy reports it (``filename``; may be absolute or short).
        line: line number, ``None`` when py-spy did not report one.
        module: the native module py-spy names for a native frame (JSON ``module``), else ``None``.
        short_file: py-spy's ``short_filename`` (JSON), the path its text output prints; ``None``
            when ``file`` already is that short form (text dumps).
    """

    function: str
    file: str
    line: int | None = None
    module: str | None = None
    short_file: str | None = None


@dataclass(frozen=True)
class ThreadStack:
    """The stack of one thread of a process.

    Attributes:
        thread_id: py-spy's thread id as text (decimal TID or ``0x…`` pthread id of old releases).
        name: thread name (``"MainThread"``, ``"Thread-3 (_pin_memory_loop)"``) or ``None``.
        frames: innermost frame first.
        idle: py-spy's idle flag; ``None`` when unknown.
        active: py-spy's active flag (``active`` in JSON, ``(active)`` in text); ``None`` when unknown.
        owns_gil: whether the thread held the GIL at dump time; ``None`` when unknown.
    """

    thread_id: str
    name: str | None
    frames: tuple[Frame, ...]
    idle: bool | None = None
    active: bool | None = None
    owns_gil: bool | None = None

    @property
    def is_main(self) -> bool:
        """True for the interpreter's main thread (named ``MainThread``)."""
        return self.name == "MainThread"


class ProcessRole(str, enum.Enum):
    """What a process of a rank does; stacks are clustered per role.

    ``MAIN``: the training rank process. ``DATALOADER``: a ``torch.utils.data`` worker process.
    ``CHECKPOINT``: a process saving a checkpoint (async checkpoint writer). ``OTHER``: anything else.
    """

    MAIN = "main"
    DATALOADER = "dataloader"
    CHECKPOINT = "checkpoint"
    OTHER = "other"


@dataclass(frozen=True)
class ProcessDump:
    """The stacks of one process, or why they could not be read.

    Attributes:
        threads: every thread py-spy reported; empty when ``error`` is set.
        rank: global rank of the training rank this process belongs to (a data-loader worker
            carries its parent's rank); ``None`` when unknown.
        host: inventory host name, when collected live.
        pid: OS process id.
        role: see :class:`ProcessRole`; collection sets it, parsing infers it from frames.
        parent_pid: parent process id (a data-loader worker's rank process).
        cmdline: the process command line, when known.
        state: ``/proc/PID/stat`` state letter at collection time (``"R"``, ``"S"``, ``"D"``, ``"Z"``).
        comm: ``/proc/PID/comm`` at collection time (PyTorch names a data-loader worker
            ``pt_data_worker``), when collected live.
        error: one line on why py-spy failed (``"Permission denied (os error 13)"``, ``"process gone"``);
            ``None`` when the dump was read.
        source: where it came from: a file path, or ``"host:pid"``.
    """

    threads: tuple[ThreadStack, ...]
    rank: int | None = None
    host: str | None = None
    pid: int | None = None
    role: ProcessRole = ProcessRole.MAIN
    parent_pid: int | None = None
    cmdline: str | None = None
    state: str | None = None
    error: str | None = None
    source: str | None = None
    comm: str | None = None

    @property
    def readable(self) -> bool:
        """True when py-spy returned stacks (no ``error``)."""
        return self.error is None

    @property
    def main_thread(self) -> ThreadStack | None:
        """The thread that represents this process: ``MainThread`` if present, else the first thread.

        ``None`` for an unreadable process or one with no thread.
        """
        for t in self.threads:
            if t.is_main:
                return t
        return self.threads[0] if self.threads else None
