"""No input can cost a cell its reply: thousands of hostile messages, then the kernel still works, both modes.

Budgets of every type and size, interrupt targets of every JSON type, garbage
content for our own requests, unknown message types, bad signatures,
truncated and non-JSON frames.  Every request that expects a reply gets one;
afterwards the namespace is intact and a runaway still stops after one
interrupt.  The random seed is fixed (CANCELKERNEL_FUZZ_SEED to change it).
"""

from __future__ import annotations

import json
import os
import queue
import random
import time

import pytest
from helpers import GRACE_ARGS, value_of
from jupyter_client.session import Session

from cancelkernel.testing import (
    MODES,
    FileFlag,
    cancel_status,
    create_subshell,
    execute,
    interrupt,
    running_kernel,
    send_execute,
    wait_reply,
    wait_running,
)

SEED = int(os.environ.get("CANCELKERNEL_FUZZ_SEED", "20261201"))
MESSAGES = 2000

# Values of every JSON type (and a few Python-only ones jupyter_client turns into JSON).
VALUES: list[object] = [
    None,
    True,
    False,
    0,
    -1,
    1.5,
    1e12,
    1e308,
    -1e308,
    2**70,
    "",
    " ",
    "x",
    "30s",
    "1e400",
    "-5",
    "nan",
    "inf",
    [],
    [1, "a"],
    {},
    {"a": 1},
    {"target": 1},
    "\u0000",
    "é" * 300,
    "a" * 5000,
]


def hostile_budget(rng: random.Random) -> dict:
    key = rng.choice(["wall_budget", "quiet_budget", "timeout", "checkpoint", "nonsense"])
    value = rng.choice(VALUES)
    return {"cancelkernel": {key: value}} if rng.random() < 0.9 else {"cancelkernel": rng.choice(VALUES)}


def control_content(rng: random.Random) -> object:
    kind = rng.random()
    if kind < 0.4:
        return {"target": rng.choice(VALUES)}
    if kind < 0.6:
        return {"subshell_id": rng.choice(VALUES)}
    if kind < 0.8:
        return {rng.choice(["target", "subshell_id", "x"]): rng.choice(VALUES), "extra": rng.choice(VALUES)}
    return rng.choice(VALUES)


def raw_frames(kc, rng: random.Random) -> list[bytes]:
    """A message the kernel must drop: bad signature, truncated, or not JSON."""
    session: Session = kc.session
    msg = session.msg("execute_request", {"code": "hostile_ran = True", "silent": False})
    frames = session.serialize(msg)  # [b"<IDS|MSG>", signature, header, parent, metadata, content]
    kind = rng.randrange(4)
    if kind == 0:
        frames[1] = b"0" * len(frames[1])  # bad signature
    elif kind == 1:
        frames = frames[: rng.randrange(1, len(frames))]  # truncated
    elif kind == 2:
        frames[2] = b"{not json"
        frames[1] = session.sign(frames[2:]) if session.auth else b""
    else:
        frames = [b"<IDS|MSG>", b"", b"\xff\xfe", b"", b"", b""]
    return frames


def send_message(kc, channel, msg_type: str, content: object) -> str:
    """Send a signed message whose content may be any JSON value (jupyter_client only sends objects)."""
    session: Session = kc.session
    msg = session.msg(msg_type, {})
    frames = session.serialize(msg)
    frames[5] = json.dumps(content).encode()
    frames[1] = session.sign(frames[2:]) if session.auth else b""
    channel.socket.send_multipart(frames)
    return str(msg["header"]["msg_id"])


class Expected:
    """Requests that must be answered, by channel."""

    def __init__(self) -> None:
        self.shell: set[str] = set()
        self.control: set[str] = set()
        self.replies: dict[str, dict] = {}  # by the request's msg_id


def send_one(kc, rng: random.Random, expected: Expected) -> None:
    kind = rng.random()
    if kind < 0.3:
        msg_id = send_execute(kc, "hostile_cells += 1", metadata=hostile_budget(rng))
        expected.shell.add(msg_id)
    elif kind < 0.45:
        expected.control.add(send_message(kc, kc.control_channel, "interrupt_request", control_content(rng)))
    elif kind < 0.55:
        expected.control.add(send_message(kc, kc.control_channel, "cancel_status_request", control_content(rng)))
    elif kind < 0.65:
        content = rng.choice(
            [{"action": rng.choice(VALUES), "name": rng.choice(VALUES)}, {"action": "list"}, rng.choice(VALUES)]
        )
        expected.shell.add(send_message(kc, kc.shell_channel, "checkpoint_request", content))
    elif kind < 0.75:
        # Unknown types: stock behaviour is no reply at all; they must simply do no harm.
        channel = rng.choice([kc.shell_channel, kc.control_channel])
        channel.send(
            kc.session.msg(rng.choice(["bogus_request", "execute_reply", "", "x" * 200]), {"a": rng.choice(VALUES)})
        )
    else:
        socket = rng.choice([kc.shell_channel.socket, kc.control_channel.socket])
        socket.send_multipart(raw_frames(kc, rng))


