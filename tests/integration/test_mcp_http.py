"""`cancelkernel mcp --http`: the same tools over streamable HTTP, progress on the stream, and closing the stream interrupts."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from mcp_helpers import PNG, McpServer, gone

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def mcp() -> Iterator[McpServer]:
    server = McpServer("--no-spare", http=True)
    try:
        server.start()
        yield server
    finally:
        server.close()  # SIGTERM
    assert server.process is not None and server.process.returncode == 0, server.process.returncode
    left = [pid for pid in server.before_exit if not gone(pid)]
    assert server.kernel_pids and left == [], f"kernel processes left after SIGTERM: {left}"


def test_it_listens_on_loopback_only_by_default(mcp: McpServer) -> None:
    assert mcp.url is not None and mcp.url.startswith("http://127.0.0.1:") and mcp.url.endswith("/mcp")


def test_execute_with_progress_and_an_image(mcp: McpServer) -> None:
    progress: list = []
    code = (
        "import time\nfrom IPython.display import display\nprint('working', flush=True)\ntime.sleep(2.2)\n"
        f"display({{'image/png': {PNG!r}, 'text/plain': 'dot'}}, raw=True)"
    )
    r = mcp.call("execute", code=code, progress=progress)
    assert not r.is_error and r["status"] == "ok", r
    assert [o["type"] for o in r["outputs"]] == ["stream", "image"]
    assert r.content[1].type == "image" and r.content[1].data == PNG
    assert progress and "since output" in progress[-1][1] and "Cell In[" in progress[-1][1], progress


def test_closing_the_stream_interrupts_the_cell(mcp: McpServer) -> None:
    mcp.cancel_once_running("execute", code="import time  # http\nprint('started', flush=True)\nwhile True:\n    time.sleep(0.01)")
    last = next(k["last_execution"] for k in mcp.call("list_kernels")["kernels"] if k["kernel_id"] == "default")
    r = mcp.call("get_execution", execution_id=last, wait=20)
    assert (r["status"], r["reason"]) == ("interrupted", "manual") and "cancelled" in r["why"], r
    assert mcp.call("execute", code="'free'")["outputs"][0]["text"] == "'free'\n"


def test_a_gil_holding_call_is_restarted_over_http(mcp: McpServer) -> None:
    r = mcp.call("execute", code="sum(range(10**12))  # http", wall_budget=0.5)
    assert r.is_error and r["status"] == "restarted" and r["state"] == "lost" and "lost" in r["why"], r
