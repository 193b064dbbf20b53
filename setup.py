"""Build the Cython cancellation flag; everything else is in pyproject.toml.

The flag is optional: without Cython or a C compiler the install still
succeeds and cancelkernel.native falls back to its pure-Python flag.
"""

import os
import sys

from setuptools import Extension, setup

HERE = os.path.dirname(os.path.abspath(__file__))
INCLUDE = os.path.join("native", "include")


def native_extensions() -> list:
    try:
        from Cython.Build import cythonize
    except ImportError:
        print("cancelkernel: Cython not found; installing the pure-Python flag only", file=sys.stderr)
        return []
    flag = Extension(
        "cancelkernel.native._flag",
        [os.path.join("native", "_flag.pyx")],
        include_dirs=[INCLUDE],
    )
    try:
        extensions = cythonize(
            [flag],
            # The .pxd files are found by dotted name: native/include/cancelkernel/native/
            # mirrors the package (links to native/*.pxd), which native/ alone does not.
            include_path=[INCLUDE],
            # Compiler output stays in build/, out of the package directory.
            build_dir=os.path.join("build", "cython"),
            compiler_directives={"language_level": 3},
            quiet=True,
        )
    except Exception as exc:  # noqa: BLE001 - a broken Cython must not break the install
        print(f"cancelkernel: cythonize failed ({exc}); installing the pure-Python flag only", file=sys.stderr)
        return []
    for extension in extensions:
        extension.optional = True  # no compiler: build_ext warns and the fallback is used
    return extensions


os.chdir(HERE)  # cythonize and the relative paths above expect the project root
setup(ext_modules=native_extensions())
