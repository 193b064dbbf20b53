"""What a person does in JupyterLab, as Playwright calls: open a notebook from the launcher, run cells, read outputs,
press toolbar buttons.

Every wait is on DOM state (the status bar's text, a cell's prompt, an
output), never a sleep; the timeouts are generous and only stop a broken
setup from hanging the run.  Selectors were read from JupyterLab 4's DOM:
the toolbar buttons by their `data-command`, the kernel's status bar item by
the kernel's display name.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import tempfile
import urllib.parse
import uuid
from collections.abc import Iterator

# Without playwright, the `chromium` fixture fails (or skips) each test with what to install.
with contextlib.suppress(ImportError):
    from playwright.sync_api import Locator, Page, expect
    from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

from cancelkernel.kernelspec import DEFAULT_DISPLAY_NAME
from cancelkernel.testing import FileFlag, private_kernelspecs
from cancelkernel.testing.servers import Server, jupyter_server

# Generous bounds on waits for the page (JupyterLab's first load on a busy 2-core machine) and for a kernel.
LOAD_TIMEOUT = 90.0
KERNEL_TIMEOUT = 60.0
# How long an interrupted cell may take to show its reply: our kernel stops these cases in milliseconds.
STOP_TIMEOUT = 20.0
_STATUS_SEPARATOR = " | "
# How JupyterLab marks an error (traceback) output.
_ERROR_MIME = "application/vnd.jupyter.stderr"
# What `cancelkernel install --exec-thread worker` calls its spec (the lab's worker-mode launcher card).
WORKER_DISPLAY_NAME = "Python 3 (cancelkernel, worker thread)"

# JupyterLab settings for the tests: no news toast over the notebook, and widget comms on subshells
# (JupyterLab's default, written out because the widget test is about it).
LAB_SETTINGS = {
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false", "checkForUpdates": False},
    "@jupyterlab/apputils-extension/kernels-settings.jupyterlab-settings": {"commsOverSubshells": "perCommTarget"},
}


@contextlib.contextmanager
def lab_server() -> Iterator[Server]:
    """`jupyter server` with JupyterLab: its own settings and workspaces,
    and kernelspecs "cancelkernel" and "cancelkernel-worker"."""
    lab_dirs = tempfile.mkdtemp(prefix="cancelkernel-lab-")
    try:
        settings = os.path.join(lab_dirs, "settings")
        for name, values in LAB_SETTINGS.items():
            os.makedirs(os.path.dirname(os.path.join(settings, name)), exist_ok=True)
            with open(os.path.join(settings, name), "w") as f:
                json.dump(values, f)
        worker = {"exec_thread": "worker", "display_name": WORKER_DISPLAY_NAME}
        with private_kernelspecs(cancelkernel={}, **{"cancelkernel-worker": worker}) as prefix:
            env = {
                "JUPYTER_PATH": os.path.join(prefix, "share", "jupyter"),
                "JUPYTERLAB_SETTINGS_DIR": settings,
                "JUPYTERLAB_WORKSPACES_DIR": os.path.join(lab_dirs, "workspaces"),
            }
            # window.jupyterapp: the tests read the kernel connection's own messages (Notebook.watch_comms).
            with jupyter_server(env=env, argv=["--LabApp.expose_app_in_browser=True"]) as server:
                yield server
    finally:
        shutil.rmtree(lab_dirs, ignore_errors=True)


def ms(seconds: float) -> float:
    return seconds * 1000.0


def wait_text(locator: Locator, text: str | re.Pattern[str], what: str, timeout: float = KERNEL_TIMEOUT) -> None:
    """Until `locator` shows `text` (the whole text; a pattern may match part);
    AssertionError `what` after `timeout`."""
    expect(locator, what).to_have_text(text, timeout=ms(timeout))


class Cell:
    """One code cell of the notebook on the page."""

    def __init__(self, locator: Locator):
        self.element = locator
        self.prompt = locator.locator(".jp-InputPrompt")
        self.outputs = locator.locator(".jp-OutputArea-output")

    def wait_running(self, timeout: float = KERNEL_TIMEOUT) -> None:
        expect(self.prompt, "the cell never showed [*] (running)").to_have_text("[*]:", timeout=ms(timeout))

    def wait_done(self, timeout: float = KERNEL_TIMEOUT) -> None:
        """Until the prompt shows an execution count: the kernel replied and went idle for this cell."""
        expect(self.prompt, "the cell did not finish").to_have_text(re.compile(r"^\[\d+\]:$"), timeout=ms(timeout))

    def wait_not_running(self, timeout: float = KERNEL_TIMEOUT) -> None:
        expect(self.prompt, "the cell still shows [*] (running)").not_to_have_text("[*]:", timeout=ms(timeout))

    def is_running(self) -> bool:
        return self.prompt.inner_text().strip() == "[*]:"

    def output_text(self) -> str:
        return "\n".join(text.strip() for text in self.outputs.all_inner_texts())

    def output_with(self, text: str | re.Pattern[str], *, errors: bool = True) -> Locator:
        """The outputs of this cell (rendered text, widget, error unless `errors=False`) whose visible
        text contains `text`."""
        outputs = (
            self.outputs
            if errors
            else self.element.locator(f".jp-OutputArea-output:not([data-mime-type='{_ERROR_MIME}'])")
        )
        return outputs.filter(has_text=text)

    def expect_output(
        self, text: str | re.Pattern[str], timeout: float = KERNEL_TIMEOUT, *, errors: bool = True
    ) -> Locator:
        """The first output showing `text`, once it is visible."""
        found = self.output_with(text, errors=errors).first
        expect(found, f"no visible output with {text!r} in the cell").to_be_visible(timeout=ms(timeout))
        return found


class Notebook:
    """A notebook opened from JupyterLab's launcher, on our kernel."""

    def __init__(self, page: Page, server: Server, display_name: str = DEFAULT_DISPLAY_NAME):
        self.page = page
        self.server = server
        self.display_name = display_name
        self.cells = page.locator(".jp-NotebookPanel .jp-Notebook .jp-Cell")
        # The kernel's status bar item: "<display name> | Idle"
        # (the toolbar circle says idle before the kernel started).
        self.status = page.locator("#jp-main-statusbar .jp-StatusBar-TextItem").filter(
            has_text=display_name + _STATUS_SEPARATOR
        )

    def open_from_launcher(self) -> None:
        # A fresh workspace: nothing of another test's layout is restored.
        url = f"{self.server.url}/lab/workspaces/ck-{uuid.uuid4().hex[:12]}?token={self.server.token}"
        self.page.goto(url, timeout=ms(LOAD_TIMEOUT))
        card = self.launcher_card()
        expect(card, f"no launcher card {self.display_name!r} under Notebook").to_be_visible(timeout=ms(LOAD_TIMEOUT))
        card.click()
        self.wait_status("Idle", timeout=KERNEL_TIMEOUT)

    def kernel_id(self) -> str:
        """The id of this notebook's kernel, from the server's sessions (the page's URL ends in the notebook's path)."""
        path = urllib.parse.unquote(self.page.url.split("/tree/", 1)[-1].split("?", 1)[0])
        status, sessions = self.server.request("GET", "/api/sessions")
        ids = [session["kernel"]["id"] for session in sessions or [] if session["path"] == path]
        assert status == 200, f"no one session for {path!r}: {status} {sessions}"
        assert len(ids) == 1, f"no one session for {path!r}: {status} {sessions}"
        return str(ids[0])

    def launcher_card(self) -> Locator:
        return self.page.locator(f".jp-LauncherCard[data-category='Notebook'][title='{self.display_name}']")

    def status_text(self) -> str:
        return self.status.inner_text()

    def wait_status(self, state: str, timeout: float = KERNEL_TIMEOUT) -> None:
        expect(self.status, f"the status bar never said {state!r}").to_have_text(
            re.compile(re.escape(self.display_name + _STATUS_SEPARATOR + state) + "$"), timeout=ms(timeout)
        )

    def run(self, code: str) -> Cell:
        """Type `code` into the last (empty) cell and run it with Shift+Enter; the cell that runs it."""
        count = self.cells.count()
        cell = self.cells.nth(count - 1)
        editor = cell.locator(".cm-content")
        editor.click()
        # insert_text types no keys: no auto-indent, no closing brackets added by the editor.
        self.page.keyboard.insert_text(code)
        expect(editor).to_contain_text(code.splitlines()[0].strip())
        self.page.keyboard.press("Shift+Enter")
        expect(self.cells, "Shift+Enter did not run the cell and add the next one").to_have_count(count + 1)
        return Cell(cell)

    def run_done(self, code: str, timeout: float = KERNEL_TIMEOUT) -> Cell:
        cell = self.run(code)
        cell.wait_done(timeout)
        return cell

    def expect_prints(self, code: str, printed: str) -> None:
        """Run `code` (a print) and check its whole output is `printed`."""
        cell = self.run_done(code)
        expect(cell.outputs, f"{code!r} printed something else").to_have_text(printed)

    def toolbar_button(self, command: str) -> Locator:
        return self.page.locator(f".jp-NotebookPanel-toolbar jp-button[data-command='{command}']")

    def interrupt(self) -> None:
        """The toolbar's interrupt button (REST POST /api/kernels/{id}/interrupt, no target)."""
        self.toolbar_button("notebook:interrupt-kernel").click()

    def restart(self) -> None:
        """The toolbar's restart button, and "Restart" in the dialog it opens."""
        self.toolbar_button("notebook:restart-kernel").click()
        dialog = self.page.locator(".jp-Dialog")
        expect(dialog, "no restart dialog").to_be_visible(timeout=ms(KERNEL_TIMEOUT))
        dialog.locator(".jp-Dialog-button.jp-mod-accept").click()
        expect(dialog).to_be_hidden(timeout=ms(KERNEL_TIMEOUT))

    def record_status(self) -> None:
        """Record every text the kernel's status bar item shows from now on (read with `recorded_status`)."""
        self.page.evaluate(
            """(name) => {
                const seen = [];
                const read = () => {
                    const item = [...document.querySelectorAll('#jp-main-statusbar .jp-StatusBar-TextItem')]
                        .find(e => e.textContent.includes(name));
                    const text = item ? item.textContent : '(no status item)';
                    if (seen[seen.length - 1] !== text) seen.push(text);
                };
                read();
                const observer = new MutationObserver(read);
                observer.observe(
                    document.querySelector('#jp-main-statusbar'), {subtree: true, childList: true, characterData: true}
                );
                window.__ckStatus = {seen, stop: () => { read(); observer.disconnect(); }};
            }""",
            self.display_name + _STATUS_SEPARATOR,
        )

    def recorded_status(self) -> list[str]:
        """Every distinct text since `record_status`, in order (recording stops)."""
        return list(self.page.evaluate("() => { window.__ckStatus.stop(); return window.__ckStatus.seen; }"))

    def watch_comms(self) -> None:
        """From now on, note the comm messages this page sends its kernel and every status the kernel publishes."""
        self.page.evaluate(
            """() => {
                const kernel = window.jupyterapp.shell.currentWidget.sessionContext.session.kernel;
                const watch = {unanswered: new Set(), statuses: []};
                kernel.anyMessage.connect((_, {msg, direction}) => {
                    const type = msg.header.msg_type;
                    if (direction === 'send' && type === 'comm_msg') watch.unanswered.add(msg.header.msg_id);
                    if (direction === 'recv' && type === 'status') {
                        const parent = msg.parent_header || {};
                        watch.statuses.push(msg.content.execution_state + ' for ' + (parent.msg_type || 'nothing'));
                        if (msg.content.execution_state === 'idle') watch.unanswered.delete(parent.msg_id);
                    }
                });
                window.__ckComms = watch;
            }"""
        )

    def wait_comms_done_then(self, status: str, timeout: float = KERNEL_TIMEOUT) -> list[str]:
        """Until every comm message sent since `watch_comms` had its idle and the kernel's last status is `status`
        ("busy for execute_request", say): the statuses since (AssertionError with them after `timeout`)."""
        done = """(status) => {
            const watch = window.__ckComms;
            return watch.unanswered.size === 0 && watch.statuses[watch.statuses.length - 1] === status;
        }"""
        try:
            self.page.wait_for_function(done, arg=status, timeout=ms(timeout))
        except PlaywrightTimeoutError:
            seen = self.page.evaluate("() => [window.__ckComms.unanswered.size, window.__ckComms.statuses]")
            raise AssertionError(
                f"after the comm messages the kernel's last status is not {status!r}: "
                f"{seen[0]} comm message(s) without their idle; statuses {seen[1]}"
            ) from None
        return list(self.page.evaluate("() => window.__ckComms.statuses"))


class Marker(FileFlag):
    """A flag the cell sets as its first statement: the test knows the cell's code runs.

    A GIL-held loop starves the kernel's IOPub thread, so even a flushed print
    may not reach the page before it; a file on the shared disk does.
    """

    def __init__(self) -> None:
        super().__init__("started")

    def then(self, code: str) -> str:
        return f"{self.set_code}\n{code}"

    def wait(self, timeout: float = KERNEL_TIMEOUT) -> None:
        super().wait(timeout)
