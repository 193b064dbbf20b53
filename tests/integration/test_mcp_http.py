"""`cancelkernel mcp --http`: the same tools over streamable HTTP, progress on the stream,
and closing the stream interrupts.

Who may use it: a bearer token (printed at start, or given), asked before anything runs; the Host/Origin check
on every address; /.well-known answers a plain 404.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from collections.abc import Iterator

import pytest
from mcp import Client
from mcp_helpers import INITIALIZE, PNG, McpServer, command, http_get, http_post, http_transport

from cancelkernel.testing import process_exited

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def mcp() -> Iterator[McpServer]:
    server = McpServer("--no-spare", http=True)
    try:
        server.start()
        # A kernel for the exit check to find gone, whichever of the module's tests this worker runs (some start none).
        assert server.call("execute", code="'started'")["status"] == "ok"
        yield server
    finally:
        server.close()  # SIGTERM
    assert server.process is not None, server.process.returncode
    assert server.process.returncode == 0, server.process.returncode
    left = [pid for pid in server.before_exit if not process_exited(pid)]
    assert server.kernel_pids, f"kernel processes left after SIGTERM: {left}"
    assert left == [], f"kernel processes left after SIGTERM: {left}"


def test_it_listens_on_loopback_only_by_default(mcp: McpServer) -> None:
    assert mcp.url is not None
    assert mcp.url.startswith("http://127.0.0.1:")
    assert mcp.url.endswith("/mcp")


def test_execute_with_progress_and_an_image(mcp: McpServer) -> None:
    progress: list = []
    code = (
        "import time\nfrom IPython.display import display\nprint('working', flush=True)\ntime.sleep(2.2)\n"
        f"display({{'image/png': {PNG!r}, 'text/plain': 'dot'}}, raw=True)"
    )
    r = mcp.call("execute", code=code, progress=progress)
    assert not r.is_error, r
    assert r["status"] == "ok", r
    assert [o["type"] for o in r["outputs"]] == ["stream", "image"]
    assert r.content[1].type == "image"
    assert r.content[1].data == PNG
    assert progress, progress
    assert "since output" in progress[-1][1], progress
    assert "Cell In[" in progress[-1][1], progress


def test_closing_the_stream_interrupts_the_cell(mcp: McpServer) -> None:
    mcp.cancel_once_running(
        "execute", code="import time  # http\nprint('started', flush=True)\nwhile True:\n    time.sleep(0.01)"
    )
    last = next(k["last_execution"] for k in mcp.call("list_kernels")["kernels"] if k["kernel_id"] == "default")
    r = mcp.call("get_execution", execution_id=last, wait=20)
    assert (r["status"], r["reason"]) == ("interrupted", "manual"), r
    assert "cancelled" in r["why"], r
    assert mcp.call("execute", code="'free'")["outputs"][0]["text"] == "'free'\n"


def test_a_gil_holding_call_is_restarted_over_http(mcp: McpServer) -> None:
    r = mcp.call("execute", code="sum(range(10**12))  # http", wall_budget=0.5)
    assert r.is_error, r
    assert r["status"] == "restarted", r
    assert r["state"] == "lost", r
    assert "lost" in r["why"], r


# -- who may use it: the bearer token, the Host check, /.well-known --------------------------


def _call(code: str, request_id: int = 2) -> dict:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": "execute", "arguments": {"code": code}},
    }


def _session(mcp: McpServer) -> dict[str, str]:
    """A 2025-11-25 session opened with the right token, by hand: the headers its later requests carry."""
    status, headers, body = http_post(mcp.url, INITIALIZE, mcp.headers())
    assert status == 200, (status, body)
    assert '"protocolVersion":"2025-11-25"' in body, (status, body)
    session = {"Mcp-Session-Id": headers["mcp-session-id"], "Mcp-Protocol-Version": "2025-11-25"}
    status, _, body = http_post(
        mcp.url, {"jsonrpc": "2.0", "method": "notifications/initialized"}, {**session, **mcp.headers()}
    )
    assert status == 202, (status, body)
    return session


def test_the_token_is_printed_once_with_the_url(mcp: McpServer) -> None:
    assert mcp.token, mcp.stderr
    assert len(mcp.token) >= 40, mcp.stderr
    assert sum(mcp.token in line for line in mcp.stderr) == 1, mcp.stderr
    assert mcp.stderr[-1].endswith(f"streamable HTTP on {mcp.url}"), mcp.stderr


def test_without_the_right_token_nothing_is_answered_and_nothing_runs(mcp: McpServer, tmp_path) -> None:
    assert mcp.url is not None
    assert mcp.token is not None
    marker = tmp_path / "ran"
    code = f"open({str(marker)!r}, 'w').close()"
    session = _session(mcp)
    for wrong in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Bearer {mcp.token}x"},
                  {"Authorization": f"Basic {mcp.token}"}, {"Authorization": mcp.token}):  # fmt: skip
        status, headers, body = http_post(mcp.url, _call(code), {**session, **wrong})
        assert status == 401, (wrong, status, body)
        assert headers["www-authenticate"].startswith("Bearer")
        assert "Authorization: Bearer <token>" in body
        assert http_post(mcp.url, INITIALIZE, wrong)[0] == 401
    assert not marker.exists()
    status, _, body = http_post(mcp.url, _call(code), {**session, "Authorization": f"bearer {mcp.token}"})
    replies = [json.loads(line[len("data: ") :]) for line in body.splitlines() if line.startswith("data: ")]
    assert status == 200, body
    assert replies[-1]["result"]["structuredContent"]["status"] == "ok", body
    assert marker.exists()


def test_the_sdk_client_without_the_token_or_with_a_foreign_host_cannot_connect(mcp: McpServer) -> None:
    assert mcp.url is not None
    port = mcp.url.split(":")[2].split("/")[0]
    for headers in (None, {"Authorization": "Bearer wrong"}, {**mcp.headers(), "Host": f"evil.example:{port}"}):
        with pytest.raises(ExceptionGroup) as refused:  # the SDK reports the 401 as an MCPError in an ExceptionGroup
            asyncio.run(_connect(mcp.url, headers))
        assert "MCPError" in repr(refused.value) or "401" in repr(refused.value), refused.value


async def _connect(url: str, headers: dict[str, str] | None) -> None:
    async with Client(http_transport(url, headers), cache=None) as client:
        await client.list_tools()


def test_the_host_and_origin_checks_stay_on_behind_the_token(mcp: McpServer) -> None:
    assert mcp.url is not None
    port = mcp.url.split(":")[2].split("/")[0]
    assert http_post(mcp.url, INITIALIZE, {**mcp.headers(), "Host": f"evil.example:{port}"})[0] == 421
    assert http_post(mcp.url, INITIALIZE, {**mcp.headers(), "Host": f"127.0.0.1.evil.example:{port}"})[0] == 421
    assert http_post(mcp.url, INITIALIZE, {**mcp.headers(), "Origin": "http://evil.example"})[0] == 403
    assert http_post(mcp.url, INITIALIZE, {**mcp.headers(), "Origin": f"http://localhost:{port}"})[0] == 200
    assert http_post(mcp.url, INITIALIZE, {"Host": f"evil.example:{port}"})[0] == 401  # the token is asked first


def test_well_known_paths_answer_a_plain_404(mcp: McpServer) -> None:
    assert mcp.url is not None
    base = mcp.url.removesuffix("/mcp")
    for path in ("/.well-known/oauth-authorization-server", "/.well-known/oauth-protected-resource/mcp",
                 "/.well-known/openid-configuration", "/register"):  # fmt: skip
        status, body = http_get(base + path)
        assert (status, body) == (404, "Not Found"), (path, status, body)


def test_on_every_address_the_host_check_stays_on() -> None:
    server = McpServer("--no-spare", "--allow-host", "notebook-box", http=True, host="0.0.0.0", connect=False)
    try:
        server.start()
        assert server.url is not None
        assert server.token is not None
        port = server.url.split(":")[2].split("/")[0]
        url = f"http://127.0.0.1:{port}/mcp"
        assert any("not loopback" in line for line in server.stderr), server.stderr
        assert http_post(url, INITIALIZE, {**server.headers(), "Host": f"evil.example:{port}"})[0] == 421
        assert http_post(url, INITIALIZE, {**server.headers(), "Host": f"notebook-box:{port}"})[0] == 200
        assert http_post(url, INITIALIZE, server.headers())[0] == 200  # 127.0.0.1:PORT
        assert http_post(url, INITIALIZE, {"Host": f"notebook-box:{port}"})[0] == 401
    finally:
        server.close()


def test_a_token_from_the_environment_is_not_printed_and_is_asked() -> None:
    server = McpServer("--no-spare", http=True, env={"CANCELKERNEL_MCP_TOKEN": "from-the-environment-1234"})
    try:
        server.start()
        assert server.token == "from-the-environment-1234"
        assert not any("from-the-environment" in line for line in server.stderr), server.stderr
        assert server.tools()[0].name == "execute"
        assert http_post(server.url or "", INITIALIZE, {"Authorization": "Bearer other"})[0] == 401
    finally:
        server.close()


def test_no_token_only_on_loopback_and_with_a_warning() -> None:
    server = McpServer("--no-spare", "--no-mcp-token", http=True)
    try:
        server.start()
        assert server.token is None
        assert any("WARNING: --no-mcp-token" in line for line in server.stderr)
        assert server.tools()[0].name == "execute"
    finally:
        server.close()
    refused = subprocess.run(
        [*command("--no-mcp-token"), "--http", "0.0.0.0:0"], capture_output=True, text=True, timeout=60
    )
    assert refused.returncode == 2, refused.stderr
    assert "not a loopback address" in refused.stderr, refused.stderr
    for bad in (["--mcp-token", "two words"], ["--mcp-token", "x", "--no-mcp-token"]):
        refused = subprocess.run([*command(*bad), "--http", "0"], capture_output=True, text=True, timeout=60)
        assert refused.returncode == 2, refused.stderr
        assert "token" in refused.stderr, refused.stderr
    refused = subprocess.run(command("--mcp-token", "abc"), capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2, refused.stderr
    assert "apply to --http only" in refused.stderr, refused.stderr
