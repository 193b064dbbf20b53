"""Cells run in the background: submit, watch while it runs, status from another thread, one caller at a time."""

from __future__ import annotations

import pytest
from helpers import agent

from cancelkernel.agent import BadInputError
from cancelkernel.testing import wait_until

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize("name", ["cancelkernel", "cancelkernel-worker"])
def test_a_submitted_cell_is_watched_and_interrupted(name: str) -> None:
    with agent(name) as ak:
        sub = ak.submit("import time\nprint('started', flush=True)\nwhile True:\n    time.sleep(0.01)")
        assert ak.busy
        # The watch's status may first be taken at the print (a loaded machine): wait until it says the loop.
        assert wait_until(lambda: sub.watch.outputs and "time.sleep(0.01)" in (sub.watch.current_line() or "")), (
            sub.watch.summary()
        )
        assert sub.watch.current_line().startswith("Cell In[")
        status = ak.status()
        assert status["busy"]
        assert status["cell"]["msg_id"] == sub.watch.msg_id
        assert status["cell"]["outputs"] == 1
        with pytest.raises(BadInputError, match="still in progress"):
            ak.run("1")
        with pytest.raises(BadInputError, match="still in progress"):
            ak.submit("1")
        with pytest.raises(TimeoutError):
            sub.result(timeout=0.1)
        sub.interrupt()
        r = sub.result(timeout=60)
        assert (r.status, r.reason) == ("interrupted", "manual")
        assert r.outputs[0]["text"] == "started\n"
        assert not ak.busy
        assert ak.status()["busy"] is False
        assert ak.status()["alive"] is True
        assert ak.run("1 + 1").status == "ok"  # the kernel is free again


def test_a_submitted_cell_under_a_budget_and_a_stock_kernel() -> None:
    with agent("python3") as ak:
        sub = ak.submit("import time\ntime.sleep(30)", wall_budget=0.5)
        r = sub.result(timeout=60)
        assert (r.status, r.reason) == ("interrupted", "wall_budget")
        assert sub.watch.kernel_status is None  # stock kernels have no cancel status
        assert ak.status() == {**ak.status(), "busy": False, "ours": False}
