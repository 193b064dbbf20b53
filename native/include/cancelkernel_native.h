/* cancelkernel_native.h: cancel points for plain C/C++ extensions.
 *
 *   #include "cancelkernel_native.h"     (include_dirs=[cancelkernel.native.get_include()])
 *
 *   PyMODINIT_FUNC PyInit_mymod(void) {
 *       if (cancelkernel_import() < 0) return NULL;   // once, with the GIL
 *       ...
 *   }
 *
 *   for (i = 0; i < n; i++) {
 *       if (cancelkernel_cancel_requested()) break;     // inline relaxed load, GIL or not
 *       ...
 *   }
 *   if (cancelkernel_raise_if_cancelled() < 0) return NULL;  // KeyboardInterrupt
 *
 * The checks answer for the calling thread's cell: true while it is cancelled
 * (interrupt request, SIGINT, budget); the kernel clears it when the next cell
 * begins.  While no cell is cancelled a check is one relaxed load of a shared int.
 */
#ifndef CANCELKERNEL_NATIVE_H
#define CANCELKERNEL_NATIVE_H

#include <Python.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CANCELKERNEL_C_API_VERSION 2
#define CANCELKERNEL_CAPSULE_NAME "cancelkernel.native._flag._C_API"

/* What the capsule points to.  Fields are only ever appended; check `size`. */
typedef struct cancelkernel_c_api {
    unsigned int version;                      /* CANCELKERNEL_C_API_VERSION of the installed flag */
    unsigned int size;                         /* sizeof(cancelkernel_c_api) of the installed flag */
    const int *cancelled;                      /* non-zero while some cell is cancelled: then ask cancel_requested_slow */
    int (*raise_if_cancelled)(void);           /* -1 with KeyboardInterrupt set if this thread's cell is cancelled */
    int (*cancellable_sleep)(double seconds);  /* sleeps without the GIL; -1 with an exception set */
    /* Version 2: whether this thread's cell is cancelled; may release a held GIL for ~1 ms when a yield is asked. */
    int (*cancel_requested_slow)(void);
} cancelkernel_c_api;

#ifndef CANCELKERNEL_NO_IMPORT_HELPERS

/* Per-module pointers to the one shared flag (the flag itself is never static here).
   Before cancelkernel_import() they read an always-zero int, so polling is safe. */
static const int cancelkernel__never = 0;
static const int *cancelkernel__flag = &cancelkernel__never;
static const cancelkernel_c_api *cancelkernel__api = NULL;

/* Turn whatever PyCapsule_Import raised into an ImportError (with it as the cause). */
static inline void cancelkernel__raise_import_error(void) {
    PyObject *type, *cause, *tb, *value;
    PyErr_Fetch(&type, &cause, &tb);
    PyErr_NormalizeException(&type, &cause, &tb);
    if (cause != NULL && tb != NULL) PyException_SetTraceback(cause, tb);
    Py_XDECREF(type);
    Py_XDECREF(tb);
    PyErr_SetString(PyExc_ImportError,
                    "the compiled cancellation flag (cancelkernel.native._flag) cannot be imported; "
                    "reinstall cancelkernel with a C compiler");
    if (cause == NULL) return;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    PyException_SetCause(value, cause);  /* steals cause */
    PyErr_Restore(type, value, tb);
}

/* Call once at module init with the GIL held; 0 on success, -1 with ImportError set. */
static inline int cancelkernel_import(void) {
    const cancelkernel_c_api *api = (const cancelkernel_c_api *)PyCapsule_Import(CANCELKERNEL_CAPSULE_NAME, 0);
    if (api == NULL) {
        cancelkernel__raise_import_error();
        return -1;
    }
    if (api->version < CANCELKERNEL_C_API_VERSION || api->size < sizeof(cancelkernel_c_api)) {
        PyErr_Format(PyExc_ImportError, "cancelkernel C API version %u is older than this header's %d",
                     api->version, CANCELKERNEL_C_API_VERSION);
        return -1;
    }
    cancelkernel__api = api;
    cancelkernel__flag = api->cancelled;
    return 0;
}

/* The shared summary int: zero while no cell is cancelled (and before cancelkernel_import()). */
static inline int cancelkernel__load_flag(void) {
#if defined(_MSC_VER)
    return *(volatile const int *)cancelkernel__flag;
#else
    return __builtin_expect(__atomic_load_n(cancelkernel__flag, __ATOMIC_RELAXED), 0);  /* keeps the slow path out of loops */
#endif
}

/* Non-zero while this thread's cell is cancelled: one relaxed atomic load while no cell is, no GIL needed. */
static inline int cancelkernel_cancel_requested(void) {
    if (cancelkernel__load_flag() == 0) return 0;
    return cancelkernel__api->cancel_requested_slow();
}

/* 0, or -1 with KeyboardInterrupt set if this thread's cell is cancelled (GIL held or not). */
static inline int cancelkernel_raise_if_cancelled(void) {
    if (cancelkernel__load_flag() == 0) return 0;
    return cancelkernel__api->raise_if_cancelled();
}

/* Sleep `seconds` without the GIL; -1 with KeyboardInterrupt set within ~1 ms of a cancel. */
static inline int cancelkernel_cancellable_sleep(double seconds) {
    if (cancelkernel__api == NULL) {
        PyGILState_STATE gil = PyGILState_Ensure();
        PyErr_SetString(PyExc_RuntimeError, "cancelkernel_import() was not called");
        PyGILState_Release(gil);
        return -1;
    }
    return cancelkernel__api->cancellable_sleep(seconds);
}

#endif /* CANCELKERNEL_NO_IMPORT_HELPERS */

#ifdef __cplusplus
}
#endif

#endif /* CANCELKERNEL_NATIVE_H */
