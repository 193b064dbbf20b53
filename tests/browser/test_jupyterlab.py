"""JupyterLab driving our kernel, as a person does it: the launcher, cells,
the toolbar's interrupt and restart, widgets.

Each test opens a notebook from the launcher's "Python 3 (cancelkernel)"
card in a fresh workspace (fixture `notebook`), types cells with
`keyboard.insert_text`, runs them with Shift+Enter and reads what the page
shows.  The interrupt is the toolbar's button: JupyterLab's real path (REST
`POST /api/kernels/{id}/interrupt`, no target; our kernelspec says signal).
"""

from __future__ import annotations

import os
import re
import signal
import time

import pytest
from lab_page import KERNEL_TIMEOUT, STOP_TIMEOUT, WORKER_DISPLAY_NAME, Cell, Marker, Notebook, ms, wait_text
from playwright.sync_api import expect

from cancelkernel import protocol
from cancelkernel.kernelspec import DEFAULT_DISPLAY_NAME
from cancelkernel.testing import FileFlag, act_when, control_request, wait_running
from cancelkernel.testing.servers import Server

# (what, the runaway's code, its line where the kernel's status shows it running): every one is stopped
# by the toolbar's interrupt in main mode (README's table).
RUNAWAYS = [
    ("Python loop", "while True:\n    pass", "while True:"),
    ("time.sleep", "import time\ntime.sleep(10**6)", "time.sleep(10**6)"),
    ("regex", "import re\npat = re.compile(r'(a+)+$'); s = 'a' * 40 + 'b'\npat.match(s)", "pat.match(s)"),
    ("GIL-held cooperative Cython loop", "montecarlo.pi_gil(10**15)", "montecarlo.pi_gil(10**15)"),
]
# How long another client polls cancel_status while the status bar must stay busy.
POLL_FOR = 4.0
POLL_EVERY = 0.2


def expect_interrupted(cell: Cell) -> None:
    cell.wait_done(STOP_TIMEOUT)
    cell.expect_output("KeyboardInterrupt", timeout=STOP_TIMEOUT)


def test_the_launcher_entry_starts_our_kernel(notebook: Notebook, lab: Server) -> None:
    # The fixture clicked the card and waited for "Python 3 (cancelkernel) | Idle"; the kernel answers and keeps state.
    _status, sessions = lab.request("GET", "/api/sessions")
    assert [s["kernel"]["name"] for s in sessions] == ["cancelkernel"], sessions
    notebook.run_done("x = 42")
    notebook.expect_prints("print(x)", "42")
    notebook.expect_prints("print(type(get_ipython().kernel).__module__.split('.')[0])", "cancelkernel")


@pytest.mark.parametrize(("what", "code", "at"), RUNAWAYS, ids=[what for what, _, _ in RUNAWAYS])
def test_the_interrupt_button_stops_a_runaway_and_keeps_x(
    notebook: Notebook, lab: Server, what: str, code: str, at: str, example_dir: str
) -> None:
    notebook.run_done(f"import sys; sys.path.insert(0, {example_dir!r})\nimport montecarlo\nx = 42")
    # Connected before the cell: a client's first kernel_info goes to the shell, which the cell keeps busy.
    kc = lab.client(notebook.kernel_id())
    try:
        marker = Marker()
        cell = notebook.run(marker.then(code))
        marker.wait()
        cell.wait_running()
        # In its runaway line, by the kernel's own status (the regex and the Cython loop hold the GIL, yet it answers).
        running = control_request(kc, "cancel_status_request")["content"]["execution"]
        wait_running(kc, running["msg_id"], at=at)
        notebook.interrupt()
        expect_interrupted(cell)
    finally:
        kc.stop_channels()
    notebook.wait_status("Idle")
    notebook.expect_prints("print(x)", "42")


