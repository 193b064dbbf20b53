"""Third-party builds against the INSTALLED package: a Cython extension, a C extension, a ctypes library.

Cython silently ignores a .pxd whose directory does not match the module's
dotted name, so only building a throwaway extension that does
`from cancelkernel.native cimport cancel_requested, raise_if_cancelled`
proves the layout.  The wheel test proves it for a regular install too,
where Cython finds the .pxd files on sys.path with no include_path at all.
"""

from __future__ import annotations

import glob
import os
import signal
import subprocess
import sys
import sysconfig
import textwrap
import zipfile
from types import ModuleType

import pytest
from helpers import assert_interrupted, start_cell

from cancelkernel.testing import MODES, execute, interrupt, running_kernel, wait_reply

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CYTHON_SOURCE = """\
# cython: language_level=3
from cancelkernel.native cimport cancel_requested, raise_if_cancelled

cdef unsigned long long _spins = 0


def spins():
    return _spins


def is_cancelled():
    return cancel_requested()


def spin_gil():
    global _spins
    cdef unsigned long long x = 1
    while True:
        x = x * 6364136223846793005ULL + 1442695040888963407ULL
        _spins += 1
        if cancel_requested():
            raise_if_cancelled()


def spin_nogil():
    global _spins
    cdef unsigned long long x = 1
    with nogil:
        while True:
            x = x * 6364136223846793005ULL + 1442695040888963407ULL
            _spins += 1
            raise_if_cancelled()
"""

C_SOURCE = """\
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include "cancelkernel_native.h"

static unsigned long long spins;

static PyObject *spin_gil(PyObject *self, PyObject *unused) {
    unsigned long long x = 1;
    while (!cancelkernel_cancel_requested()) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        spins++;
    }
    if (cancelkernel_raise_if_cancelled() < 0) return NULL;
    return PyLong_FromUnsignedLongLong(x);
}

static PyObject *spin_nogil(PyObject *self, PyObject *unused) {
    unsigned long long x = 1;
    Py_BEGIN_ALLOW_THREADS
    while (!cancelkernel_cancel_requested()) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        spins++;
    }
    Py_END_ALLOW_THREADS
    if (cancelkernel_raise_if_cancelled() < 0) return NULL;
    return PyLong_FromUnsignedLongLong(x);
}

static PyObject *nap(PyObject *self, PyObject *arg) {
    double seconds = PyFloat_AsDouble(arg);
    if (seconds == -1.0 && PyErr_Occurred()) return NULL;
    if (cancelkernel_cancellable_sleep(seconds) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *is_cancelled(PyObject *self, PyObject *unused) {
    return PyBool_FromLong(cancelkernel_cancel_requested());
}

static PyObject *get_spins(PyObject *self, PyObject *unused) {
    return PyLong_FromUnsignedLongLong(spins);
}

static PyMethodDef methods[] = {
    {"spin_gil", spin_gil, METH_NOARGS, "GIL held, polls the flag."},
    {"spin_nogil", spin_nogil, METH_NOARGS, "GIL released, polls the flag."},
    {"nap", nap, METH_O, "cancellable_sleep through the C API."},
    {"is_cancelled", is_cancelled, METH_NOARGS, NULL},
    {"spins", get_spins, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "ck_thirdparty_c", NULL, -1, methods};

PyMODINIT_FUNC PyInit_ck_thirdparty_c(void) {
    if (cancelkernel_import() < 0) return NULL;
    return PyModule_Create(&module);
}
"""

# Plain C, no Python at all: what a ctypes user polls through flag_address().
CTYPES_SOURCE = """\
unsigned long long spin(const volatile int *cancelled) {
    unsigned long long n = 0;
    while (!__atomic_load_n(cancelled, __ATOMIC_RELAXED)) n++;
    return n;
}
"""


