"""The command line: `cancelkernel install|uninstall|kernel|demo|exec|run|mcp`.

Owns: parsing and dispatch (`main`), option types and the agent commands'
parser with their shared flags (`options`), the agent commands
(`agent_commands`), the demo (`demo`, `demo_policy`).  May import
anything of the package; nothing imports it but `__main__` and the console
script.
"""

from __future__ import annotations

from .main import main as main

__all__ = ["main"]
