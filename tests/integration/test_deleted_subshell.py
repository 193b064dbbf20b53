"""Requests for a subshell that no longer exists are answered, both exec modes (as stock ipykernel 7.4 answers them).

An execute_request for a deleted subshell gets an `UnknownSubshellError` reply
and a busy/idle pair; a comm message (no reply of its own) gets its idle, the
only thing a client can wait for.  Ours once sent neither: building the reply's
metadata failed on a request whose content was still packed.
"""

from __future__ import annotations

import pytest

from cancelkernel.testing import (
    MODES,
    control_request,
    create_subshell,
    running_kernel,
    send_execute,
    wait_idle,
    wait_reply,
)


@pytest.mark.parametrize("mode", MODES)
def test_requests_for_a_deleted_subshell_are_answered(mode: str) -> None:
    with running_kernel(mode) as (_, kc):
        sub = create_subshell(kc)
        assert control_request(kc, "delete_subshell_request", {"subshell_id": sub})["content"]["status"] == "ok"

        msg_id = send_execute(kc, "a = 1", subshell_id=sub)
        reply = wait_reply(kc, msg_id)["content"]
        assert reply["status"] == "error", reply
        assert reply["ename"] == "UnknownSubshellError", reply
        assert reply["evalue"] == f"Unknown subshell_id {sub!r}", reply
        wait_idle(kc, msg_id)

        comm = kc.session.msg("comm_close", {"comm_id": "no-such-comm", "data": {}})
        comm["header"]["subshell_id"] = sub
        kc.shell_channel.send(comm)
        wait_idle(kc, comm["header"]["msg_id"])

        assert wait_reply(kc, kc.execute("b = 2"))["content"]["status"] == "ok"  # the parent shell is unharmed
