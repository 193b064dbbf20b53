"""The kernelspec: the template (kernel.json) and logos, and the one builder that turns them into specs.

Owns: what a kernel.json of ours holds (`kernel_json()`), writing it
(`install()`, `uninstall()`, `write_spec()`), and private specs for the agent
client and the demo (`private_spec_dir()`).  May import: jupyter_client and
the shared pure modules only, so the agent client may use it.
"""

from __future__ import annotations

from .builder import DEFAULT_DISPLAY_NAME as DEFAULT_DISPLAY_NAME
from .builder import DEFAULT_NAME as DEFAULT_NAME
from .builder import OUR_KERNELS as OUR_KERNELS
from .builder import InstallError as InstallError
from .builder import install as install
from .builder import kernel_json as kernel_json
from .builder import private_spec_dir as private_spec_dir
from .builder import uninstall as uninstall
from .builder import write_spec as write_spec

__all__ = [
    "DEFAULT_DISPLAY_NAME",
    "DEFAULT_NAME",
    "OUR_KERNELS",
    "InstallError",
    "install",
    "kernel_json",
    "private_spec_dir",
    "uninstall",
    "write_spec",
]
