"""Who may use `cancelkernel mcp --http`: a bearer token on the MCP path, and the Host/Origin check on every address.

Whoever reaches the port runs code as the user, so the MCP endpoint answers
only a request that carries `Authorization: Bearer <token>` (compared in
constant time; anything else is a 401 and nothing runs).  Every other path is
left to the app, which has no other route: `/.well-known/*` (where clients
look for OAuth metadata) answers a plain 404.  The SDK's Host/Origin check
(DNS rebinding) is configured here for whatever address is bound, since the
SDK turns it on by itself only for a loopback host.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import secrets
import typing as t

from mcp.server.transport_security import TransportSecuritySettings

if t.TYPE_CHECKING:
    from starlette.types import ASGIApp, Receive, Scope, Send

TOKEN_ENV = "CANCELKERNEL_MCP_TOKEN"
MCP_PATH = "/mcp"
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")
WILDCARDS = ("0.0.0.0", "::")  # the wildcard addresses: compared against, never bound here


def new_token() -> str:
    """A token nobody can guess (256 bits, URL-safe: it fits in a header and a config file as is)."""
    return secrets.token_urlsafe(32)


def token_problem(token: str) -> str | None:
    """Why a token given by the user cannot be used in an Authorization header, or None."""
    if not token.strip():
        return "it is empty"
    if token != token.strip() or any(c.isspace() for c in token):
        return "it contains white space"
    if not token.isascii() or not token.isprintable():
        return "it must be printable ASCII (a header carries it)"
    return None


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogateescape")).digest()


class BearerGate:
    """An ASGI wrapper: the MCP path needs the bearer token; every other path (and the lifespan) passes through."""

    def __init__(self, app: ASGIApp, token: str, path: str = MCP_PATH):
        self.app = app
        self.path = path
        self._digest = _digest(token)  # digests of equal length: compare_digest takes the same time whatever is sent

    def allows(self, authorization: str | None) -> bool:
        """Whether an Authorization header carries the token (scheme `Bearer`, any case)."""
        if authorization is None:
            return False
        scheme, _, credentials = authorization.strip().partition(" ")
        if scheme.lower() != "bearer":
            return False
        return hmac.compare_digest(_digest(credentials.strip()), self._digest)

    def guards(self, path: str) -> bool:
        return path == self.path or path.startswith(self.path + "/")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        guarded = scope["type"] in ("http", "websocket") and self.guards(str(scope.get("path", "")))
        if guarded and not self.allows(_header(scope, b"authorization")):
            await _refuse(scope, send)
            return
        await self.app(scope, receive, send)


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers") or []:
        if key.lower() == name:
            return bytes(value).decode("latin-1")
    return None


async def _refuse(scope: Scope, send: Send) -> None:
    """401, with the OAuth-style error body (RFC 6750) and a sentence saying what to send."""
    if scope["type"] == "websocket":
        await send({"type": "websocket.close", "code": 1008})
        return
    body = json.dumps(
        {
            "error": "invalid_token",
            "error_description": "cancelkernel mcp needs the header `Authorization: Bearer <token>` with the token it "
            "printed at start (or the one given with --mcp-token / $" + TOKEN_ENV + ")",
        }
    ).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 401,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"www-authenticate", b'Bearer error="invalid_token"'),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


# -- the Host / Origin check --------------------------------------------------------------


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def host_pattern(name: str) -> str:
    """A Host header value the check accepts: 'NAME' -> 'NAME:*' (any port), 'NAME:PORT' and '[V6]:PORT' as written."""
    name = name.strip()
    if name.startswith("["):
        return name if "]:" in name else f"{name.rstrip(']')}]:*"
    if name.count(":") > 1:  # a bare IPv6 address
        return f"[{name}]:*"
    return name if ":" in name else f"{name}:*"


def allowed_hosts(bound: str, extra: t.Sequence[str] = ()) -> list[str]:
    """The Host values accepted on `bound`: the loopback names on a loopback or wildcard address, else the address."""
    loopback = is_loopback(bound) or bound in WILDCARDS
    own = [f"{h}:*" for h in LOOPBACK_HOSTS] if loopback else [host_pattern(bound)]
    return list(dict.fromkeys([*own, *(host_pattern(h) for h in extra)]))


def transport_security(bound: str, extra: t.Sequence[str] = ()) -> TransportSecuritySettings:
    """The SDK's DNS-rebinding check for any bound address: those Host values, and pages served from them."""
    hosts = allowed_hosts(bound, extra)
    origins = [f"{scheme}://{h}" for h in hosts for scheme in ("http", "https")]
    return TransportSecuritySettings(enable_dns_rebinding_protection=True, allowed_hosts=hosts, allowed_origins=origins)
