"""Which child processes an interrupt signals: the cells', never the launcher's."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from cancelkernel.runtime.children import ChildSignaller

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="children are found through /proc")


# A child that dies of SIGINT even where this test inherited SIGINT ignored (a shell's background job):
# a cell's child never inherits that, the kernel handles SIGINT.
SLEEPER = [
    sys.executable,
    "-c",
    "import signal, time; signal.signal(signal.SIGINT, signal.SIG_DFL); print(flush=True); time.sleep(60)",
]


def sleeper() -> subprocess.Popen:
    """Started, and its SIGINT back to the default (it said so)."""
    child = subprocess.Popen(SLEEPER, stdout=subprocess.PIPE)
    assert child.stdout is not None
    child.stdout.readline()
    return child


def test_children_from_before_the_kernel_are_spared_and_later_ones_signalled():
    launcher_helper = sleeper()
    try:
        signaller = ChildSignaller()
        cells_child = sleeper()
        try:
            signaller.signal(signal.SIGINT)
            assert cells_child.wait(timeout=10) == -signal.SIGINT
            assert launcher_helper.poll() is None
        finally:
            cells_child.kill()
            cells_child.wait()
            cells_child.stdout.close()
    finally:
        launcher_helper.kill()
        launcher_helper.wait()
        launcher_helper.stdout.close()
