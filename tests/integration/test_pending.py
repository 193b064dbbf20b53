"""An interrupt that names a cell which has not started yet cancels it before it runs, both exec modes."""

from __future__ import annotations

import uuid

from helpers import value_of

from cancelkernel.testing import FileFlag, control_request, execute, send_execute, wait_reply, wait_running


def test_a_queued_cell_named_by_an_interrupt_never_runs(kc) -> None:
    gate = FileFlag("go")  # the first cell runs until the test lets it finish
    first = send_execute(kc, f"{gate.wait_code}\nfirst_ran = True")
    queued = send_execute(kc, "queued_ran = True")
    wait_running(kc, first, at=gate.wait_code)  # the first cell runs: the second one waits in the queue
    reply = control_request(kc, "interrupt_request", {"target": queued})["content"]
    assert reply["status"] == "ok"
    assert reply["interrupted"] is False
    assert reply["pending"] is True
    assert reply["running"] == first  # the cell that runs now is left alone
    gate.set()
    assert wait_reply(kc, first)["content"]["status"] == "ok"
    cancelled = wait_reply(kc, queued)
    meta = cancelled["metadata"]["cancelkernel"]
    assert cancelled["content"]["ename"] == "KeyboardInterrupt"
    assert "before it started" in cancelled["content"]["evalue"]
    assert meta["interrupted"] is True
    assert meta["before_start"] is True
    assert meta["reason"] == "request"
    assert value_of(kc, "'queued_ran' in dir()") == "False"
    assert value_of(kc, "first_ran") == "True"


def test_an_interrupt_that_overtakes_its_cell_still_cancels_it(kc) -> None:
    target = str(uuid.uuid4())
    reply = control_request(kc, "interrupt_request", {"target": target})["content"]
    assert reply["interrupted"] is False
    assert reply["pending"] is True
    msg = kc.session.msg(
        "execute_request",
        {
            "code": "overtaken_ran = True",
            "silent": False,
            "store_history": False,
            "user_expressions": {},
            "allow_stdin": False,
            "stop_on_error": False,
        },
    )
    msg["header"]["msg_id"] = target  # the execute_request the interrupt was meant for, arriving later
    kc.shell_channel.send(msg)
    assert wait_reply(kc, target)["metadata"]["cancelkernel"]["before_start"] is True
    assert value_of(kc, "'overtaken_ran' in dir()") == "False"


def test_an_interrupt_for_a_finished_cell_stays_a_no_op(kc) -> None:
    done = send_execute(kc, "x = 1")
    wait_reply(kc, done)
    reply = control_request(kc, "interrupt_request", {"target": done})["content"]
    assert reply["interrupted"] is False
    assert reply["pending"] is False
    assert execute(kc, "y = x + 1")["content"]["status"] == "ok"
    assert value_of(kc, "y") == "2"
