"""What a person sees from our kernel, through real kernels: every report is one execution's, true, and quiet.

A note is the one line the kernel adds to a cell for a budget trip, a cell
that goes on after its interrupt, an abandoned thread or a held GIL:
display_data with text/plain and escaped text/html, the machine event in
`transient` (never rendered, never saved).  An interrupt alone adds nothing
but its traceback.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time

import pytest
from helpers import GRACE_ARGS, kernel_pid

from cancelkernel import protocol
from cancelkernel.testing import (
    cancel_status,
    control_request,
    dump_file_of,
    interrupt,
    outputs,
    run_cell,
    running_kernel,
    send_execute,
    wait_dumped_in_cell,
    wait_reply,
    wait_running,
)

# One kernel per mode for the module's tests (the `kernel` fixture); some tests start one of their own.
pytestmark = pytest.mark.kernel_options(*GRACE_ARGS, shared=True)
# One elapsed time in a traceback, e.g. "1.01 s" (a budget like "of 0.5 s" is not an elapsed time).
ELAPSED = re.compile(r"(?<!of )\b\d+\.\d\d s\b")


def notes(found: list[dict]) -> list[dict]:
    return [m["content"] for m in found if m["msg_type"] == "display_data"]


def errors(found: list[dict]) -> list[dict]:
    return [m["content"] for m in found if m["msg_type"] == "error"]


def plain(traceback: list[str]) -> str:
    return re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(traceback))


def event_of(note: dict) -> dict:
    return note["transient"][protocol.EVENT_MIME]


def assert_is_a_quiet_note(note: dict) -> None:
    """Only text a front end renders as such; the event rides in transient."""
    assert set(note["data"]) == {"text/plain", "text/html"}, note["data"]
    assert note["data"]["text/plain"].startswith("cancelkernel: ")
    assert "\n" not in note["data"]["text/plain"]
    assert "<script" not in note["data"]["text/html"]
    assert 'class="cancelkernel-note"' in note["data"]["text/html"]
    assert event_of(note)["event"] in protocol.SHOWN_EVENTS


def run_interrupted(kc, code: str, at: str, km=None) -> tuple[dict, list[dict]]:
    """Run `code`, interrupt it once the kernel shows it at line `at`
    (SIGINT as JupyterLab's toolbar with our kernelspec, or a message)."""
    msg_id = send_execute(kc, code)
    wait_running(kc, msg_id, at=at)
    return interrupt_and_collect(kc, msg_id, km)


def interrupt_and_collect(kc, msg_id: str, km=None) -> tuple[dict, list[dict]]:
    if km is not None:
        km.interrupt_kernel()
    else:
        interrupt(kc, msg_id)
    found = outputs(kc, msg_id)
    return wait_reply(kc, msg_id), found


def test_reports_belong_to_their_own_execution(kernel) -> None:
    """Fast cells interrupted as they finish, a dump taken while idle: nothing of it shows in a later cell."""
    km, kc = kernel
    dump_file = control_request(kc, "kernel_info_request")["content"][protocol.KEY]["dump_file"]
    for i in range(30):
        msg_id = send_execute(kc, "import time\ntime.sleep(0.01)")
        time.sleep(0.008 + (i % 5) * 0.001)  # on purpose a moment near the cell's end: the race is the test
        reply, found = interrupt_and_collect(kc, msg_id)
        count = reply["content"]["execution_count"]
        assert not notes(found), notes(found)  # an interrupt alone is no note
        for error in errors(found):
            assert set(re.findall(r"Cell In\[(\d+)\]", plain(error["traceback"]))) <= {str(count)}, error
    time.sleep(1.0)  # three starvation periods: a dump armed for one of them would have fired by now
    assert os.path.getsize(dump_file) == 0, "an idle kernel wrote a stack dump"
    km.signal_kernel(signal.SIGUSR1)  # a dump taken while idle: nobody's
    deadline = time.monotonic() + 10
    while os.path.getsize(dump_file) == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    reply, found = run_interrupted(kc, "x = 0\nwhile True:\n    x += 1", at="while True:")
    meta = reply["metadata"][protocol.KEY]
    count = reply["content"]["execution_count"]
    assert meta["interrupted"]
    assert [e["ename"] for e in errors(found)] == ["KeyboardInterrupt"]
    assert not notes(found), [n["data"]["text/plain"] for n in notes(found)]
    assert "stack_source" not in meta, meta
    assert "gil_held" not in meta, meta
    assert meta["stack"]
    assert all(f["filename"] == meta["stack"][0]["filename"] for f in meta["stack"])
    assert set(re.findall(r"Cell In\[(\d+)\]", plain(errors(found)[0]["traceback"]))) == {str(count)}


def test_a_manual_interrupt_shows_only_its_traceback(kernel) -> None:
    km, kc = kernel
    reply, found = run_interrupted(kc, "import time\ntime.sleep(30)", at="time.sleep(30)", km=km)
    assert [m["msg_type"] for m in found if m["msg_type"] not in ("execute_input", "status")] == ["error"]
    text = plain(errors(found)[0]["traceback"])
    assert "KeyboardInterrupt" in text
    assert "time.sleep(30)" in text
    assert "SIGINT" in text
    assert len(ELAPSED.findall(text)) == 1, text  # the elapsed time, once
    assert "threading.py" not in text  # worker mode: the cooperative sleep's insides are not the user's
    assert reply["metadata"][protocol.KEY]["reason"] == protocol.REASON_SIGNAL


@pytest.mark.parametrize(
    ("budget", "loop"), [("wall=0.5", "time.sleep(30) if 1 < 2 else None"), ("quiet=0.5", "while 1 < 2:\n    pass")]
)
def test_a_budget_trip_is_one_note_before_the_traceback(kernel, budget: str, loop: str) -> None:
    _km, kc = kernel
    reply, found = run_cell(kc, f"%%budget {budget}\nimport time\n{loop}")
    shown = [m["msg_type"] for m in found if m["msg_type"] in ("display_data", "error", "stream")]
    assert shown == ["display_data", "error"], shown
    note = notes(found)[0]
    assert_is_a_quiet_note(note)
    word = "wall budget" if budget.startswith("wall") else "quiet budget"
    assert f"{word} of 0.5 s" in note["data"]["text/plain"]
    assert "interrupting it" in note["data"]["text/plain"]
    # The cell's line, escaped
    assert "1 &lt; 2" in note["data"]["text/html"]
    assert "1 < 2" not in note["data"]["text/html"]
    event = event_of(note)
    assert event["event"] == protocol.EVENT_RUNAWAY
    assert event["action"] == "interrupt"
    assert event["execution"] == reply["parent_header"]["msg_id"]
    text = plain(errors(found)[0]["traceback"])
    assert word in text, text
    assert len(ELAPSED.findall(text)) == 1, text
    assert "GIL" not in text


def test_a_cell_that_catches_the_interrupt_is_told_so(kernel) -> None:
    km, kc = kernel
    code = (
        "import time\ntry:\n    time.sleep(30)\nexcept KeyboardInterrupt:\n    print('caught')\ntime.sleep(1.5)\n'done'"
    )
    reply, found = run_interrupted(kc, code, at="time.sleep(30)", km=km)
    assert reply["content"]["status"] == "ok"
    assert not errors(found)
    assert len(notes(found)) == 1, [n["data"]["text/plain"] for n in notes(found)]
    note = notes(found)[0]
    assert_is_a_quiet_note(note)
    text = note["data"]["text/plain"]
    count = reply["content"]["execution_count"]
    assert "caught the interrupt" in text, text
    assert f"Cell In[{count}], line 6 (time.sleep(1.5))" in text, text
    assert "interrupt again" in text
    assert "GIL" not in text, text
    assert "restart" not in text, text
    assert event_of(note)["why"] == protocol.UNRESPONSIVE_CAUGHT
    meta = reply["metadata"][protocol.KEY]
    assert meta["unresponsive_why"] == protocol.UNRESPONSIVE_CAUGHT
    assert "gil_held" not in meta


# One C call that holds the GIL until the test lets it go: libc's read() through ctypes.PyDLL, which keeps the GIL.
HOLD_GIL = (
    "%%budget wall=0.3\nimport ctypes, os\n_fd = os.open({fifo!r}, os.O_RDWR)\n"
    "_n = ctypes.PyDLL(None).read(_fd, ctypes.create_string_buffer(1), 1)"
)
HOLD_LINE = 4


def run_holding_the_gil(kc, fifo: str, then: str = "") -> tuple[dict, list[dict]]:
    """Run a cell whose C call holds the GIL past its budget,
    and let the call return only once faulthandler has dumped it.

    The release waits on the dump, not on a clock: however fast or loaded the
    machine, the kernel had its proof (the dump, the starved watchdog) first.
    """
    os.mkfifo(fifo)
    dump_file = dump_file_of(kc)
    msg_id = send_execute(kc, HOLD_GIL.format(fifo=fifo) + then)
    wait_dumped_in_cell(dump_file, HOLD_LINE)
    with open(fifo, "wb", buffering=0) as release:  # the cell holds the FIFO open, so this open does not block
        release.write(b"x")
    found = outputs(kc, msg_id)
    return wait_reply(kc, msg_id), found


def test_a_gil_held_call_is_said_once_where_it_is_true(kernel, tmp_path) -> None:
    """One C call holds the GIL past the budget: faulthandler's stack and the watchdog's starvation both prove it."""
    _km, kc = kernel
    reply, found = run_holding_the_gil(kc, str(tmp_path / "first"), then="\nwhile True:\n    pass")
    meta = reply["metadata"][protocol.KEY]
    assert meta["reason"] == protocol.REASON_WALL_BUDGET
    assert meta["stack_source"] == "faulthandler"
    assert meta["gil_held"] >= 0.3, meta
    text = plain(errors(found)[0]["traceback"])
    assert text.count("held the GIL") == 1, text
    assert len(ELAPSED.findall(text)) == 1, text
    # The GIL is in the traceback, not a second note
    assert [event_of(n)["event"] for n in notes(found)] == [protocol.EVENT_RUNAWAY]
    # Ending with the call itself: either the interrupt still lands, or the cell ends first and a last note says so.
    reply, found = run_holding_the_gil(kc, str(tmp_path / "last"))
    said = [plain(e["traceback"]) for e in errors(found)] + [n["data"]["text/plain"] for n in notes(found)]
    assert sum(text.count("held the GIL") for text in said) == 1, said
    assert "PyDLL(None).read" in said[-1] or errors(found), said


def test_an_abandoned_worker_is_one_note_then_the_traceback() -> None:
    with running_kernel("worker", extra_arguments=GRACE_ARGS) as (km, kc):
        # A lock acquired twice: blocked in C (Event.wait is cooperative on the exec thread, not abandoned).
        _reply, found = run_interrupted(
            kc, "import threading\nlk = threading.Lock(); lk.acquire()\nlk.acquire()", at="lk.acquire()", km=km
        )
        shown = [m["msg_type"] for m in found if m["msg_type"] in ("display_data", "error")]
        assert shown == ["display_data", "error"], shown
        note = notes(found)[0]
        assert_is_a_quiet_note(note)
        assert event_of(note)["event"] == protocol.EVENT_ABANDONED
        assert "abandoned" in note["data"]["text/plain"], note["data"]["text/plain"]
        assert "line 3 (lk.acquire())" in note["data"]["text/plain"], note["data"]["text/plain"]
        text = plain(errors(found)[0]["traceback"])
        assert "abandoned" in text, text
        assert "lk.acquire()" in text, text
        assert len(ELAPSED.findall(text)) == 1, text
        assert run_cell(kc, "print('next')")[0]["content"]["status"] == "ok"


def test_a_refused_cell_takes_its_execution_count_as_stock_does() -> None:
    def counts(kernel_name: str, failing: str) -> list[int]:
        with running_kernel(None, kernel_name=kernel_name) as (_, kc):
            return [run_cell(kc, code)[0]["content"]["execution_count"] for code in ("1", failing, "2")]

    stock = counts("python3", "1/0")
    ours = counts("cancelkernel", "%%budget wall=-1\n1")
    assert ours == stock == [1, 2, 3], (ours, stock)


def test_an_idle_kernel_does_not_wake_up(kernel) -> None:
    """No thread of an idle kernel (after cells and interrupts) runs a polling loop."""
    km, kc = kernel
    run_interrupted(kc, "import time\ntime.sleep(30)", at="time.sleep(30)")
    pid = kernel_pid(km)
    assert cancel_status(kc)["executions"] == []  # idle, by its own account

    def switches() -> dict[str, int]:
        found = {}
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                fields = dict(line.split(":\t", 1) for line in f.read().splitlines() if ":\t" in line)
            found[tid] = int(fields["voluntary_ctxt_switches"]) + int(fields["nonvoluntary_ctxt_switches"])
        return found

    before = switches()
    time.sleep(3.0)
    after = switches()
    woken = {tid: after[tid] - before.get(tid, 0) for tid in after}
    assert max(woken.values()) < 60, woken  # a 10 ms poll would be 300


def test_the_kernelspec_says_what_stocks_says_through_jupyter_server() -> None:
    from cancelkernel.testing.servers import jupyter_server

    with jupyter_server() as server:
        status, specs = server.request("GET", "/api/kernelspecs")
        assert status == 200
        stock, ours = specs["kernelspecs"]["python3"]["spec"], specs["kernelspecs"]["cancelkernel"]["spec"]
        assert ours["kernel_protocol_version"] == stock["kernel_protocol_version"] == protocol.KERNEL_PROTOCOL_VERSION
        assert set(stock["metadata"]) <= set(ours["metadata"]), (stock["metadata"], ours["metadata"])


def test_a_notebook_run_by_nbclient_and_exported_to_html_reads_well(tmp_path) -> None:
    import nbformat
    from nbclient import NotebookClient
    from nbconvert import HTMLExporter

    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("%%budget wall=0.5\nimport time\ntime.sleep(30) if 1 < 2 else None"),
        nbformat.v4.new_code_cell("x = 1"),
    ]
    NotebookClient(nb, kernel_name="cancelkernel", allow_errors=True, timeout=60).execute()
    saved = json.dumps(nb)
    assert "vnd.cancelkernel.event" not in saved  # the machine event is never saved into the notebook
    kinds = [o["output_type"] for o in nb.cells[0].outputs]
    assert kinds == ["display_data", "error"], kinds
    assert [c.execution_count for c in nb.cells] == [1, 2]
    page, _ = HTMLExporter().from_notebook_node(nb)
    assert "cancelkernel: the cell ran past its wall budget of 0.5 s" in page
    assert "1 &lt; 2" in page
    assert "No renderer" not in page
