"""Jupyter protocol conformance jupyter_kernel_test against our kernel, both modes.

The kernelspecs "cancelkernel" (main mode) and "cancelkernel-worker" are
installed by conftest into a private JUPYTER_PATH.  The attributes follow
jupyter_kernel_test's own test of ipykernel.  Each kernel gets a private
IPYTHONDIR so that its history database is not shared (and locked) with other
kernels running on the machine.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import typing as t
import unittest

import jupyter_kernel_test as jkt
import pytest
from jupyter_client.manager import start_new_kernel

pytestmark = pytest.mark.slow


class _CancelKernelTests(jkt.KernelTests):
    language_name = "python"
    file_extension = ".py"

    code_hello_world = "print('hello, world')"
    code_stderr = "import sys; print('test', file=sys.stderr)"

    completion_samples: t.ClassVar[list] = [
        {"text": "zi", "matches": {"zip"}},
        {"text": "import itertoo", "matches": {"itertools"}},
    ]
    complete_code_samples: t.ClassVar[list] = ["1", "print('hello, world')", "def f(x):\n  return x*2\n\n"]
    incomplete_code_samples: t.ClassVar[list] = ["print('''hello", "def f(x):\n  x*2"]
    invalid_code_samples: t.ClassVar[list] = ["import = 7q"]

    code_page_something = "zip?"
    code_generate_error = "raise ValueError('conformance')"
    code_execute_result: t.ClassVar[list] = [
        {"code": "1+2+3", "result": "6"},
        {"code": "[n*n for n in range(1, 4)]", "result": "[1, 4, 9]"},
        {"code": "from IPython.display import HTML; HTML('<b>bold</b>')", "mime": "text/html", "result": "<b>bold</b>"},
    ]
    code_display_data: t.ClassVar[list] = [
        {"code": "from IPython.display import HTML, display; display(HTML('<b>test</b>'))", "mime": "text/html"},
        {"code": "from IPython.display import Math, display; display(Math('\\\\frac{1}{2}'))", "mime": "text/latex"},
    ]
    code_history_pattern = "1?2*"
    # As jupyter_kernel_test's own ipykernel test: IPython answers a "range" request
    # for the current session with session number 0, which the generic test rejects
    # (stock ipykernel does the same).
    supported_history_operations = ("tail", "search")
    code_inspect_sample = "zip"
    code_clear_output = "from IPython.display import clear_output; clear_output()"

    _ipython_dir: str
    exec_thread = ""

    def execute_helper(
        self,
        code: str,
        timeout: int = jkt.TIMEOUT,
        silent: bool = False,
        store_history: bool = True,
        stop_on_error: bool = True,
    ) -> tuple[dict[str, t.Any], list[dict[str, t.Any]]]:
        """jupyter_kernel_test's helper, waiting for the cell's idle status instead of a quiet 0.1 s.

        Upstream reads iopub with a fixed 0.1 s timeout after the reply, which
        raises Empty on a loaded machine before the idle status is published.
        """
        msg_id = self.kc.execute(code=code, silent=silent, store_history=store_history, stop_on_error=stop_on_error)
        reply = self.get_non_kernel_info_reply(timeout=timeout)
        assert reply is not None
        jkt.validate_message(reply, "execute_reply", msg_id)
        busy_msg = self.kc.get_iopub_msg(timeout=timeout)
        jkt.validate_message(busy_msg, "status", msg_id)
        assert busy_msg["content"]["execution_state"] == "busy"
        output_msgs = []
        while True:
            msg = self.kc.get_iopub_msg(timeout=timeout)
            jkt.validate_message(msg, msg["msg_type"], msg_id)
            if msg["msg_type"] == "status":
                assert msg["content"]["execution_state"] == "idle"
                return reply, output_msgs
            if msg["msg_type"] == "execute_input":
                assert msg["content"]["code"] == code
                continue
            output_msgs.append(msg)

    def test_kernel_info_is_ours(self) -> None:
        """The spec started our kernel, in the mode its argv bakes in."""
        self.flush_channels()
        msg_id = self.kc.kernel_info()
        reply = self.kc.get_shell_msg(timeout=jkt.TIMEOUT)
        while reply["parent_header"].get("msg_id") != msg_id:
            reply = self.kc.get_shell_msg(timeout=jkt.TIMEOUT)
        jkt.validate_message(reply, "kernel_info_reply", msg_id)
        assert "cancelkernel" in reply["content"]["supported_features"]
        assert reply["content"]["cancelkernel"]["exec_thread"] == self.exec_thread

    @classmethod
    def setUpClass(cls) -> None:
        cls._ipython_dir = tempfile.mkdtemp(prefix="cancelkernel-ipython-")
        env = {**os.environ, "IPYTHONDIR": cls._ipython_dir}
        cls.km, cls.kc = start_new_kernel(kernel_name=cls.kernel_name, env=env)

    @classmethod
    def tearDownClass(cls) -> None:
        try:
            cls.kc.stop_channels()
            cls.km.shutdown_kernel(now=True)
        finally:
            shutil.rmtree(cls._ipython_dir, ignore_errors=True)


class TestMainModeConformance(_CancelKernelTests):
    kernel_name = "cancelkernel"
    exec_thread = "main"


class TestWorkerModeConformance(_CancelKernelTests):
    kernel_name = "cancelkernel-worker"
    exec_thread = "worker"


del _CancelKernelTests  # only the concrete subclasses are collected

if __name__ == "__main__":  # pragma: no cover
    unittest.main()
