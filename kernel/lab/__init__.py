"""cancelkernel in JupyterLab and Notebook 7: the server extension (the stack of a kernel that does not answer).

The page's extension lives in the repository's labextension/ (TypeScript) and
is installed, built, into share/jupyter/labextensions/cancelkernel-jupyterlab;
this package is what the Jupyter Server loads (enabled by the file
etc/jupyter/jupyter_server_config.d/cancelkernel.json that the install puts there).
"""

from __future__ import annotations

import typing as t


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    return [{"module": "cancelkernel.lab"}]


def _load_jupyter_server_extension(serverapp: t.Any) -> None:
    from jupyter_server.utils import url_path_join

    from .stacks import StackHandler

    base_url = serverapp.web_app.settings["base_url"]
    route = url_path_join(base_url, r"/cancelkernel/kernels/(?P<kernel_id>[\w-]+)/stack")
    serverapp.web_app.add_handlers(".*$", [(route, StackHandler)])
