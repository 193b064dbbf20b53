"""The JupyterLab extension (labextension/) at work, as a person uses it:
the line on a running cell, its buttons, restart and restore.

The line (`.ck-CellStatus`) shows on a cell of our kernel while it is queued or
runs: its state, the elapsed time, the budgets counting down, Stop this cell,
Where is it?, and Restart and restore when the cell will not stop.
"""

from __future__ import annotations

import os
import re
import time

import pytest
from lab_page import KERNEL_TIMEOUT, STOP_TIMEOUT, Cell, Marker, Notebook, ms
from playwright.sync_api import expect

from cancelkernel.testing import FileFlag

# CANCELKERNEL_SCREENSHOTS=docs/images: the README's pictures of the extension, taken by the tests that show it.
SCREENSHOTS = os.environ.get("CANCELKERNEL_SCREENSHOTS")


def picture(notebook: Notebook, name: str) -> None:
    box = notebook.page.locator(".jp-NotebookPanel").first.bounding_box()
    if SCREENSHOTS and box:
        clip = {"x": box["x"], "y": box["y"], "width": box["width"], "height": min(box["height"], 300)}
        notebook.page.screenshot(path=os.path.join(SCREENSHOTS, name), clip=clip)


def status_line(cell: Cell):
    return cell.element.locator(".ck-CellStatus")


def seconds_left(text: str) -> int:
    found = re.search(r"wall budget: (?:(\d+) min )?(\d+) s left", text)
    assert found, f"no wall countdown in {text!r}"
    return int(found.group(1) or 0) * 60 + int(found.group(2))


def test_the_extension_is_loaded_and_counts_a_budget_down(notebook: Notebook) -> None:
    cell = notebook.run("%%budget wall=20\nwhile True:\n    pass")
    line = status_line(cell)
    expect(line, "no status line on a running cell of our kernel").to_have_attribute(
        "data-phase", "running", timeout=ms(KERNEL_TIMEOUT)
    )
    budgets = line.locator(".ck-CellStatus-budgets")
    expect(budgets).to_contain_text("wall budget:", timeout=ms(KERNEL_TIMEOUT))
    first = seconds_left(budgets.inner_text())
    # Going down: wait until the page shows less than it did (the clock ticks once a second).
    expect(budgets).not_to_contain_text(f"wall budget: {first} s left", timeout=ms(KERNEL_TIMEOUT))
    assert seconds_left(budgets.inner_text()) < first
    assert "wall budget" in (line.get_attribute("aria-label") or ""), line.get_attribute("aria-label")
    expect(
        notebook.page.locator("#jp-main-statusbar .ck-RunningStatus"), "no status bar item for the running cell"
    ).to_contain_text("cancelkernel: running")
    picture(notebook, "lab-countdown.png")
    line.get_by_role("button", name="Stop this cell").click()
    cell.wait_done(STOP_TIMEOUT)
    cell.expect_output("KeyboardInterrupt")
    expect(line, "the status line stayed after the cell ended").to_have_count(0, timeout=ms(KERNEL_TIMEOUT))


def test_stop_this_cell_cancels_a_queued_cell_and_leaves_the_running_one(notebook: Notebook) -> None:
    marker, gate = Marker(), FileFlag("go")
    running = notebook.run(marker.then(gate.wait_code + "\nprint('first done')"))
    marker.wait()
    queued = notebook.run("print('the queued cell ran')")
    line = status_line(queued)
    expect(line).to_have_attribute("data-phase", "queued", timeout=ms(KERNEL_TIMEOUT))
    line.get_by_role("button", name="Stop this cell").click()
    # The kernel has taken the stop (its interrupt_reply says pending) before the running cell may end.
    expect(line, "the queued cell's stop was not taken").to_have_attribute(
        "data-phase", "cancelled", timeout=ms(KERNEL_TIMEOUT)
    )
    gate.set()
    running.wait_done(KERNEL_TIMEOUT)
    running.expect_output("first done")
    queued.wait_done(KERNEL_TIMEOUT)
    queued.expect_output("KeyboardInterrupt")
    assert "the queued cell ran" not in queued.output_text()