@pytest.fixture(scope="module")
def thirdparty_dir(native_build: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> str:
    workdir = tmp_path_factory.mktemp("thirdparty")
    (workdir / "ck_thirdparty_cy.pyx").write_text(CYTHON_SOURCE)
    (workdir / "ck_thirdparty_c.c").write_text(C_SOURCE)
    (workdir / "spin.c").write_text(CTYPES_SOURCE)
    native_build.build_extensions(
        str(workdir),
        {
            "ck_thirdparty_cy": str(workdir / "ck_thirdparty_cy.pyx"),
            "ck_thirdparty_c": str(workdir / "ck_thirdparty_c.c"),
        },
    )
    cc = (sysconfig.get_config_var("CC") or "cc").split()
    subprocess.run(
        [*cc, "-O2", "-shared", "-fPIC", "-o", str(workdir / "libspin.so"), str(workdir / "spin.c")],
        check=True,
        timeout=120,
    )
    return str(workdir)


def setup_cell(workdir: str) -> str:
    return textwrap.dedent(f"""\
        import sys, ctypes
        sys.path.insert(0, {workdir!r})
        import ck_thirdparty_cy, ck_thirdparty_c, cancelkernel.native as native
        libspin = ctypes.CDLL({os.path.join(workdir, "libspin.so")!r})
        libspin.spin.restype = ctypes.c_ulonglong
        libspin.spin.argtypes = [ctypes.c_void_p]
        x = 41
        assert not ck_thirdparty_cy.is_cancelled() and not ck_thirdparty_c.is_cancelled()
    """)


@pytest.mark.parametrize("mode", MODES)
def test_thirdparty_loops_are_interrupted(mode, thirdparty_dir):
    with running_kernel(mode) as (km, kc):
        reply = execute(kc, setup_cell(thirdparty_dir))
        assert reply["content"]["status"] == "ok", reply["content"]
        # GIL held: only the SIGINT's C handler gets through (the control thread is starved).
        for code in ("ck_thirdparty_cy.spin_gil()", "ck_thirdparty_c.spin_gil()"):
            msg_id = start_cell(kc, code)
            km.signal_kernel(signal.SIGINT)
            assert_interrupted(wait_reply(kc, msg_id))
        # GIL released (ctypes releases it around foreign calls): a plain interrupt_request.
        for code in (
            "ck_thirdparty_cy.spin_nogil()",
            "ck_thirdparty_c.spin_nogil()",
            "ck_thirdparty_c.nap(3600)",
            "libspin.spin(native.flag_address()); native.raise_if_cancelled()",
        ):
            msg_id = start_cell(kc, code)
            assert interrupt(kc)["interrupted"] is True, code
            assert_interrupted(wait_reply(kc, msg_id))
        reply = execute(
            kc,
            "assert x == 41 and ck_thirdparty_cy.spins() > 0 and ck_thirdparty_c.spins() > 0\n"
            "assert not ck_thirdparty_cy.is_cancelled() and not ck_thirdparty_c.is_cancelled()",
        )
        assert reply["content"]["status"] == "ok", reply["content"]


def test_thirdparty_modules_share_the_one_flag(thirdparty_dir):
    # Outside a kernel: the flag set through the package is what both extensions read.
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            textwrap.dedent(f"""\
        import sys
        sys.path.insert(0, {thirdparty_dir!r})
        import ck_thirdparty_cy as cy, ck_thirdparty_c as c
        from cancelkernel.native import _flag as f
        assert not cy.is_cancelled() and not c.is_cancelled()
        f.begin(3); f.cancel(3)
        assert cy.is_cancelled() and c.is_cancelled()
        try:
            cy.spin_nogil()
        except KeyboardInterrupt as exc:
            assert str(exc) == "cancelled"
        try:
            c.nap(-1)
        except ValueError:
            pass
        f.end(3)
        assert not cy.is_cancelled() and not c.is_cancelled()
        print("OK")
    """),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.stdout.strip() == "OK", out.stderr


def test_c_extension_import_fails_cleanly_without_the_compiled_flag(thirdparty_dir):
    # A missing _flag must surface as an ImportError at import time, not a crash later.
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            textwrap.dedent(f"""\
        import sys
        sys.modules["cancelkernel.native._flag"] = None   # as if it had not been built
        sys.path.insert(0, {thirdparty_dir!r})
        try:
            import ck_thirdparty_c
        except ImportError as exc:
            print("ImportError")
    """),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.stdout.strip() == "ImportError", out.stderr


@pytest.fixture(scope="module")
def wheel_install(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """The package built as a wheel and installed into a directory of its own (not editable)."""
    wheels = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(wheels), ROOT],
        check=True,
        timeout=600,
        capture_output=True,
    )
    (wheel,) = glob.glob(str(wheels / "cancelkernel-*.whl"))
    target = tmp_path_factory.mktemp("site")
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), wheel],
        check=True,
        timeout=600,
        capture_output=True,
    )
    return wheel, str(target)


def test_wheel_ships_headers_and_pxd_but_no_generated_c(wheel_install):
    wheel, _ = wheel_install
    names = zipfile.ZipFile(wheel).namelist()
    for needed in (
        "cancelkernel/native/__init__.pxd",
        "cancelkernel/native/_flag.pxd",
        "cancelkernel/native/include/cancelkernel_native.h",
    ):
        assert needed in names, needed
    assert any(n.startswith("cancelkernel/native/_flag.") and n.endswith((".so", ".pyd")) for n in names)
    assert not [n for n in names if n.endswith(".c")], names


def test_cimport_works_against_a_regular_install_without_include_path(native_build, wheel_install, tmp_path):
    # The exact line, found by Cython on sys.path only: the installed directory IS cancelkernel/native/.
    _, site = wheel_install
    (tmp_path / "ck_wheel_consumer.pyx").write_text(CYTHON_SOURCE)
    env = {**os.environ, "PYTHONPATH": site}
    native_build.build_extensions(
        str(tmp_path), {"ck_wheel_consumer": str(tmp_path / "ck_wheel_consumer.pyx")}, include_path=False, env=env
    )
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            textwrap.dedent(f"""\
        import sys
        sys.path.insert(0, {str(tmp_path)!r})
        import cancelkernel.native as native, ck_wheel_consumer as consumer
        assert native.__file__.startswith({site!r}), native.__file__
        assert native.available
        native.begin(9); native.cancel(9)
        assert consumer.is_cancelled()
        try:
            consumer.spin_gil()
        except KeyboardInterrupt:
            print("OK")
    """),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.stdout.strip() == "OK", out.stderr
