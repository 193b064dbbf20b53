"""The server's resources: the intervention log (cancelkernel://log) and each kernel's status."""

from __future__ import annotations

import collections
import json
import os
import typing as t

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceNotFoundError

from ..agent.errors import BadInputError
from . import models, shapes
from .sessions import Sessions
from .waiting import in_thread

LOG_RECORDS = 200  # the last ones; the file (--log) has them all


def register(server: MCPServer, sessions: Sessions) -> None:
    log_path = sessions.options.log

    @server.resource(
        "cancelkernel://log",
        name="intervention-log",
        mime_type="application/json",
        description=(
            f"The last {LOG_RECORDS} interventions (interrupts, restarts, deaths), one JSON object each: the cell, "
            "why (a code and a sentence), what was done, how it ended, the stack, what was restored."
        ),
    )
    async def intervention_log() -> str:
        return json.dumps(await in_thread(_last_records, log_path), ensure_ascii=False)

    @server.resource(
        "cancelkernel://kernels",
        name="kernels",
        mime_type="application/json",
        description="Every kernel of this server, as list_kernels shows them.",
    )
    async def kernels() -> str:
        return json.dumps(shapes.dump(models.Kernels(kernels=[shapes.kernel_info(s) for s in sessions.list()])))

    @server.resource(
        "cancelkernel://kernels/{kernel_id}/status",
        name="kernel-status",
        mime_type="application/json",
        description=(
            "One kernel's status, as the status tool shows it: what runs, for how long, seconds since output, "
            "the line it is on."
        ),
    )
    async def kernel_status(kernel_id: str) -> str:
        try:
            session = sessions.get(kernel_id)
        except BadInputError as exc:
            raise ResourceNotFoundError(str(exc)) from None
        return json.dumps(shapes.dump(shapes.kernel_info(session, await in_thread(session.ak.status))))


def _last_records(path: str | None) -> list[dict[str, t.Any]]:
    if not path or not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        lines = collections.deque((line for line in f if line.strip()), maxlen=LOG_RECORDS)
    records = []
    for line in lines:
        try:
            records.append(json.loads(line))
        except ValueError:  # a line being written right now
            continue
    return records
