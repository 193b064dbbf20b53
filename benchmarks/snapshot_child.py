"""What runs inside the measured processes of benchmarks/snapshot.py, and the snapshot-by-fork prototype.

NOT part of the package (issue 25, measurements first): the prototype exists to
measure what a snapshot costs and how fast it becomes the kernel, and to find
what breaks.  `python snapshot_child.py SHAPE SIZE_MB RUNS COW_RUNS ROOM` is
the bare process (a heap, forks, copy-on-write; one JSON line).  In a kernel:

- `install(kernel)` wraps the kernel's `do_execute`: an execute_request whose
  metadata carries `{"snapshot": {"connection_file": ..., "stages_file": ...,
  "prepare": bool}}` forks before its cell runs (`Snapshots.take`).  The child
  holds the copy-on-write image of the process from before the cell and waits
  for a signal: SIGUSR2 ends it (or the parent's `drop()`: SIGKILL, reaped),
  SIGUSR1 promotes it.
- The fork point, and why no thread holds a lock the child needs: the main
  thread, in the shell's dispatch before the cell runs, only when no execution
  runs on any thread (checked under the kernel's start lock, so none can
  begin).  There our watchdog and the native GIL-yield thread idle-wait, the
  control, IOPub, shell-channel and heartbeat threads sit in their polls, and
  IPython's own at-fork hook joins its history thread.  The few locks the child
  goes on using (the kernel's start lock, the shell's bookkeeping and trap
  locks, our module-level collector lock) are taken by the forking thread just
  before os.fork() and released on both sides after it.  Everything else the
  child makes anew and never touches the parent's objects (another thread may
  have held their locks at the fork): CPython itself resets the GIL, the import
  lock, threading's and logging's locks; glibc its malloc arenas.
- The rebuild (`Snapshots._rebuild`): the collector frozen (it would write into
  every container of the heap: a copy of each page); new file objects on fd 1
  and 2 (a buffered file's lock held by another thread at the fork is never
  reset: python/cpython#84579) and the kernel's log there; every other
  inherited descriptor replaced by /dev/null (the parent's listening sockets,
  epoll and ZeroMQ descriptors: their numbers stay taken, so an old object can
  never close a new descriptor); the parent's atexit hooks and its runtime's
  monkeypatches undone; a new asyncio loop; then a fresh kernel application
  (`PromotedApp`: a CancelKernelApp that reads no config files and runs no
  startup code, with the parent's configuration minus its connection) on a new
  connection file, new ports, a new ZeroMQ context and new threads, whose
  kernel takes over the existing shell and namespace.  The history manager is
  made anew once the loop runs (the parent's sqlite connection must not be
  used after a fork).  With `prepare`, the rebuild runs right after the fork
  (bound, threads running, not started); else after the signal.
- The child writes its stages (perf_counter is CLOCK_MONOTONIC: the driver's
  clock too) and its CPU seconds to `stages_file` once the new loop runs; a
  traceback to `stages_file.error`; a promotion still running after
  PROMOTION_HANG dumps its stacks to `stages_file.hang` and exits.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import faulthandler
import gc
import json
import os
import signal
import sys
import threading
import time
import traceback
import typing as t

PROMOTE = signal.SIGUSR1
DROP = signal.SIGUSR2
# A snapshot nobody promotes or drops (its owner died with it) ends after this long.
MAX_LIFE = 900.0
# A promotion still running after this long dumps its stacks to the stages file and exits (a deadlock, found).
PROMOTION_HANG = 30.0


# -- what the measured process holds and does (the bare worker and the kernel alike) --------------------

MB = 2**20
ARRAY_MB = 64  # the numpy heap is arrays of this size: "many arrays", half of them rewritten
NO_NUMPY = "numpy is not installed: pip install numpy (the benchmark needs it; cancelkernel does not)"


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def smaps(pid: int) -> dict[str, int]:
    """/proc/PID/smaps_rollup in bytes: Rss, Pss, Private_Clean, Private_Dirty, AnonHugePages, ..."""
    out = {}
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 3 and parts[2] == "kB":
                out[parts[0].rstrip(":")] = int(parts[1]) * 1024
    return out


def private_bytes(pid: int) -> int:
    """Pages only this process maps: after a fork, what the other side has copied (or never shared)."""
    s = smaps(pid)
    return s.get("Private_Clean", 0) + s.get("Private_Dirty", 0)


def build_heap(shape: str, size_mb: int) -> dict:
    """`size_mb` of numpy arrays (ARRAY_MB each) or of many small Python objects (dicts of an int, a str, a list:
    containers the cyclic collector tracks)."""
    import gc

    started, base = time.perf_counter(), rss()
    if shape == "numpy":
        try:
            import numpy
        except ImportError:
            raise SystemExit(NO_NUMPY) from None
        count = max(2, size_mb // ARRAY_MB)
        items: list = [numpy.full(size_mb * MB // count // 8, 1.0) for _ in range(count)]
    else:
        gc.disable()  # building millions of containers would run the collector over the growing heap
        items = []
        while rss() - base < size_mb * MB:
            first = len(items)
            items.extend([{"i": i, "s": str(i), "t": [i]} for i in range(first, first + 100_000)])
        gc.enable()
    return {"shape": shape, "items": items, "alloc": time.perf_counter() - started, "grown": rss() - base}


def rewrite_half(heap: dict) -> float:
    """The risky cell's work: rewrite half of the arrays (every page of them) or half of the objects."""
    started = time.perf_counter()
    if heap["shape"] == "numpy":
        import numpy

        for a in heap["items"][::2]:
            numpy.add(a, 1.0, out=a)
    else:
        for d in heap["items"][::2]:
            d["i"] += 1
    return time.perf_counter() - started


