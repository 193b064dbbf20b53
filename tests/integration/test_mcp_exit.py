"""No kernel outlives `cancelkernel mcp`: stdin closed or SIGTERM, even with a cell running or wedged in C."""

from __future__ import annotations

import pytest
from mcp_helpers import McpServer

from cancelkernel.testing import process_exited, wait_until

pytestmark = pytest.mark.timeout(120)

WEDGED = "sum(range(10**12))  # exit"


@pytest.mark.parametrize("http", [False, True], ids=["stdin-closed", "sigterm"])
def test_every_kernel_is_gone_after_the_server_exits(http: bool) -> None:
    server = McpServer(http=http)
    try:
        server.start()
        assert server.call("execute", code="1")["status"] == "ok"
        other = server.call("start_kernel")
        assert not other.is_error, other
        running = server.call("execute", code=WEDGED, kernel_id=other["kernel_id"], wait=0.5)
        assert running["status"] == "running", running
        assert wait_until(lambda: len(server.processes()) >= 2)
    finally:
        server.close()
    left = [pid for pid in server.before_exit if not process_exited(pid)]
    assert len(server.before_exit) >= 2, f"left behind: {left} of {server.before_exit}"
    assert left == [], f"left behind: {left} of {server.before_exit}"
    if server.process is not None:
        assert server.process.returncode == 0
