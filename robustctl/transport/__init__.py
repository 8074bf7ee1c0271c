"""Transports run argv lists on hosts: ``local`` (subprocess) and ``ssh`` (paramiko).

Use :func:`transport_for` to get the right one for a host; :mod:`robustctl.transport.fanout` runs
work on many hosts with bounded concurrency and deadlines.
"""

from __future__ import annotations

from robustctl.transport.base import CommandResult, Transport
from robustctl.transport.pool import TransportPool

__all__ = ["CommandResult", "Transport", "TransportPool"]