def test_a_budget_trip_is_a_visible_readable_line(notebook: Notebook) -> None:
    notebook.run_done("x = 42")
    cell = notebook.run("%%budget wall=1\nwhile True:\n    pass")
    cell.wait_done(STOP_TIMEOUT)
    # Wording may change: the trip is its own output (not the error), names the wall budget in words,
    # not as JSON, and is on screen.
    line = cell.expect_output(re.compile("wall budget", re.IGNORECASE), errors=False)
    text = line.inner_text().strip()
    assert '"event"' not in text, f"the trip is shown as raw JSON: {text!r}"
    assert not text.startswith("{"), f"the trip is shown as raw JSON: {text!r}"
    box = line.bounding_box()
    assert box is not None, f"the trip line is not laid out as readable text: {box}"
    assert box["width"] > 50, f"the trip line is not laid out as readable text: {box}"
    assert box["height"] >= 10, f"the trip line is not laid out as readable text: {box}"
    cell.expect_output("KeyboardInterrupt")
    notebook.expect_prints("print(x)", "42")


def test_the_status_bar_stays_busy_while_another_client_polls_cancel_status(notebook: Notebook, lab: Server) -> None:
    # Stock ipykernel publishes busy/idle around every control request, and JupyterLab shows the last one:
    # Idle while the cell runs. Ours publishes none for cancel_status, so a poller leaves the page saying Busy.
    notebook.run_done("x = 42")
    # Connected before the cell: a client's first kernel_info goes to the shell, which the cell keeps busy.
    kc = lab.client(notebook.kernel_id())
    try:
        marker, gate = Marker(), FileFlag("go")  # the cell runs until the test has polled
        cell = notebook.run(marker.then(gate.wait_code))
        marker.wait()
        notebook.wait_status("Busy")
        notebook.record_status()
        polls = 0
        end = time.monotonic() + POLL_FOR
        while time.monotonic() < end:
            status = control_request(kc, "cancel_status_request", timeout=10)["content"]
            assert status.get("execution"), f"cancel_status saw no running cell: {status}"
            polls += 1
            time.sleep(POLL_EVERY)
        seen = notebook.recorded_status()
        assert polls >= POLL_FOR / POLL_EVERY / 4, f"only {polls} cancel_status replies in {POLL_FOR:g} s"
        assert cell.is_running(), "the cell ended before the polling did"
        assert all(text.endswith("| Busy") for text in seen), (
            f"the status bar left Busy while another client polled ({polls} polls): {seen}"
        )
        gate.set()
        cell.wait_done()
        notebook.wait_status("Idle")
        notebook.expect_prints("print(x)", "42")
    finally:
        kc.stop_channels()


WIDGETS = """\
import ipywidgets as widgets
slider = widgets.IntSlider(value=0, min=0, max=100, description='level')
seen = widgets.Label('seen nothing')
def on_value(change):
    seen.value = f"seen {change['new']}"
slider.observe(on_value, names='value')
widgets.VBox([slider, seen])"""


