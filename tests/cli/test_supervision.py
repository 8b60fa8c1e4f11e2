"""The restart rules `tpmledger up` applies to its parts, with real child processes.

The clock is a counter the test moves, so no test waits for a backoff to pass.
"""

from __future__ import annotations

import sys

import pytest

from tpmledger.cli.supervision import ChildProcess, GaveUp, RestartPolicy, Supervisor


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _child(code: int) -> ChildProcess:
    return ChildProcess("worker", [sys.executable, "-c", f"raise SystemExit({code})"], {})


def _supervise(child: ChildProcess, clock: Clock, said: list[str]) -> Supervisor:
    policy = RestartPolicy(first_delay_s=1, max_delay_s=4, stable_after_s=60, max_failures=3)
    return Supervisor([child], policy, say=said.append, clock=clock)


def test_a_dead_child_is_restarted_after_a_growing_delay_then_given_up() -> None:
    clock, said = Clock(), []
    child = _child(3)
    supervisor = _supervise(child, clock, said)
    first = child.process
    first.wait()
    supervisor.poll()
    assert said == ["worker exited with code 3; restarting it in 1 s (attempt 1 of 3)"]
    supervisor.poll()  # the delay has not passed: nothing happens
    assert child.process is first
    clock.now += 1
    supervisor.poll()
    assert child.process is not first and said[-1] == "worker restarted"
    for _ in range(2):
        child.process.wait()
        supervisor.poll()
        clock.now += 4
        supervisor.poll()
    assert said[2] == "worker exited with code 3; restarting it in 2 s (attempt 2 of 3)"
    assert said[4] == "worker exited with code 3; restarting it in 4 s (attempt 3 of 3)"
    assert said[3] == said[5] == "worker restarted"
    child.process.wait()
    with pytest.raises(GaveUp, match="worker exited with code 3, after 3 restarts in a row"):
        supervisor.poll()


def test_a_child_that_ran_long_enough_starts_counting_again() -> None:
    clock, said = Clock(), []
    child = _child(0)
    supervisor = _supervise(child, clock, said)
    for _ in range(3):  # dies at once three times: attempts 1, 2, 3
        child.process.wait()
        supervisor.poll()
        clock.now += 4
        supervisor.poll()
    assert said[-2].endswith("(attempt 3 of 3)")
    clock.now += 60  # the last restart ran a minute before dying: it had recovered
    child.process.wait()
    supervisor.poll()
    assert said[-1] == "worker exited with code 0; restarting it in 1 s (attempt 1 of 3)"


def test_a_killed_child_is_named_with_its_signal() -> None:
    clock, said = Clock(), []
    child = ChildProcess("ingest", [sys.executable, "-c", "import time; time.sleep(600)"], {})
    supervisor = _supervise(child, clock, said)
    supervisor.poll()
    assert said == []  # alive: nothing to say
    child.process.kill()
    child.process.wait()
    supervisor.poll()
    assert said == ["ingest was killed (SIGKILL); restarting it in 1 s (attempt 1 of 3)"]
    clock.now += 1
    supervisor.poll()
    assert child.alive()
    child.process.kill()
    child.process.wait()


class Unstartable:
    """A part that died and cannot be started again (like a database that refuses)."""

    name = "the database"

    def alive(self) -> bool:
        return False

    def how_it_ended(self) -> str:
        return "stopped"

    def restart(self) -> None:
        raise RuntimeError("lock file held")


def test_failed_restarts_count_and_end_in_giving_up() -> None:
    clock, said = Clock(), []
    policy = RestartPolicy(first_delay_s=1, max_delay_s=30, max_failures=2)
    supervisor = Supervisor([Unstartable()], policy, say=said.append, clock=clock)
    supervisor.poll()
    clock.now += 1
    supervisor.poll()
    assert said == [
        "the database stopped; restarting it in 1 s (attempt 1 of 2)",
        "the database could not be restarted (lock file held); restarting it in 2 s "
        "(attempt 2 of 2)",
    ]
    clock.now += 2
    with pytest.raises(GaveUp, match="could not be restarted"):
        supervisor.poll()
