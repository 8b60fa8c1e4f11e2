"""Keep ``tpmledger up``'s parts running: what dies is started again, with backoff.

A part (a service process, the embedded PostgreSQL) that dies is restarted after 1 s,
then 2, 4, 8… (at most 30 s) while it keeps dying before it has run for a minute. Each
death and each restart is said on the console. When a part died that way
``max_failures`` times in a row (restarts keep failing), :meth:`Supervisor.poll` raises
:class:`GaveUp` and ``up`` stops everything.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol


class Part(Protocol):
    """Something ``up`` runs and can start again."""

    name: str

    def alive(self) -> bool:
        """False once it died."""

    def how_it_ended(self) -> str:
        """How it died, for the console (``exited with code 1``, ``was killed (SIGKILL)``)."""

    def restart(self) -> None:
        """Start it again; raises when it cannot be started."""


@dataclass(frozen=True)
class RestartPolicy:
    """When to restart a part that died, and when to give up."""

    first_delay_s: float = 1.0
    max_delay_s: float = 30.0
    stable_after_s: float = 60.0  # having run this long, a part counts as recovered
    max_failures: int = 5  # deaths in a row before recovering: then give up

    def delay(self, failures: int) -> float:
        """Seconds to wait before restart number ``failures`` (1, 2, …) in a row."""
        return float(min(self.max_delay_s, self.first_delay_s * 2 ** (failures - 1)))


class GaveUp(Exception):
    """A part kept dying after restarts; the message says which and how."""


@dataclass
class _State:
    part: Part
    started_at: float
    failures: int = 0
    restart_at: float | None = None  # set while waiting to restart


@dataclass
class Supervisor:
    """Watch parts; restart the dead ones (call :meth:`poll` regularly)."""

    parts: Sequence[Part]
    policy: RestartPolicy = field(default_factory=RestartPolicy)
    say: Callable[[str], None] = field(
        default=lambda line: print(line, file=sys.stderr, flush=True)
    )
    clock: Callable[[], float] = time.monotonic
    _states: list[_State] = field(init=False)

    def __post_init__(self) -> None:
        self._states = [_State(part, self.clock()) for part in self.parts]

    def poll(self) -> None:
        """Notice deaths and do the restarts that are due; raises :class:`GaveUp`."""
        now = self.clock()
        for state in self._states:
            part = state.part
            if state.restart_at is None:
                if part.alive():
                    continue
                self._failed(state, now, part.how_it_ended())
            elif now >= state.restart_at:
                try:
                    part.restart()
                except Exception as exc:  # any reason it cannot start counts as a failure
                    self._failed(state, now, f"could not be restarted ({exc})")
                else:
                    state.restart_at, state.started_at = None, now
                    self.say(f"{part.name} restarted")

    def _failed(self, state: _State, now: float, what: str) -> None:
        ran_long_enough = state.restart_at is None and (
            now - state.started_at >= self.policy.stable_after_s
        )
        state.failures = 1 if ran_long_enough else state.failures + 1
        if state.failures > self.policy.max_failures:
            raise GaveUp(
                f"{state.part.name} {what}, after {self.policy.max_failures} restarts in a "
                "row; giving up and stopping everything"
            )
        delay = self.policy.delay(state.failures)
        state.restart_at = now + delay
        self.say(
            f"{state.part.name} {what}; restarting it in {delay:g} s "
            f"(attempt {state.failures} of {self.policy.max_failures})"
        )


class ChildProcess:
    """A service started as a child process with a fixed command and environment."""

    def __init__(self, name: str, command: Sequence[str], env: dict[str, str]) -> None:
        self.name = name
        self._command, self._env = list(command), env
        self.process = self._spawn()

    def _spawn(self) -> subprocess.Popen[bytes]:
        return subprocess.Popen(self._command, env=self._env)

    def alive(self) -> bool:
        return self.process.poll() is None

    def how_it_ended(self) -> str:
        return describe_exit(self.process.returncode)

    def restart(self) -> None:
        self.process = self._spawn()


def describe_exit(code: int | None) -> str:
    """``exited with code 1`` or ``was killed (SIGKILL)`` (Popen's negative codes)."""
    if code is not None and code < 0:
        try:
            return f"was killed ({signal.Signals(-code).name})"
        except ValueError:
            return f"was killed (signal {-code})"
    return f"exited with code {code}"