def read_all(heap: dict) -> float:
    """A loop that only reads every object (each one's reference count still changes)."""
    started = time.perf_counter()
    for _ in heap["items"]:
        pass
    return time.perf_counter() - started


def collect(heap: dict) -> float:
    """A full collection of the cyclic garbage collector (it writes into every container's header)."""
    import gc

    started = time.perf_counter()
    gc.collect()
    return time.perf_counter() - started


def collect_frozen(heap: dict) -> float:
    """The same after gc.freeze(): the objects from before it are never scanned (the mitigation Python offers)."""
    import gc

    gc.freeze()
    try:
        return collect(heap)
    finally:
        gc.unfreeze()


# What a cell does to the heap behind a snapshot (the functions above), per heap shape.
WORKS = {"numpy": ["rewrite_half"], "small": ["rewrite_half", "read_all", "collect", "collect_frozen"]}


def hold() -> dict:
    """Fork a child that does nothing but wait (SIGUSR2 or SIGKILL ends it): the snapshot of a bare process."""
    r, w = os.pipe()
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {DROP})
    started = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        os.write(w, b"r")
        signal.sigwait({DROP})
        os._exit(0)
    forked = time.perf_counter()
    signal.pthread_sigmask(signal.SIG_SETMASK, old)
    os.read(r, 1)
    ready = time.perf_counter()
    os.close(r)
    os.close(w)
    return {"pid": pid, "fork": forked - started, "ready": ready - started}


def release(pid: int) -> float:
    """Drop a held child: SIGKILL, reaped."""
    started = time.perf_counter()
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return time.perf_counter() - started


def cow_sample(heap: dict, work: t.Callable[[dict], float]) -> dict:
    """`work` without a child, then with one holding the heap: its time both ways and what the child then owns."""
    alone = work(heap)
    held = hold()
    before = private_bytes(held["pid"])
    with_child = work(heap)
    extra = private_bytes(held["pid"]) - before
    return {"alone": alone, "with_child": with_child, "extra": extra, "drop": release(held["pid"])}


def bare_worker(shape: str, size_mb: int, runs: int, cow_runs: int, room: int) -> dict:
    """The bare process's measurements for one heap; `room`: bytes it may add by copy-on-write (0: none)."""
    heap = build_heap(shape, size_mb)
    me = smaps(os.getpid())
    out: dict[str, t.Any] = {
        "alloc": heap["alloc"],
        "grown": heap["grown"],
        "rss": me.get("Rss"),
        "huge": me.get("AnonHugePages"),
    }
    out["forks"] = [_fork_drop() for _ in range(runs)]
    out["cow"] = {}
    for name in WORKS[shape]:
        work = globals()[name]
        # Half the arrays is half the pages; half the objects touches nearly every page (they are interleaved).
        needed = heap["grown"] // (2 if shape == "numpy" else 1)
        if needed > room:
            out["cow"][name] = {"skipped": f"needs {needed / 2**30:.1f} GB more, allowed {room / 2**30:.1f} GB"}
            continue
        out["cow"][name] = [cow_sample(heap, work) for _ in range(cow_runs)]
    out["forks_after_cow"] = [_fork_drop() for _ in range(runs)]
    out["huge_after_cow"] = smaps(os.getpid()).get("AnonHugePages")
    return out


