"""POST /cancelkernel/kernels/<id>/stack: the stack of a kernel whose one C call holds the GIL.

Such a kernel answers nothing (its control thread needs the GIL), but its
faulthandler answers SIGUSR1 from C: the handler signals the kernel process
(never its process group: a cell's children would die of SIGUSR1) and reads
what was added to the kernel's owner-only dump file.  Only for a kernel on this
server's host, started from this server (its pid is known); for any other the
answer says that no stack can be had.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import stat
import time
import typing as t

from jupyter_server.auth.decorator import authorized
from jupyter_server.base.handlers import APIHandler
from tornado import web

from ..frames import as_dicts, dumped_stack
from ..kernel_files import STACKS, kernel_file

# How long the handler waits for faulthandler's dump after the signal.
DUMP_WAIT = 3.0
POLL = 0.05


class StackHandler(APIHandler):
    auth_resource = "kernels"

    @web.authenticated
    @authorized
    async def post(self, kernel_id: str) -> None:
        manager = self.kernel_manager
        if kernel_id not in manager:
            raise web.HTTPError(404, f"no kernel {kernel_id} on this server")
        self.finish(json.dumps(await stack_of(manager.get_kernel(kernel_id))))


async def stack_of(km: t.Any) -> dict:
    """{available, frames, dump_file} from the kernel's dump, or {available: False, why}."""
    pid = getattr(getattr(km, "provisioner", None), "pid", None)
    connection_file = getattr(km, "connection_file", "")
    if not isinstance(pid, int) or not connection_file:
        return {
            "available": False,
            "why": "the kernel does not run on this server's host, so no stack can be had while it does not answer",
        }
    path = kernel_file(connection_file, STACKS)
    try:
        info = os.stat(path)
    except OSError:
        return {
            "available": False,
            "why": f"the kernel keeps no stack dump file at {path} (not a cancelkernel kernel, or another dump_dir)",
        }
    if info.st_uid != os.getuid() or info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        return {"available": False, "why": f"{path} is not this user's own owner-only file: not read"}
    before = info.st_size
    try:
        os.kill(pid, signal.SIGUSR1)
    except OSError as exc:
        return {"available": False, "why": f"the kernel (pid {pid}) could not be signalled: {exc}"}
    text = await _grown(path, before)
    if not text:
        return {"available": False, "why": f"the kernel wrote no dump within {DUMP_WAIT:g} s of SIGUSR1"}
    return {"available": True, "frames": as_dicts(dumped_stack(text)), "dump_file": path, "source": "faulthandler"}


async def _grown(path: str, before: int) -> str:
    """What was appended to `path` after `before` bytes, once it stopped growing
    (faulthandler writes thread by thread)."""
    deadline = time.monotonic() + DUMP_WAIT
    size = before
    while time.monotonic() < deadline:
        await asyncio.sleep(POLL)
        now = os.path.getsize(path)
        if now < before:
            before = 0  # emptied meanwhile (a cell ended): the dump starts at the top
        if now > before and now == size:
            break
        size = now
    with open(path, encoding="utf-8", errors="replace") as f:
        f.seek(before)
        return f.read()