def test_where_is_it_shows_the_live_stack_and_jumps_to_the_line(notebook: Notebook) -> None:
    notebook.run_done("def spin():\n    while True:\n        pass")
    cell = notebook.run("x = 1\nspin()")
    line = status_line(cell)
    expect(line).to_have_attribute("data-phase", "running", timeout=ms(KERNEL_TIMEOUT))
    line.get_by_role("button", name="Where is it?").click()
    frames = line.locator(".ck-CellStatus-frame")
    expect(frames.first, "no stack under the line").to_be_visible(timeout=ms(KERNEL_TIMEOUT))
    texts = frames.all_inner_texts()
    # The running cell's own frame first (line 2, spin()), then spin's own frame in the cell that defined it.
    assert re.match(r"Cell In\[\d+\], line 2 in <module>: spin\(\)", texts[0]), texts
    assert any(re.match(r"Cell In\[\d+\], line [23] in spin: (while True:|pass)", t) for t in texts), texts
    defining = notebook.cells.nth(0)
    frames.filter(has_text="in spin").first.click()
    expect(defining, "clicking spin's frame did not select the cell that defines it").to_have_class(
        re.compile(r"jp-mod-active")
    )
    line.get_by_role("button", name="Stop this cell").click()
    cell.wait_done(STOP_TIMEOUT)


def test_a_gil_held_call_is_shown_as_not_answering_with_its_stack(notebook: Notebook) -> None:
    notebook.run_done("x = 42")
    cell = notebook.run("%%budget wall=60\ntotal = sum(range(10**13))")
    line = status_line(cell)
    # Control cannot answer while one C call holds the GIL: the page says so after the kernel's grace period.
    expect(line, "a GIL-held call was not shown as not answering").to_have_attribute(
        "data-phase", "not-answering", timeout=ms(KERNEL_TIMEOUT)
    )
    expect(line.locator(".ck-CellStatus-phase")).to_have_text("the kernel does not answer")
    # The budget counts down though no status may ever have answered (the kernel's `started` event),
    # and shows no output.
    expect(line.locator(".ck-CellStatus-budgets")).to_contain_text("wall budget:")
    expect(cell.outputs, "the started event showed something in the cell").to_have_count(0)
    line.get_by_role("button", name="Where is it?").click()
    frame = line.locator(".ck-CellStatus-frame").filter(has_text="sum(range(10**13))")
    expect(frame, "the server extension's stack did not show the cell's line").to_be_visible(timeout=ms(KERNEL_TIMEOUT))
    assert re.match(r"Cell In\[\d+\], line 2", frame.inner_text()), frame.inner_text()
    picture(notebook, "lab-not-answering.png")
    expect(line.get_by_role("button", name="Restart and restore")).to_be_visible()
    notebook.restart()
    cell.wait_not_running()


def test_restart_and_restore_from_the_kernel_menu_brings_x_back(notebook: Notebook) -> None:
    notebook.run_done("x = 42\n%checkpoint save")
    notebook.run_done("later = 'after the checkpoint'")
    page = notebook.page
    page.get_by_role("menuitem", name="Kernel", exact=True).click()
    page.get_by_role("menuitem", name=re.compile("Restart Kernel and Restore Checkpoint")).click()
    dialog = page.locator(".jp-Dialog")
    expect(dialog, "no confirmation before restart and restore").to_be_visible(timeout=ms(KERNEL_TIMEOUT))
    dialog.locator(".jp-Dialog-button.jp-mod-accept").click()
    expect(page.locator(".Toastify"), "no word of what came back").to_contain_text(
        "restored: x", timeout=ms(KERNEL_TIMEOUT)
    )
    notebook.wait_status("Idle")
    notebook.expect_prints("print(x, 'later' in globals())", "42 False")  # a new kernel, with the checkpoint's state


