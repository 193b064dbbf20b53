"""Signalling a kernel's process group only while its number is still ours (cancelkernel.pids).

pid_max can be 32768: a busy machine reuses a dead kernel's number within
minutes, and a blind killpg on it killed a JupyterLab server another test
used. Real processes here; a "stranger" is a process in a session of its own
whose number stands in for a reused one.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import types
from collections.abc import Iterator

import pytest

from cancelkernel.pids import forget_reused_group, group_is_ours, kill_child_group, process_running
from cancelkernel.testing import process_exited

SLEEPER = [sys.executable, "-c", "import time; time.sleep(600)"]
# A group leader that starts a second process in its group, prints its pid, and sleeps.
LEADER = [
    sys.executable,
    "-c",
    "import subprocess, sys, time\nprint(subprocess.Popen(sys.argv[1:]).pid, flush=True)\ntime.sleep(600)",
    *SLEEPER,
]


@pytest.fixture
def started() -> Iterator[list[subprocess.Popen]]:
    processes: list[subprocess.Popen] = []
    yield processes
    for process in processes:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        if process.stdout is not None:
            process.stdout.close()


def leader_with_member(started: list[subprocess.Popen]) -> tuple[subprocess.Popen, int]:
    leader = subprocess.Popen(LEADER, start_new_session=True, stdout=subprocess.PIPE, text=True)
    started.append(leader)
    assert leader.stdout is not None
    return leader, int(leader.stdout.readline())


def stranger(started: list[subprocess.Popen]) -> subprocess.Popen:
    process = subprocess.Popen(SLEEPER, start_new_session=True)
    started.append(process)
    return process


def test_a_live_childs_group_is_killed_whole(started: list[subprocess.Popen]) -> None:
    leader, member = leader_with_member(started)
    assert group_is_ours(leader, leader.pid)
    kill_child_group(leader, leader.pid)
    assert leader.wait(30) == -signal.SIGKILL
    assert process_exited(member, 30)


def test_what_a_dead_child_left_in_its_group_is_killed(started: list[subprocess.Popen]) -> None:
    leader, member = leader_with_member(started)
    os.kill(leader.pid, signal.SIGKILL)
    leader.wait(30)  # reaped: its number is free, the member still holds the group
    assert process_running(member)
    assert group_is_ours(leader, leader.pid)
    kill_child_group(leader, leader.pid)
    assert process_exited(member, 30)


def test_a_number_another_process_took_is_left_alone(started: list[subprocess.Popen]) -> None:
    leader = subprocess.Popen(SLEEPER, start_new_session=True)
    started.append(leader)
    leader.kill()
    leader.wait(30)
    other = stranger(started)
    # As if `other` had been given the reaped leader's number.
    assert not group_is_ours(leader, other.pid)
    kill_child_group(leader, other.pid)
    assert other.poll() is None
    assert process_running(other.pid)


def test_jupyter_client_is_kept_from_signalling_a_reused_number(started: list[subprocess.Popen]) -> None:
    leader = subprocess.Popen(SLEEPER, start_new_session=True)
    started.append(leader)
    leader.kill()
    leader.wait(30)
    other = stranger(started)
    km = types.SimpleNamespace(provisioner=types.SimpleNamespace(process=leader, pgid=other.pid))
    forget_reused_group(km)
    assert km.provisioner.pgid is None
    live = subprocess.Popen(SLEEPER, start_new_session=True)
    started.append(live)
    km_live = types.SimpleNamespace(provisioner=types.SimpleNamespace(process=live, pgid=live.pid))
    forget_reused_group(km_live)
    assert km_live.provisioner.pgid == live.pid
