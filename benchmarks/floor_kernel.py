#!/usr/bin/env python
"""The protocol floor: the least a Python kernel does to answer a cell, for round_trip.py to measure.

Not a kernel for use: one thread, no interrupt, no stdin, no comms. It reads
the shell and control sockets with jupyter_client's Session (the signing and
JSON every Python kernel uses) and answers an execute_request with the
messages ipykernel sends for it: busy, execute_input, a stream for what the
cell printed, execute_result, execute_reply, idle. What a cell costs on it is
what any Python kernel that speaks the protocol pays before running the cell.

    floor_kernel.py -f CONNECTION_FILE              # eval / exec in a dict
    floor_kernel.py -f CONNECTION_FILE --ipython    # the cell through IPython's run_cell

With --ipython the cell runs through a plain IPython InteractiveShell (input
transforms, history, the displayhook's formatters, the builtin trap): the
floor of a kernel that keeps IPython's semantics, as ipykernel and ours do.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
import traceback
from typing import Any

import zmq
from jupyter_client.session import Session

PROTOCOL_VERSION = "5.3"


def socket_url(info: dict, port_name: str) -> str:
    if info.get("transport", "tcp") == "ipc":
        return f"ipc://{info['ip']}-{info[port_name]}"
    return f"tcp://{info['ip']}:{info[port_name]}"


class PlainRunner:
    """Runs a cell with eval / exec; returns (printed text, text/plain of its value or None, error or None)."""

    def __init__(self) -> None:
        self.namespace: dict[str, Any] = {"__name__": "__main__"}

    def run(self, code: str, count: int) -> tuple[str, dict | None, dict | None]:
        out = io.StringIO()
        data = error = None
        with contextlib.redirect_stdout(out):
            try:
                try:
                    compiled = compile(code, f"<cell {count}>", "eval")
                except SyntaxError:
                    exec(compile(code, f"<cell {count}>", "exec"), self.namespace)
                else:
                    value = eval(compiled, self.namespace)
                    if value is not None:
                        data = {"text/plain": repr(value)}
            except Exception as e:  # noqa: BLE001 - any error of the cell is its result
                error = {"ename": type(e).__name__, "evalue": str(e), "traceback": traceback.format_exc().splitlines()}
        return out.getvalue(), data, error


class IPythonRunner:
    """Runs a cell through IPython's InteractiveShell.run_cell; the displayhook hands over the formatted value."""

    def __init__(self) -> None:
        from IPython.core.displayhook import DisplayHook
        from IPython.core.interactiveshell import InteractiveShell

        runner = self

        class KeptDisplayHook(DisplayHook):
            def write_output_prompt(self) -> None:
                pass

            def write_format_data(self, format_dict: dict, md_dict: dict | None = None) -> None:
                runner.data = format_dict

        self.data: dict | None = None
        self.shell = InteractiveShell.instance(displayhook_class=KeptDisplayHook)

    def run(self, code: str, count: int) -> tuple[str, dict | None, dict | None]:
        out = io.StringIO()
        self.data = None
        with contextlib.redirect_stdout(out):
            result = self.shell.run_cell(code, store_history=True)
        error = None
        if result.error_in_exec is not None or result.error_before_exec is not None:
            e = result.error_in_exec or result.error_before_exec
            error = {"ename": type(e).__name__, "evalue": str(e), "traceback": []}
        return out.getvalue(), self.data, error


class FloorKernel:
    def __init__(self, info: dict, runner: PlainRunner | IPythonRunner) -> None:
        self.session = Session(key=info["key"].encode(), signature_scheme=info["signature_scheme"], username="kernel")
        self.context = zmq.Context()
        self.shell = self._bind(zmq.ROUTER, info, "shell_port")
        self.control = self._bind(zmq.ROUTER, info, "control_port")
        self.stdin = self._bind(zmq.ROUTER, info, "stdin_port")
        self.iopub = self._bind(zmq.PUB, info, "iopub_port")
        self.heartbeat = self._bind(zmq.REP, info, "hb_port")
        self.runner = runner
        self.count = 0
        self.running = True

    def _bind(self, kind: int, info: dict, port_name: str) -> zmq.Socket:
        socket = self.context.socket(kind)
        socket.linger = 0
        socket.bind(socket_url(info, port_name))
        return socket

    def serve(self) -> None:
        poller = zmq.Poller()
        for socket in (self.shell, self.control, self.heartbeat):
            poller.register(socket, zmq.POLLIN)
        while self.running:
            for socket, _ in poller.poll():
                if socket is self.heartbeat:
                    self.heartbeat.send(self.heartbeat.recv())
                    continue
                idents, msg = self.session.recv(socket, mode=0)
                self.handle(socket, idents, msg)
        self.context.destroy(linger=0)

    def publish(self, msg_type: str, content: dict, parent: dict) -> None:
        self.session.send(self.iopub, msg_type, content, parent=parent, ident=f"kernel.floor.{msg_type}".encode())

    def handle(self, socket: zmq.Socket, idents: list, msg: dict) -> None:
        msg_type = msg["header"]["msg_type"]
        self.publish("status", {"execution_state": "busy"}, msg)
        if msg_type == "execute_request":
            content, metadata = self.execute(msg), {"status": "ok", "dependencies_met": True, "engine": "floor"}
        elif msg_type == "kernel_info_request":
            content, metadata = self.kernel_info(), {}
        else:
            content, metadata = {"status": "ok"}, {}
            if msg_type == "shutdown_request":
                content["restart"] = bool(msg["content"].get("restart"))
                self.running = False
        reply_type = msg_type.removesuffix("_request") + "_reply"
        self.session.send(socket, reply_type, content, parent=msg, ident=idents, metadata=metadata)
        self.publish("status", {"execution_state": "idle"}, msg)

    def execute(self, msg: dict) -> dict:
        code = msg["content"]["code"]
        self.count += 1
        self.publish("execute_input", {"code": code, "execution_count": self.count}, msg)
        printed, data, error = self.runner.run(code, self.count)
        if printed:
            self.publish("stream", {"name": "stdout", "text": printed}, msg)
        if error is not None:
            self.publish("error", error, msg)
            return {"status": "error", "execution_count": self.count, **error}
        if data is not None:
            self.publish("execute_result", {"execution_count": self.count, "data": data, "metadata": {}}, msg)
        return {"status": "ok", "execution_count": self.count, "user_expressions": {}, "payload": []}

    def kernel_info(self) -> dict:
        return {
            "status": "ok",
            "protocol_version": PROTOCOL_VERSION,
            "implementation": "floor",
            "implementation_version": "0",
            "language_info": {"name": "python", "version": sys.version.split()[0], "file_extension": ".py"},
            "banner": "the protocol floor (a benchmark, not a kernel for use)",
        }


def main(argv: list[str]) -> int:
    if "-f" not in argv[:-1]:
        print("usage: floor_kernel.py -f CONNECTION_FILE [--ipython]", file=sys.stderr)
        return 2
    with open(argv[argv.index("-f") + 1]) as f:
        info = json.load(f)
    runner = IPythonRunner() if "--ipython" in argv else PlainRunner()
    FloorKernel(info, runner).serve()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
