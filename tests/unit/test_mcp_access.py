"""Who may use `cancelkernel mcp --http`: the bearer token's check and options, the Host values accepted per address."""

from __future__ import annotations

import asyncio
import typing as t

import pytest

from cancelkernel.agent import BadInputError
from cancelkernel.mcp.access import BearerGate, allowed_hosts, host_pattern, new_token, transport_security
from cancelkernel.mcp.options import parse_args

TOKEN = "s3cret-Token_0123456789"


def test_the_gate_wants_the_exact_token_as_a_bearer() -> None:
    gate = BearerGate(lambda *a: None, TOKEN)  # type: ignore[arg-type, return-value]
    assert gate.allows(f"Bearer {TOKEN}")
    assert gate.allows(f"bearer {TOKEN}")
    assert gate.allows(f"  BEARER   {TOKEN} ")
    for wrong in (None, "", "Bearer", "Bearer ", TOKEN, f"Basic {TOKEN}", f"Bearer {TOKEN}x", f"Bearer {TOKEN[:-1]}",
                  "Bearer é", f"Bearer {TOKEN} extra"):  # fmt: skip
        assert not gate.allows(wrong), wrong


def _status(gate: BearerGate, path: str, headers: list[tuple[bytes, bytes]]) -> tuple[int, bool]:
    """What the gate answers for one request, and whether the app behind it was reached."""
    reached, sent = [], []

    async def app(scope: t.Any, receive: t.Any, send: t.Any) -> None:
        reached.append(scope["path"])
        await send({"type": "http.response.start", "status": 404, "headers": []})

    async def send(message: dict) -> None:
        sent.append(message)

    async def receive() -> dict:
        return {"type": "http.request", "body": b""}

    gate.app = app
    asyncio.run(gate({"type": "http", "path": path, "headers": headers}, receive, send))
    return sent[0]["status"], bool(reached)


def test_the_gate_guards_the_mcp_path_only() -> None:
    gate = BearerGate(lambda *a: None, TOKEN)  # type: ignore[arg-type, return-value]
    assert _status(gate, "/mcp", []) == (401, False)
    assert _status(gate, "/mcp/", [(b"authorization", b"Bearer nope")]) == (401, False)
    assert _status(gate, "/mcp", [(b"Authorization", f"Bearer {TOKEN}".encode())]) == (404, True)
    # Clients probe OAuth discovery: a plain 404 from the app, never a 401 that would start an OAuth flow.
    assert _status(gate, "/.well-known/oauth-authorization-server", []) == (404, True)
    assert _status(gate, "/mcpx", []) == (404, True)


def test_new_tokens_are_long_and_different() -> None:
    tokens = {new_token() for _ in range(20)}
    assert len(tokens) == 20
    assert all(len(x) >= 40 and x.isascii() and " " not in x for x in tokens)


def test_accepted_host_values_per_bound_address() -> None:
    loopback = ["127.0.0.1:*", "localhost:*", "[::1]:*"]
    assert allowed_hosts("127.0.0.1") == loopback
    assert allowed_hosts("::1") == loopback
    assert allowed_hosts("0.0.0.0", ["box", "box.lan:8765"]) == [*loopback, "box:*", "box.lan:8765"]
    assert allowed_hosts("10.1.2.3") == ["10.1.2.3:*"]
    assert allowed_hosts("fd00::5") == ["[fd00::5]:*"]
    assert [host_pattern(h) for h in ("[fd00::5]", "[fd00::5]:80", "fd00::5", "box:*")] == [
        "[fd00::5]:*",
        "[fd00::5]:80",
        "[fd00::5]:*",
        "box:*",
    ]
    settings = transport_security("0.0.0.0", ["box"])
    assert settings.enable_dns_rebinding_protection
    assert "box:*" in settings.allowed_hosts
    assert "http://box:*" in settings.allowed_origins
    assert "http://localhost:*" in settings.allowed_origins


def test_token_options(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CANCELKERNEL_MCP_TOKEN", raising=False)
    made = parse_args(["--http", "0"])
    assert made.token_generated
    assert made.mcp_token
    assert len(made.mcp_token) >= 40
    given = parse_args(["--http", "0", "--mcp-token", TOKEN])
    assert (given.mcp_token, given.token_generated) == (TOKEN, False)
    monkeypatch.setenv("CANCELKERNEL_MCP_TOKEN", "from-env")
    assert parse_args(["--http", "0"]).mcp_token == "from-env"
    assert parse_args(["--http", "0", "--mcp-token", TOKEN]).mcp_token == TOKEN  # the flag wins
    assert parse_args([]).mcp_token is None  # stdio: no HTTP, the variable is not read
    assert parse_args(["--http", "127.0.0.1:0", "--no-mcp-token"]).mcp_token is None
    assert parse_args(["--http", "localhost:0", "--no-mcp-token"]).mcp_token is None
    assert parse_args(["--http", "0.0.0.0:0", "--allow-host", "box"]).allowed_hosts == ["box"]


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--http", "0.0.0.0:0", "--no-mcp-token"], "not a loopback address"),
        (["--http", "10.0.0.1:0", "--no-mcp-token"], "not a loopback address"),
        (["--http", "0", "--mcp-token", "a b"], "white space"),
        (["--http", "0", "--mcp-token", " "], "empty"),
        (["--http", "0", "--mcp-token", "é"], "printable ASCII"),
        (["--http", "0", "--mcp-token", "x", "--no-mcp-token"], "not both"),
        (["--mcp-token", "x"], "--http only"),
        (["--no-mcp-token"], "--http only"),
        (["--allow-host", "box"], "--http only"),
    ],
)
def test_token_misuse_is_refused_before_anything_starts(argv: list[str], says: str) -> None:
    with pytest.raises(BadInputError, match=says):
        parse_args(argv)


def test_an_unusable_token_in_the_environment_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CANCELKERNEL_MCP_TOKEN", "two words")
    with pytest.raises(BadInputError, match=r"\$CANCELKERNEL_MCP_TOKEN cannot be used"):
        parse_args(["--http", "0"])