def _fork_drop() -> dict:
    held = hold()
    held["drop"] = release(held["pid"])
    return held


class Snapshots:
    """At most one snapshot child of this kernel at a time."""

    def __init__(self, kernel: t.Any):
        self.kernel = kernel
        self.child: int | None = None
        self.stats: list[dict] = []  # one entry per snapshot taken (parent side)
        self._original_do_execute = kernel.do_execute

    # -- parent side --

    def install(self) -> None:
        kernel = self.kernel
        original = self._original_do_execute

        async def do_execute(*args: t.Any, **kwargs: t.Any) -> dict:
            spec = (kernel.get_parent("shell").get("metadata") or {}).get("snapshot")
            if spec:
                self.take(spec)
            return t.cast(dict, await original(*args, **kwargs))

        kernel.do_execute = do_execute

    def _locks_the_child_uses(self) -> list[t.Any]:
        """The locks of objects the promoted child goes on using: the shell's, our module-level one, the start lock."""
        from cancelkernel.runtime import stacks

        shell = self.kernel.shell
        locks = [self.kernel._start_lock, shell.bookkeeping._lock, stacks._gc_paused]
        for trap in (shell.builtin_trap, shell.display_trap):
            lock = getattr(trap, "_trap_lock", None)
            if lock is not None:
                locks.append(lock)
        return locks

    def take(self, spec: dict) -> dict:
        """Fork now (between cells, main thread); the parent returns, the child waits and never returns."""
        started = time.perf_counter()
        stat: dict[str, t.Any] = {"started": started, "taken": False}
        self.stats.append(stat)
        if self.child is not None:
            stat["dropped_previous"] = self.drop()
        blocked = {PROMOTE, DROP}
        old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, blocked)  # inherited: no signal is lost before the wait
        locks = self._locks_the_child_uses()
        for lock in locks:  # in this order only here; each is held briefly by the threads that use it
            lock.acquire()
        try:
            stat["parked"] = time.perf_counter() - started
            running = self.kernel.runtime.core.running()  # under the start lock: no cell can begin now
            if running:
                stat["refused"] = f"{len(running)} execution(s) running"
                return stat
            before = time.perf_counter()
            pid = os.fork()
            if pid == 0:
                for lock in reversed(locks):
                    lock.release()
                self._child(spec, old_mask)  # never returns
            after = time.perf_counter()
        finally:
            for lock in reversed(locks):
                lock.release()
            signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
        self.child = pid
        stat.update(taken=True, pid=pid, fork=after - before, pause=time.perf_counter() - started, forked_at=before)
        return stat

    def drop(self) -> dict:
        """The cell ended well: the snapshot goes (SIGKILL, reaped here)."""
        pid, self.child = self.child, None
        if pid is None:
            return {}
        started = time.perf_counter()
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)
        return {"pid": pid, "drop": time.perf_counter() - started}

    # -- child side --

    def _child(self, spec: dict, old_mask: t.Any) -> t.NoReturn:
        """Wait for the decision; with `prepare` in the spec, build the new kernel first (not started until then)."""
        code = 0
        try:
            stamps = {"forked": time.perf_counter()}
            os.setsid()  # out of the kernel's process group: a kill of the wedged kernel's group spares it
            rebuilt = self._rebuild(spec, stamps) if spec.get("prepare") else None
            info = signal.sigtimedwait({PROMOTE, DROP}, MAX_LIFE)
            if info is None or info.si_signo != PROMOTE:
                os._exit(0)
            stamps["signalled"] = time.perf_counter()
            global cpu_at_signal
            cpu_at_signal = time.process_time()
            self._start(spec, stamps, old_mask, rebuilt or self._rebuild(spec, stamps))
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 0
        except BaseException:  # noqa: BLE001 - the child must never return into the parent's stack
            code = 1
            with contextlib.suppress(Exception), open(spec["stages_file"] + ".error", "w") as f:
                f.write(traceback.format_exc())
        finally:
            os._exit(code)

    def _rebuild(self, spec: dict, stamps: dict) -> tuple[t.Any, dict]:
        """A fresh kernel application around the existing shell, initialized (bound, threads running), not started."""
        kernel = self.kernel
        old_app = kernel.parent
        stamps["rebuilding"] = time.perf_counter()
        cpu = time.process_time()
        hang = open(spec["stages_file"] + ".hang", "w")  # noqa: SIM115 - open for the process's life
        faulthandler.dump_traceback_later(PROMOTION_HANG, exit=True, file=hang)
        stats: dict[str, t.Any] = {"profile": _profiler(spec.get("profile"))}
        gc.disable()  # the collector would write into every container of the heap: a copy of each page
        gc.freeze()
        stats.update(_unshare(old_app))
        stamps["unshared"] = time.perf_counter()
        _undo_registrations(old_app, kernel)
        stamps["registrations_undone"] = time.perf_counter()
        from cancelkernel.kernel.app import CancelKernelApp

        CancelKernelApp.clear_instance()
        type(kernel).clear_instance()
        _GRAVEYARD.extend([old_app, kernel, kernel.shell.history_manager])  # never collected, never closed here
        app = _promoted_app_class().instance(config=_config_without_connection(old_app.config))
        app.connection_file, app.transport, app.ip = spec["connection_file"], "tcp", "127.0.0.1"
        app.initialize([])
        stamps["initialized"] = time.perf_counter()
        stamps.update({f"app.{k}": v for k, v in app.steps.items()})
        shell = app.kernel.shell
        assert shell is kernel.shell, "the promoted kernel must take over the existing shell"
        shell.kernel = app.kernel
        shell.parent = app.kernel
        stamps["shell_taken_over"] = time.perf_counter()
        faulthandler.cancel_dump_traceback_later()
        stats["rebuild_cpu"] = time.process_time() - cpu
        return app, stats

    def _start(self, spec: dict, stamps: dict, old_mask: t.Any, rebuilt: tuple[t.Any, dict]) -> None:
        """The new kernel's loop runs: it answers from now on; the stages go to the stages file."""
        app, stats = rebuilt
        profile = stats.pop("profile")
        signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
        stamps["starting"] = time.perf_counter()

        def loop_running() -> None:
            stamps["loop_running"] = time.perf_counter()
            stats["cpu"] = time.process_time() - cpu_at_signal
            if profile is not None:
                profile.disable()
                profile.dump_stats(spec["profile"])
            # After the first answers: a new sqlite connection and history thread (the parent's must not be used
            # after the fork), and the collector back on (the heap from before the fork frozen: never scanned).
            asyncio.get_event_loop().call_later(0.05, app.kernel.shell.init_history)
            gc.enable()
            with open(spec["stages_file"], "w") as f:
                json.dump({"stamps": stamps, "pid": os.getpid(), **stats}, f)

        asyncio.get_event_loop().call_soon(loop_running)
        app.start()


