"""Which child processes an interrupt signals: the cells', never the launcher's."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from cancelkernel.runtime.children import ChildSignaller

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="children are found through /proc")


def test_children_from_before_the_kernel_are_spared_and_later_ones_signalled():
    launcher_helper = subprocess.Popen(["sleep", "60"])
    try:
        signaller = ChildSignaller()
        cells_child = subprocess.Popen(["sleep", "60"])
        try:
            signaller.signal(signal.SIGINT)
            assert cells_child.wait(timeout=10) == -signal.SIGINT
            assert launcher_helper.poll() is None
        finally:
            cells_child.kill()
            cells_child.wait()
    finally:
        launcher_helper.kill()
        launcher_helper.wait()
