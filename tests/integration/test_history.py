"""Every cell reaches IPython's sqlite history, in order, while cells run back to back and after the kernel exits.

The history is written outside the lock each cell takes to store its input
(upstream.HistoryWrittenInOrder); these tests hold ours to stock's behaviour:
no cell lost or reordered, none left unwritten when the kernel shuts down.
Stock ipykernel runs the same tests as the reference.
"""

from __future__ import annotations

import os
import sqlite3
import typing as t

import pytest

from cancelkernel.testing import Kernel, private_kernelspecs, wait_reply

CELLS = 200

KERNELS = {
    "main": ("cancelkernel", ["--CancelKernel.exec_thread=main"]),
    "worker": ("cancelkernel", ["--CancelKernel.exec_thread=worker"]),
    "stock": ("python3", []),
}


@pytest.fixture(params=sorted(KERNELS))
def history_kernel(request: pytest.FixtureRequest, tmp_path: t.Any) -> t.Iterator[tuple[Kernel, str]]:
    """A kernel with an IPython directory of its own; yields it and its history database's path."""
    name, args = KERNELS[request.param]
    ipython_dir = tmp_path / "ipython"
    with private_kernelspecs():
        kernel = Kernel(name, extra_arguments=args, env={"IPYTHONDIR": str(ipython_dir)})
        try:
            kernel.start()
            yield kernel, str(ipython_dir / "profile_default" / "history.sqlite")
        finally:
            kernel.shutdown()


def run_back_to_back(kernel: Kernel, codes: list[str]) -> None:
    """Send every cell at once (each queued behind the last) and wait for all the replies."""
    kc = kernel.kc
    assert kc is not None
    msg_ids = [kc.execute(code) for code in codes]
    for msg_id in msg_ids:
        assert wait_reply(kc, msg_id)["content"]["status"] == "ok"


def stored(database: str) -> tuple[list[str], object]:
    """The cells of the latest session in the database, by line number, and that session's end."""
    with sqlite3.connect(database) as db:
        session, end = db.execute("SELECT session, end FROM sessions ORDER BY session DESC LIMIT 1").fetchone()
        rows = db.execute("SELECT source_raw FROM history WHERE session = ? ORDER BY line", (session,)).fetchall()
    return [row[0] for row in rows], end


def test_cells_run_back_to_back_are_in_the_history_in_order(history_kernel: tuple[Kernel, str]) -> None:
    kernel, _ = history_kernel
    codes = [f"in_order_{i} = {i}" for i in range(CELLS)]
    run_back_to_back(kernel, codes)
    kc = kernel.kc
    assert kc is not None
    # A history request writes the cache out first: it sees every cell, in order.
    reply = wait_reply(kc, kc.history(hist_access_type="tail", n=CELLS, raw=True, output=False))
    assert [entry[2] for entry in reply["content"]["history"]] == codes
    assert [entry[1] for entry in reply["content"]["history"]] == list(range(1, CELLS + 1))


def test_every_cell_is_in_the_database_after_the_kernel_exits(history_kernel: tuple[Kernel, str]) -> None:
    kernel, database = history_kernel
    codes = [f"at_exit_{i} = {i}" for i in range(CELLS)]
    run_back_to_back(kernel, codes)
    assert kernel.km is not None
    kernel.km.shutdown_kernel(now=False)  # a shutdown_request: the kernel ends its history session itself
    assert os.path.exists(database)
    cells, end = stored(database)
    assert cells == codes
    assert end is not None  # the session was closed: the kernel wrote its last cells and ended it
