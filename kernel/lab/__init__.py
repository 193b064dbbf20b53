"""cancelkernel in JupyterLab and Notebook 7: the server extension (the stack of a kernel that does not answer).

The page's extension lives in the repository's labextension/ (TypeScript) and
is installed, built, into share/jupyter/labextensions/cancelkernel-jupyterlab;
this package is what the Jupyter Server loads (enabled by the file
etc/jupyter/jupyter_server_config.d/cancelkernel.json that the install puts there).

Owns: the extension's entry points and the stack endpoint (`stacks`).  May
import: jupyter_server and tornado (it runs in the server's process), the frame
model and the kernel's file names.  Never the kernel side, the runtime, the
native flag, checkpoints or the agent client (a test checks).
"""

from __future__ import annotations

import os
import typing as t

LAB_NAME = "cancelkernel-jupyterlab"


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    return [{"module": "cancelkernel.lab"}]


def _load_jupyter_server_extension(serverapp: t.Any) -> None:
    from jupyter_server.utils import url_path_join

    from .stacks import StackHandler

    if not _page_extension_installed():
        serverapp.log.warning(
            "cancelkernel: its JupyterLab extension is not installed (cancelkernel was built without npm), "
            "so notebooks show no budgets or hung cells; to get it, install Node.js 20 or newer with npm, "
            "then install cancelkernel again"
        )
    base_url = serverapp.web_app.settings["base_url"]
    route = url_path_join(base_url, r"/cancelkernel/kernels/(?P<kernel_id>[\w-]+)/stack")
    serverapp.web_app.add_handlers(".*$", [(route, StackHandler)])


def _page_extension_installed() -> bool:
    from jupyter_core.paths import jupyter_path

    return any(os.path.exists(os.path.join(d, "labextensions", LAB_NAME, "package.json")) for d in jupyter_path())
