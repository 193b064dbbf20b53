"""Compile Cython or C extensions against the installed cancelkernel, in a directory of your choice.

    python examples/native/native_build.py DIR            # builds montecarlo into DIR
    >>> build_extensions(DIR, {"montecarlo": "examples/native/montecarlo.pyx"})

What a third-party package's setup.py does: `cythonize(..., include_path=[get_include()])`
for Cython, `include_dirs=[get_include()]` for C.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

_SETUP = r"""
import json, sys
from setuptools import Extension, setup
import cancelkernel.native

spec = json.loads(sys.argv.pop(1))
include = cancelkernel.native.get_include()
cython_ext, c_ext = [], []
for name, source in spec["modules"].items():
    (cython_ext if source.endswith(".pyx") else c_ext).append(Extension(name, [source], include_dirs=[include]))
if cython_ext:
    from Cython.Build import cythonize
    cython_ext = cythonize(
        cython_ext,
        include_path=[include] if spec["include_path"] else [],
        compiler_directives={"language_level": 3},
        quiet=True,
    )
setup(name="ck-native-build", ext_modules=cython_ext + c_ext, script_args=["build_ext", "--inplace", "-q"])
"""


def build_extensions(
    workdir: str,
    modules: dict[str, str],
    *,
    include_path: bool = True,
    env: dict[str, str] | None = None,
    python: str | None = None,
) -> str:
    """Build {module name: .pyx or .c source} into `workdir`; return `workdir` (put it on sys.path).

    `include_path=False` leaves Cython to find cancelkernel's .pxd files on
    sys.path only, as it does for a regular (non-editable) install.
    """
    os.makedirs(workdir, exist_ok=True)
    local: dict[str, str] = {}
    for name, source in modules.items():
        target = os.path.join(workdir, os.path.basename(source))
        if os.path.abspath(source) != os.path.abspath(target):
            shutil.copyfile(source, target)
        local[name] = os.path.basename(target)
    spec = json.dumps({"modules": local, "include_path": include_path})
    result = subprocess.run(
        [python or sys.executable, "-c", _SETUP, spec],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if result.returncode != 0:
        raise RuntimeError(f"building {sorted(modules)} failed:\n{result.stdout}\n{result.stderr}")
    return workdir


def build_montecarlo(workdir: str) -> str:
    """Build the example module `montecarlo` into `workdir`."""
    return build_extensions(workdir, {"montecarlo": os.path.join(HERE, "montecarlo.pyx")})


if __name__ == "__main__":
    print(build_montecarlo(sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "build")))
