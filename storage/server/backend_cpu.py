"""The CPU time a PostgreSQL backend has used, when the server runs on this machine.

The live loop yields for the CPU its updates used, its own and its backend's
(docs/metrics.md#live-figures); a remote server's backends are not visible here.
"""

from __future__ import annotations

import os

import psycopg

__all__ = ["backend_cpu_s"]

_LOCAL_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def backend_cpu_s(conn: psycopg.Connection) -> tuple[int, float] | None:
    """(pid, CPU seconds) of ``conn``'s PostgreSQL backend, read from ``/proc`` when the
    server runs on this machine (a Unix socket or a loopback address, and the pid is a
    ``postgres`` process); None otherwise (a remote server, another OS)."""
    host = conn.info.host
    if not (host.startswith("/") or host in _LOCAL_HOSTS):
        return None
    pid = conn.info.backend_pid
    try:
        with open(f"/proc/{pid}/comm") as comm:
            if not comm.read().startswith("postgres"):
                return None
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rpartition(")")[2].split()
        return pid, (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS
    except (OSError, IndexError, ValueError):
        return None
