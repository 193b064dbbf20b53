"""The JupyterLab extension: installed where JupyterLab finds it, and its TypeScript unit tests (jest) pass.

The jest tests cover the pure logic of labextension/src/state.ts (states,
countdowns, stacks); what the page does is in tests/browser/test_lab_extension.py.
Without npm these tests fail saying so (set CANCELKERNEL_SKIP_BROWSER=1 to skip
everything that needs a browser or node).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SOURCE = os.path.join(ROOT, "labextension")
INSTALLED = os.path.join(sys.prefix, "share", "jupyter", "labextensions", "cancelkernel-jupyterlab")


def _npm() -> str:
    npm = shutil.which("npm")
    if npm is None:
        if os.environ.get("CANCELKERNEL_SKIP_BROWSER") == "1":
            pytest.skip("npm not found (CANCELKERNEL_SKIP_BROWSER=1)")
        pytest.fail(
            "npm not found: install Node.js 20 or newer with npm, or set CANCELKERNEL_SKIP_BROWSER=1", pytrace=False
        )
    return npm


def test_the_install_put_the_built_extension_where_jupyterlab_looks() -> None:
    if not os.path.exists(INSTALLED):
        _npm()  # without npm the install has no extension to put there: fail (or skip) saying so
    with open(os.path.join(INSTALLED, "package.json")) as f:
        built = json.load(f)
    assert built["name"] == "cancelkernel-jupyterlab"
    assert built["jupyterlab"]["_build"]["load"].startswith("static/remoteEntry.")
    assert os.path.exists(os.path.join(INSTALLED, built["jupyterlab"]["_build"]["load"]))
    with open(os.path.join(INSTALLED, "install.json")) as f:
        assert json.load(f)["packageName"] == "cancelkernel"
    assert os.path.exists(os.path.join(INSTALLED, "schemas", "cancelkernel-jupyterlab", "plugin.json"))
    server_config = os.path.join(sys.prefix, "etc", "jupyter", "jupyter_server_config.d", "cancelkernel.json")
    with open(server_config) as f:
        assert json.load(f)["ServerApp"]["jpserver_extensions"] == {"cancelkernel.lab": True}


def test_the_typescript_unit_tests_pass() -> None:
    npm = _npm()
    if not os.path.isdir(os.path.join(SOURCE, "node_modules")):
        subprocess.run([npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=SOURCE, check=True, timeout=600)
    done = subprocess.run([npm, "test", "--silent"], cwd=SOURCE, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "Tests:" in done.stderr, done.stderr[-2000:]
    assert "failed" not in done.stderr.split("Tests:")[1].splitlines()[0], done.stderr[-2000:]


def test_the_stack_endpoint_says_why_when_no_stack_can_be_had(tmp_path) -> None:
    """A kernel not started by this server (no pid: a gateway's), or one without our dump file."""
    import asyncio
    import types

    from cancelkernel.lab.stacks import stack_of

    remote = asyncio.run(stack_of(types.SimpleNamespace(provisioner=None, connection_file="kernel-1.json")))
    assert remote == {
        "available": False,
        "why": "the kernel does not run on this server's host, so no stack can be had while it does not answer",
    }
    local = types.SimpleNamespace(
        provisioner=types.SimpleNamespace(pid=os.getpid()), connection_file=str(tmp_path / "kernel-2.json")
    )
    missing = asyncio.run(stack_of(local))
    assert missing["available"] is False, missing
    assert "keeps no stack dump file" in missing["why"], missing