def collect(kc, expected: Expected, deadline: float) -> None:
    for channel, wanted in ((kc.shell_channel, expected.shell), (kc.control_channel, expected.control)):
        while True:
            try:
                msg = channel.get_msg(timeout=0)
            except queue.Empty:
                break
            parent = msg["parent_header"].get("msg_id")
            wanted.discard(parent)
            expected.replies[parent] = msg


# A cell that runs until the test opens its gate, whatever interrupts the fuzz sends it meanwhile.
RESILIENT = """import os, time
def _until(path):
    while not os.path.exists(path):
        time.sleep(0.01)
hits_{name} = 0
while not os.path.exists({gate!r}):
    try:
        _until({gate!r})
    except KeyboardInterrupt:
        hits_{name} += 1
"""


@pytest.mark.slow
@pytest.mark.parametrize("busy", [False, True], ids=["idle", "two-cells-running"])
@pytest.mark.parametrize("mode", MODES)
def test_hostile_messages_cost_nothing(mode: str, busy: bool) -> None:
    """The fuzz, on an idle kernel and while two cells run at once (the parent shell's and a subshell's)."""
    rng = random.Random(SEED)
    with running_kernel(mode, extra_arguments=GRACE_ARGS) as (km, kc):
        assert execute(kc, "x = 42\nhostile_cells = 0")["content"]["status"] == "ok"
        gate, running = FileFlag("hostile-gate"), []
        if busy:
            sub = create_subshell(kc)
            running = [
                send_execute(kc, RESILIENT.format(name=name, gate=gate.path), subshell_id=shell)
                for name, shell in (("main", None), ("sub", sub))
            ]
            for msg_id in running:
                wait_running(kc, msg_id)
        expected = Expected()
        expected.shell.update(running)
        for i in range(MESSAGES):
            send_one(kc, rng, expected)
            if i % 50 == 0:
                collect(kc, expected, 0)
        gate.set()  # the two cells end (one the fuzz's interrupts stopped early has ended already: also right)
        deadline = time.monotonic() + 120
        while (expected.shell or expected.control) and time.monotonic() < deadline:
            time.sleep(0.05)
            collect(kc, expected, deadline)
        assert not expected.shell, f"{len(expected.shell)} shell requests never answered (seed {SEED})"
        assert not expected.control, f"{len(expected.control)} control requests never answered (seed {SEED})"
        for msg_id in running:
            content = expected.replies[msg_id]["content"]
            assert content["status"] == "ok" or content["ename"] == "KeyboardInterrupt", content
        assert km.is_alive()
        assert value_of(kc, "x") == "42"
        assert value_of(kc, "'hostile_ran' in dir()") == "False"
        runaway = send_execute(kc, "while True:\n    pass")
        wait_running(kc, runaway, at="while True:")
        assert interrupt(kc, runaway)["interrupted"] is True
        assert wait_reply(kc, runaway)["content"]["ename"] == "KeyboardInterrupt"
        assert cancel_status(kc)["executions"] == []


UNARMABLE = [1e12, 1e308, "1e12", 2**70, "Infinity", "inf", -3, "soon", [], {}, True]


@pytest.mark.parametrize("mode", MODES)
def test_a_budget_that_cannot_be_armed_is_refused_with_a_reply(mode: str) -> None:
    with running_kernel(mode) as (_, kc):
        for value in UNARMABLE:
            reply = wait_reply(
                kc, send_execute(kc, "ran = True", metadata={"cancelkernel": {"wall_budget": value}}), timeout=10
            )
            assert reply["content"]["ename"] == "BudgetError", value
            assert "not run" in reply["content"]["evalue"], value
            text = value if isinstance(value, str) else json.dumps(value)
            magic = execute(kc, f"%%budget quiet={text}\nran = True", timeout=10)
            assert magic["content"]["ename"] == "BudgetError", (value, magic["content"])
        assert value_of(kc, "'ran' in dir()") == "False"
