"""Ending the ssh control masters a test's calls started, by their control sockets."""

from __future__ import annotations

import os
import signal
from pathlib import Path


def _masters(control: str) -> list[int]:
    """pids of the ssh ControlPersist masters whose socket is in control (their process title
    is "ssh: <ControlPath> [mux]")."""
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                cmd = Path(f"/proc/{d}/cmdline").read_bytes()
            except OSError:
                continue
            if cmd.startswith(b"ssh: " + control.encode() + b"/") and b"[mux]" in cmd:
                out.append(int(d))
    return out


def _end_masters(control: str) -> None:
    for pid in _masters(control):
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