@pytest.mark.parametrize("notebook", ["Python 3 (ipykernel)"], indirect=True, ids=["stock"])
def test_a_stock_notebook_is_left_as_it_is(notebook: Notebook) -> None:
    marker, gate = Marker(), FileFlag("go")
    cell = notebook.run(marker.then(gate.wait_code))
    marker.wait()
    cell.wait_running()
    # Our line would be on the cell from the moment its request was sent; with a stock kernel there is none.
    assert status_line(cell).count() == 0
    assert notebook.page.locator(".ck-CellStatus, .ck-RunningStatus:not([hidden])").count() == 0
    gate.set()
    cell.wait_done()


def wait_connected(lab, path: str) -> None:
    """Until the notebook's kernel is idle with a websocket connection (the page's) open,
    by the server's own account."""
    deadline = time.monotonic() + KERNEL_TIMEOUT
    while True:
        sessions = lab.request("GET", "/api/sessions")[1] or []
        ids = [session["kernel"]["id"] for session in sessions if session["path"] == path]
        kernel = lab.request("GET", f"/api/kernels/{ids[0]}")[1] if ids else None
        if kernel and kernel.get("connections", 0) >= 1 and kernel.get("execution_state") == "idle":
            return
        assert time.monotonic() < deadline, f"the page never connected to the kernel of {path}: {kernel}"
        time.sleep(0.1)


def test_notebook_7_shows_the_line_and_stops_the_cell(browser, lab) -> None:
    """Notebook 7 (/notebooks, no status bar): the same extension, from the same install."""
    kernelspec = {"name": "cancelkernel", "display_name": "Python 3 (cancelkernel)", "language": "python"}
    content = {"cells": [], "metadata": {"kernelspec": kernelspec}, "nbformat": 4, "nbformat_minor": 5}
    status, _ = lab.request(
        "PUT", "/api/contents/nb7.ipynb", {"type": "notebook", "format": "json", "content": content}
    )
    assert status in (200, 201), status
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    try:
        page = context.new_page()
        page.goto(f"{lab.url}/notebooks/nb7.ipynb?token={lab.token}", timeout=ms(KERNEL_TIMEOUT))
        expect(page.locator("#jp-main-statusbar"), "Notebook 7 has no status bar").to_have_count(0)
        editor = page.locator(".jp-Notebook .jp-Cell .cm-content").first
        expect(editor).to_be_visible(timeout=ms(KERNEL_TIMEOUT))
        # Notebook 7 runs nothing on Shift+Enter before the page's kernel connection is up
        # (its indicator says idle sooner).
        wait_connected(lab, "nb7.ipynb")
        editor.click()
        page.keyboard.insert_text("%%budget wall=30\nwhile True:\n    pass")
        page.keyboard.press("Shift+Enter")
        cell = Cell(page.locator(".jp-Notebook .jp-Cell").first)
        line = status_line(cell)
        expect(line, "no status line in Notebook 7").to_have_attribute(
            "data-phase", "running", timeout=ms(KERNEL_TIMEOUT)
        )
        expect(line.locator(".ck-CellStatus-budgets")).to_contain_text("wall budget:")
        line.get_by_role("button", name="Stop this cell").click()
        cell.wait_done(STOP_TIMEOUT)
        cell.expect_output("KeyboardInterrupt")
    finally:
        context.close()
        lab.request("DELETE", "/api/contents/nb7.ipynb")
        for session in lab.request("GET", "/api/sessions")[1] or []:
            lab.request("DELETE", f"/api/sessions/{session['id']}", timeout=30)


def test_a_checkpoint_is_saved_before_a_risky_cell_when_the_setting_says_so(notebook: Notebook, lab) -> None:
    """checkpointMode before-risky: a cell not yet seen to complete quickly gets a checkpoint before it."""
    settings = "/lab/api/settings/cancelkernel-jupyterlab:plugin"
    status, _ = lab.request("PUT", settings, {"raw": '{"checkpointMode": "before-risky"}'})
    assert status in (200, 204), status
    try:
        notebook.page.reload()  # the page reads its settings when it loads
        notebook.wait_status("Idle")
        notebook.run_done("x = 42")  # never ran before: risky, so a checkpoint "before" is saved first
        listed = notebook.run_done("%checkpoint list")
        listed.expect_output("before")
    finally:
        lab.request("PUT", settings, {"raw": "{}"})