@pytest.mark.parametrize("notebook", [DEFAULT_DISPLAY_NAME, WORKER_DISPLAY_NAME], indirect=True, ids=["main", "worker"])
def test_a_slider_observer_during_a_long_cell_then_the_interrupt(notebook: Notebook) -> None:
    """JupyterLab sends the slider's messages on a subshell: the observer runs while the cell runs, in both modes.

    Two kernel rules make it so (kernel/kernel/comms.py): the frontend's
    subshell is honoured (ipykernel 7.4 alone routes the message back to the
    busy parent shell), and a comm message handled beside a running cell gets
    its busy/idle (without it ipywidgets never syncs the widget again).
    """
    notebook.run_done("x = 42")
    shown = notebook.run_done(WIDGETS)
    track = shown.element.locator(".widget-slider .noUi-target")
    readout = shown.element.locator(".widget-slider .widget-readout")
    label = shown.element.locator(".widget-label").filter(has_text="seen")
    wait_text(label, "seen nothing", "the widgets did not render")
    marker = Marker()
    cell = notebook.run(marker.then("while True:\n    pass"))
    marker.wait()
    cell.wait_running()

    handle = shown.element.locator(".widget-slider .noUi-handle")

    def move_to(fraction: float) -> str:
        # Dragged by its handle as a person does (a second click on the track is not taken by the
        # slider, stock or ours).
        before = readout.inner_text()
        box, grip = track.bounding_box(), handle.bounding_box()
        assert box is not None, "the slider is not on screen"
        assert grip is not None, "the slider is not on screen"
        mouse = notebook.page.mouse
        mouse.move(grip["x"] + grip["width"] / 2, grip["y"] + grip["height"] / 2)
        mouse.down()
        mouse.move(box["x"] + box["width"] * fraction, box["y"] + box["height"] / 2, steps=5)
        mouse.up()
        wait_text(
            readout, re.compile(r"^(?!" + re.escape(before) + r"$)\d+$"), "dragging the slider's handle did not move it"
        )
        return f"seen {readout.inner_text()}"

    notebook.watch_comms()
    notebook.record_status()
    wait_text(label, move_to(0.75), "the slider's observer did not run while the cell ran")
    # A second move while the cell still runs: ipywidgets sends it only once the first message's idle came.
    wait_text(label, move_to(0.5), "the second move during the cell never reached the kernel")
    assert cell.is_running(), "the long cell stopped before the observers ran"
    # Each widget message's own idle shows for a moment (ipywidgets needs it); the kernel then says busy again for the
    # cell. Once every message the slider sent had its idle, the kernel's last word is that busy, and the bar shows it.
    statuses = notebook.wait_comms_done_then("busy for execute_request")
    assert "idle for comm_msg" in statuses, f"the widget messages had no idle of their own: {statuses}"
    notebook.wait_status("Busy")
    seen = notebook.recorded_status()
    assert seen[-1].endswith("| Busy"), (
        f"the status bar does not say Busy after the widgets' messages while the cell runs: {seen}"
    )
    notebook.interrupt()
    expect_interrupted(cell)
    notebook.expect_prints("print(x)", "42")
    # Widgets still answer after the interrupt.
    wait_text(label, move_to(0.25), "the slider's observer did not run after the interrupt")


def test_restart_stops_a_runaway_and_gives_a_fresh_kernel(notebook: Notebook) -> None:
    notebook.run_done("x = 42")
    cell = notebook.run("while True:\n    pass")
    cell.wait_running()
    notebook.wait_status("Busy")
    notebook.restart()
    cell.wait_not_running()
    notebook.wait_status("Idle")
    notebook.expect_prints("print('x' in globals())", "False")
    notebook.expect_prints("x = 6 * 7\nprint(x)", "42")


def test_a_kernel_killed_in_a_cell_is_named_in_the_next_one(notebook: Notebook, lab: Server) -> None:
    """The kernel dies while a cell runs (SIGKILL from outside, as the OOM killer sends it); the server restarts it;
    the first cell says so."""
    pid = int(notebook.run_done("import os\nprint(os.getpid())").output_text().strip())
    kc = lab.client(notebook.kernel_id())
    try:
        record = control_request(kc, "kernel_info_request")["content"][protocol.KEY]["running_record"]
        cell = notebook.run("import time\ntime.sleep(10**6)")
        # Killed once the running cell's record is on disk (written after the cell has run a moment).
        killed = act_when(lambda: os.path.exists(record), lambda: os.kill(pid, signal.SIGKILL), timeout=KERNEL_TIMEOUT)
        assert killed.wait(KERNEL_TIMEOUT), f"no running-cell record at {record}"
    finally:
        kc.stop_channels()
    # JupyterLab's "the kernel appears to have died; it will restart automatically", then a fresh kernel.
    dialog = notebook.page.locator(".jp-Dialog")
    expect(dialog, "JupyterLab did not say the kernel died").to_be_visible(timeout=ms(KERNEL_TIMEOUT))
    dialog.locator(".jp-Dialog-button.jp-mod-accept").click()
    cell.wait_not_running()
    notebook.wait_status("Idle")
    first = notebook.run_done("y = 1")
    first.expect_output(f"the previous kernel (pid {pid}) died, cause unknown")
    first.expect_output("while running Cell In[")
    notebook.expect_prints("print('x' in globals(), y)", "False 1")