_GRAVEYARD: list[t.Any] = []
cpu_at_signal = 0.0  # the child's CPU seconds when it was told to promote


def _profiler(path: str | None) -> t.Any:
    """cProfile of the promotion, from the signal to the new kernel's loop running (`profile` in the spec)."""
    if not path:
        return None
    import cProfile

    profile = cProfile.Profile()
    profile.enable()
    return profile


def _promoted_app_class() -> t.Any:
    from cancelkernel.kernel.app import CancelKernelApp

    class PromotedApp(CancelKernelApp):
        """A fresh kernel application around the existing namespace: startup code and extensions ran already."""

        def init_code(self) -> None:
            """No startup files, exec_lines or exec_files: they ran in the kernel this one replaces."""

        def init_extensions(self) -> None:
            """Loaded in the kernel this one replaces (the shell keeps them)."""

        def init_gui_pylab(self) -> None:
            """Set up in the kernel this one replaces."""

        def parse_command_line(self, argv: list[str] | None = None) -> None:
            """The parent's configuration is copied; the connection file, transport and ip are set as traits."""

        def init_config_files(self) -> None:
            """Read by the kernel this one replaces (its configuration is copied)."""

        def load_config_file(self, *args: t.Any, **kwargs: t.Any) -> None:
            """Read by the kernel this one replaces (its configuration is copied)."""

        def initialize(self, argv: list[str] | None = None) -> None:
            """CancelKernelApp's, each step's end stamped (`steps`: name -> perf_counter)."""
            self.steps: dict[str, float] = {}
            for name in STEPS:
                setattr(self, name, _stamped(getattr(self, name), name, self.steps))
            super().initialize(argv)

    return PromotedApp


# IPKernelApp.initialize's steps, in order (ipykernel 7.4)
STEPS = (
    "init_pdb",
    "init_connection_file",
    "init_sockets",
    "init_heartbeat",
    "write_connection_file",
    "init_io",
    "init_kernel",
    "init_shell",
)


