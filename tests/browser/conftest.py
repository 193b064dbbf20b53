"""Fixtures of the browser tests: a real JupyterLab on loopback, driven by Playwright with Debian's chromium.

- `chromium`: the browser binary. Playwright's own browser download is not
  used (it is not reachable from every machine); without chromium the tests
  fail with what to install, or skip when CANCELKERNEL_SKIP_BROWSER=1.
- `lab`: `jupyter server` with JupyterLab (a random port and token, its own
  settings, workspaces and kernelspecs: "cancelkernel" and
  "cancelkernel-worker" under their own display names), stopped with its
  kernels after the session.
- `notebook`: a new browser context on a fresh workspace, a notebook opened
  from the launcher's card, our kernel idle; its sessions deleted after.
- A failing test leaves a screenshot and the server log's tail in the
  artifacts directory ($CANCELKERNEL_ARTIFACTS, else tests/browser/artifacts/);
  the failure report names the files.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import typing as t
from collections.abc import Iterator

import pytest
from lab_page import Notebook, lab_server

from cancelkernel.kernelspec import DEFAULT_DISPLAY_NAME
from cancelkernel.testing.servers import Server

SKIP_VARIABLE = "CANCELKERNEL_SKIP_BROWSER"
ARTIFACTS_VARIABLE = "CANCELKERNEL_ARTIFACTS"
HERE = os.path.dirname(os.path.abspath(__file__))


def _not_available(what: str) -> t.NoReturn:
    if os.environ.get(SKIP_VARIABLE) == "1":
        pytest.skip(f"{what} ({SKIP_VARIABLE}=1)")
    pytest.fail(f"{what}; or set {SKIP_VARIABLE}=1 to skip the browser tests", pytrace=False)


@pytest.fixture(scope="session")
def chromium() -> str:
    path = shutil.which("chromium")
    if path is None:
        _not_available(
            "the browser tests need Debian's chromium: `apt-get install chromium` (as root; .ci/run does it)"
        )
    try:
        import jupyterlab  # noqa: F401
        import playwright.sync_api  # noqa: F401
    except ImportError as exc:
        _not_available(f"the browser tests need {exc.name}: pip install '.[browser]' (the test extra includes it)")
    return path


@pytest.fixture(scope="session")
def browser(chromium: str) -> Iterator[t.Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        # --no-sandbox: CI runs as root, where chromium refuses its sandbox.
        launched = playwright.chromium.launch(executable_path=chromium, headless=True, args=["--no-sandbox"])
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture(scope="session")
def artifacts() -> str:
    directory = os.environ.get(ARTIFACTS_VARIABLE) or os.path.join(HERE, "artifacts")
    os.makedirs(directory, exist_ok=True)
    return directory


@pytest.fixture(scope="session")
def lab(kernelspecs: str, chromium: str) -> Iterator[Server]:
    # `kernelspecs` (the session's) is set up first and torn down last, so JUPYTER_PATH is restored in order.
    with lab_server() as server:
        yield server


@pytest.fixture
def notebook(browser: t.Any, lab: Server, artifacts: str, request: pytest.FixtureRequest) -> Iterator[Notebook]:
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    # A test may ask for another launcher card: @pytest.mark.parametrize("notebook", [display name], indirect=True).
    opened = Notebook(page, lab, getattr(request, "param", DEFAULT_DISPLAY_NAME))
    try:
        try:
            opened.open_from_launcher()
        except Exception as exc:
            saved = save_artifacts(request.node, page, lab, artifacts)
            raise AssertionError(f"could not open a notebook on our kernel from the launcher: {exc}\n{saved}") from exc
        yield opened
    finally:
        with contextlib.suppress(Exception):
            context.close()
        delete_sessions(lab)


def delete_sessions(server: Server) -> None:
    """Close every notebook session (and so its kernel) the test opened."""
    _status, sessions = server.request("GET", "/api/sessions")
    for session in sessions or []:
        server.request("DELETE", f"/api/sessions/{session['id']}", timeout=30)


def save_artifacts(node: pytest.Item, page: t.Any, server: Server, directory: str) -> str:
    """A screenshot of the page and the server log's tail; returns a line naming them."""
    stem = os.path.join(directory, re.sub(r"[^A-Za-z0-9_.-]+", "_", node.name))
    saved = []
    with contextlib.suppress(Exception):
        page.screenshot(path=stem + ".png", full_page=True)
        saved.append(stem + ".png")
    with contextlib.suppress(OSError), open(stem + ".server.log", "w") as f:
        f.write(server.log_tail(200))
        saved.append(stem + ".server.log")
    return f"browser test artifacts in {directory}: " + ", ".join(saved)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    funcargs = getattr(item, "funcargs", {})
    if report.when == "call" and report.failed and "notebook" in funcargs:
        saved = save_artifacts(item, funcargs["notebook"].page, funcargs["lab"], funcargs["artifacts"])
        report.sections.append(("browser artifacts", saved))
