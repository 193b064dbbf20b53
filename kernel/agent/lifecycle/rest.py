"""A Jupyter Server's (or a kernel gateway's) REST API: one call, its status and JSON, and errors people can act on.

Standard library only (urllib): http and https, the token in the
`Authorization` header.  Shared by the server lifecycle and the tests' and
benchmarks' servers.
"""

from __future__ import annotations

import json
import ssl
import typing as t
import urllib.error
import urllib.parse
import urllib.request

from ..errors import BadInputError, KernelStartError

DEFAULT_TIMEOUT = 30.0


class RestClient:
    """REST calls to one server."""

    def __init__(self, server_url: str, token: str | None, *, timeout: float = DEFAULT_TIMEOUT):
        parsed = urllib.parse.urlparse(server_url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise BadInputError(
                f"server_url must be an http:// or https:// URL such as http://127.0.0.1:8888, not {server_url!r}"
            )
        self.base = server_url.rstrip("/")
        self.token = token or ""
        self.timeout = timeout
        self._ssl = ssl.create_default_context() if parsed.scheme == "https" else None

    def request(
        self, method: str, path: str, body: object = None, *, timeout: float | None = None
    ) -> tuple[int, t.Any]:
        """(HTTP status, JSON body or None, or the text when it is not JSON);
        OSError when the server cannot be reached."""
        data = json.dumps(body).encode() if body is not None else (b"" if method in ("POST", "PATCH", "PUT") else None)
        req = urllib.request.Request(self.base + path, data=data, method=method)
        if self.token:
            req.add_header("Authorization", f"token {self.token}")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=timeout or self.timeout, context=self._ssl) as response:
                return response.status, _body(response.read())
        except urllib.error.HTTPError as exc:
            return exc.code, _body(exc.read())

    def call(
        self,
        method: str,
        path: str,
        body: object = None,
        *,
        expect: tuple[int, ...] = (200,),
        timeout: float | None = None,
    ) -> t.Any:
        """A call that must succeed: KernelStartError (unreachable,
        or an unexpected status) / BadInputError (403) otherwise."""
        try:
            status, answer = self.request(method, path, body, timeout=timeout)
        except OSError as exc:
            raise KernelStartError(
                f"cannot reach the Jupyter server at {self.base}: {getattr(exc, 'reason', exc)}; is it running?"
            ) from exc
        if status == 403:
            said = _short(answer) if answer else ""
            if said and "token" not in said.lower() and "forbidden" not in said.lower():
                # Not the token: e.g. Enterprise Gateway refusing the user it would start the kernel as.
                raise BadInputError(
                    f"the server at {self.base} refused {method} {path} (403): {said}; nothing was started"
                )
            raise BadInputError(
                f"the server at {self.base} refused the token (403 Forbidden on {method} {path}); "
                f"pass the server's token (token=..., --token, or JUPYTER_TOKEN); nothing was started"
            )
        if status not in expect:
            raise KernelStartError(f"{method} {self.base}{path} answered {status}: {_short(answer)}")
        return answer

    def check_server(self) -> dict:
        """GET /api: a Jupyter server says its version; anything else is refused before anything starts."""
        answer = self.call("GET", "/api", timeout=10)
        if not isinstance(answer, dict) or "version" not in answer:
            raise BadInputError(f"{self.base} does not answer like a Jupyter server (GET /api gave {_short(answer)})")
        return answer

    def websocket_url(self, path: str) -> str:
        scheme = "wss" if self.base.startswith("https") else "ws"
        return scheme + self.base[self.base.index(":") :] + path


def _body(raw: bytes) -> t.Any:
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode(errors="replace")


def _short(answer: t.Any) -> str:
    text = (
        answer.get("message") or answer.get("reason") or json.dumps(answer) if isinstance(answer, dict) else str(answer)
    )
    return text if len(text) < 300 else text[:300] + "..."