def _stamped(method: t.Callable, name: str, steps: dict[str, float]) -> t.Callable:
    def step(*args: t.Any, **kwargs: t.Any) -> t.Any:
        try:
            return method(*args, **kwargs)
        finally:
            steps[name] = time.perf_counter()

    return step


def _config_without_connection(config: t.Any) -> t.Any:
    """The parent's configuration, without its connection file, transport and ip: with those the new app would
    load the parent's connection file and bind its endpoints (an ipc endpoint is taken over silently)."""
    copy = config.copy()
    for section in copy.values():
        for key in ("connection_file", "transport", "ip"):
            with contextlib.suppress(AttributeError, KeyError, TypeError):
                section.pop(key, None)
    return copy


def _unshare(old_app: t.Any) -> dict:
    """Give up what the child shares with the parent: the standard streams back on the log, every other inherited
    descriptor replaced by /dev/null (numbers kept taken, so an old object never closes a new descriptor)."""
    keep = {0, 1, 2}
    for stream, fd in ((sys.stdout, 1), (sys.stderr, 2)):
        copy = getattr(stream, "_original_stdstream_copy", None)
        if copy is not None:
            os.dup2(copy, fd)  # ipykernel captured fd 1 and 2 into a pipe read by a thread of the parent
            keep.add(copy)  # the app's log handler writes there
    # New file objects on fd 1 and 2: a buffered file's lock held by another thread at the fork stays held in the
    # child (CPython does not reset it: python/cpython#84579), and the first write would wait forever.
    sys.__stdout__ = sys.stdout = open(1, "w", buffering=1, closefd=False)  # type: ignore[misc]  # noqa: SIM115
    sys.__stderr__ = sys.stderr = open(2, "w", buffering=1, closefd=False)  # type: ignore[misc]  # noqa: SIM115
    sys.displayhook = sys.__displayhook__
    import logging

    for name in ("cancelkernel", old_app.log.name):  # the parent's handlers write through the parent's files
        logger = logging.getLogger(name)
        for handler in list(logger.handlers):
            logger.removeHandler(handler)
    null = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
    replaced = 0
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd in keep or fd == null:
            continue
        with contextlib.suppress(OSError):
            os.dup2(null, fd)
            replaced += 1
    os.close(null)
    return {"descriptors_replaced": replaced}


def _undo_registrations(old_app: t.Any, kernel: t.Any) -> None:
    """What the parent registered process-wide and the child must not run: atexit hooks of the old app and its
    threads (a zmq term, a join), the old runtime's cooperative waits (bound to the old core), the old loops."""
    for hook in (
        old_app.close,
        old_app.cleanup_connection_file,
        getattr(old_app.iopub_thread, "stop", None),
    ):
        if hook is not None:
            atexit.unregister(hook)
    history = kernel.shell.history_manager
    if getattr(history, "save_thread", None) is not None:
        atexit.unregister(history.save_thread.stop)
        history.save_thread = None  # dead after the fork; its stop() would join nothing
    kernel.runtime.waits.uninstall()
    signal.set_wakeup_fd(-1)  # the parent's loop's wake-up socket
    asyncio.set_event_loop(asyncio.new_event_loop())
    threading.main_thread().name = "MainThread"


# A signal that dumps every thread's stack to stacks_file(pid): how the driver sees where a kernel hangs.
DUMP = signal.SIGRTMIN + 6


def stacks_file(pid: int) -> str:
    import tempfile

    return os.path.join(os.environ.get("JUPYTER_RUNTIME_DIR") or tempfile.gettempdir(), f"ck-snapshot-stacks-{pid}.txt")


def install(kernel: t.Any) -> Snapshots:
    """Called from a cell: `snapshot_child.install(get_ipython().kernel)` (again in each promoted kernel)."""
    snapshots = Snapshots(kernel)
    snapshots.install()
    dump = open(stacks_file(os.getpid()), "w")  # noqa: SIM115 - open for the kernel's life
    _GRAVEYARD.append(dump)
    faulthandler.register(DUMP, file=dump, all_threads=True)
    return snapshots


if __name__ == "__main__":
    # The bare process of benchmarks/snapshot.py: SHAPE SIZE_MB RUNS COW_RUNS ROOM_BYTES -> one JSON line.
    _shape, _size, _runs, _cow_runs, _room = sys.argv[1], *map(int, sys.argv[2:6])
    print(json.dumps(bare_worker(_shape, _size, _runs, _cow_runs, _room)))
