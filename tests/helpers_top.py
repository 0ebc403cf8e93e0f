"""runward top in a real terminal: a tmux pane (Terminal) whose screen a test reads, and the marks
that skip without rich or tmux."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys

import pytest

from conftest import wait_for


PY = sys.executable
HAS_TMUX = shutil.which("tmux") is not None
try:
    import rich  # noqa: F401
    HAS_RICH = True
except ImportError:
    HAS_RICH = False

needs_tmux = pytest.mark.skipif(not HAS_TMUX, reason="tmux is not installed (scripts/ci-install.sh installs it)")
needs_rich = pytest.mark.skipif(not HAS_RICH, reason="rich is not installed: pip install -e '.[top]'")


class Terminal:
    """A tmux session on a private socket running one command, with its exit status kept in
    a file (the pane, and so the session, is gone once the command ends)."""

    def __init__(self, tmp_path, env: dict, cwd, argv: list[str], width: int = 200, height: int = 50):
        self.sock = str(tmp_path / "tmux.sock")
        self.rc_file = tmp_path / "top.rc"
        self.env = dict(env, TERM="xterm-256color")
        shell = f"{shlex.join(argv)}; echo $? > {shlex.quote(str(self.rc_file))}"
        self.tmux("new-session", "-d", "-x", str(width), "-y", str(height), "-c", str(cwd), shell)

    def tmux(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["tmux", "-S", self.sock, *args], env=self.env, capture_output=True,
                              text=True, timeout=20)

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p").stdout

    def keys(self, *keys: str) -> None:
        self.tmux("send-keys", *keys).check_returncode()

    def shows(self, pattern: str, timeout: float = 30) -> str:
        """Wait until the screen matches PATTERN (a regex); the screen then."""
        last = [""]

        def seen():
            last[0] = self.screen()
            return re.search(pattern, last[0])
        try:
            wait_for(seen, timeout, f"{pattern!r} on the screen")
        except AssertionError as e:
            raise AssertionError(f"{e}\nscreen:\n{last[0]}") from None
        return last[0]

    def exit_code(self, timeout: float = 15) -> int:
        wait_for(lambda: self.rc_file.exists() and self.rc_file.read_text().strip(), timeout, "top to exit")
        return int(self.rc_file.read_text())

    def close(self) -> None:
        self.tmux("kill-server")
