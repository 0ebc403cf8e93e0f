"""runward top [--on TARGET | --all]: a live view of runs and GPUs; keys to read a run's log
and to stop it (after a y/n confirmation).

Everything it shows comes through the ordinary api calls (api.status of the named runs, for
their health; api.gpus), so over ssh it reads through the resident agent like `status` does.
The drawing is rich's (the optional extra runward[top]), imported inside run only: the base
install and `runward --help` never import it (verbs/_topview.py holds the rendering).

Threads: a fetcher collects a snapshot every --interval seconds (a slow host never freezes
the keys), a stop or a log read runs in its own thread; each wakes the drawing loop through a
pipe, so the loop sleeps in select() on the keyboard and that pipe and never polls.
"""

from __future__ import annotations

import os
import sys
import threading
import time

from ..errors import EXIT_OK, BadInput, RunwardError
from ._common import config_targets, load_config, target_of
from ..operations.common import require_extra

LOG_LINES = 20


def add_arguments(p) -> None:
    p.epilog = ("keys: q quit, up/down (or k/j) select a run, l its last log lines (l or Esc closes),\n"
                "      s stop it (asks y/n; a verified stop, its result shown)")
    p.add_argument("--all", action="store_true", help="every named target in runward.toml")
    p.add_argument("--interval", type=float, default=2.0, metavar="SECONDS",
                   help="seconds between refreshes (default 2)")


def run(args, out) -> int:
    require_extra("rich", "top", "the rich library", "top")
    if args.json:
        raise BadInput("runward top is interactive; it has no --json",
                       "runward status --json and runward gpus --json give the same facts")
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise BadInput("runward top needs a terminal", "for scripts use runward status --json")
    if args.interval <= 0:
        raise BadInput(f"invalid --interval {args.interval}", "give a number of seconds > 0")
    cfg = load_config(args)
    if args.all:
        targets = cfg.named_targets()
        if not targets:
            raise BadInput("--all: no [targets] in runward.toml", "define named targets, or use --on")
    elif args.on is None and cfg.path and config_targets(cfg):
        targets = config_targets(cfg)  # in a project: its runs live on runward.toml's targets
    else:
        targets = [target_of(args, cfg)]
    return Top(targets, args.interval, baseline_rules(cfg)).loop()


def baseline_rules(cfg) -> dict:
    """{run: "best" | "attempt:N"}: the baseline each run's health rules name (the first rule's),
    so top compares with what watch and the shim judge against; "best" where none is set."""
    out = {}
    for name in cfg.runs:
        for rule in (cfg.runs.value(name, "health") or {}).values():
            if isinstance(rule, dict) and isinstance(rule.get("baseline"), str):
                out[name] = rule["baseline"]
                break
    return out


def collect_target(target, which: dict | None = None) -> dict:
    """One target's part of a snapshot: its runs with their health, and its GPUs; a failure
    is kept as text beside the target, never raised (one host down hides no other)."""
    from .. import api
    part = {"target": target.display(), "runs": [], "error": None, "gpus": None, "gpu_error": None}
    try:
        res = api.status(target)
        names = [r["name"] for r in res.get("runs") or []]
        if names:
            try:  # named runs carry their health (metrics, series, alerts)
                res = api.status(target, names)
            except RunwardError:
                pass  # one was removed between the calls: the list is still right
        part["runs"] = res.get("runs") or []
        from ._topbase import baseline
        for r in part["runs"]:  # the change against the baseline: the rule's, else the best (docs/history.md)
            r["baseline"] = baseline(target, r["name"], r.get("attempt"), (which or {}).get(r["name"], "best"))
    except RunwardError as e:
        part["error"] = e.message
        return part
    try:
        part["gpus"] = api.gpus(target)
    except RunwardError as e:
        part["gpu_error"] = e.message
    return part


def split_keys(data: bytes) -> list[bytes]:
    """One read may hold several keys (a paste, tmux send-keys, a fast typist): each key
    alone, an arrow's escape sequence (ESC [ A, or ESC O A) kept whole."""
    keys, i = [], 0
    while i < len(data):
        n = 3 if data[i:i + 1] == b"\x1b" and data[i + 1:i + 2] in (b"[", b"O") and i + 2 < len(data) else 1
        keys.append(data[i:i + n])
        i += n
    return keys


class Top:
    """The view's state: the last snapshot, the selected run, the open log, the message line."""

    def __init__(self, targets: list, interval: float, which: dict | None = None):
        self.targets = targets
        self.which = which or {}
        self.interval = interval
        self.snapshot: list[dict] = []
        self.taken_at: float | None = None
        self.history: dict = {}  # (target, run, attempt, metric) -> values seen by past refreshes
        self.selected: tuple[str, str] | None = None
        self.log_for: tuple[str, str] | None = None
        self.log_lines: list[str] | str = []
        self.confirm: tuple[str, str] | None = None
        self.message = ""
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.refresh_now = threading.Event()
        self.wake_r, self.wake_w = os.pipe()
        self.stops: list[threading.Thread] = []  # stops asked for: quitting waits for their answer

    # --- the background work

    def _wake(self) -> None:
        try:
            os.write(self.wake_w, b".")
        except OSError:
            pass

    def _fetch_loop(self) -> None:
        import concurrent.futures
        pool = concurrent.futures.ThreadPoolExecutor(max_workers=min(8, len(self.targets)))
        while not self.done.is_set():
            try:
                parts = list(pool.map(lambda t: collect_target(t, self.which), self.targets))
            except Exception as e:  # a bug here must not freeze the view: say it, try again
                with self.lock:
                    self.message = f"refresh failed: {type(e).__name__}: {e}"
                self._wake()
                self.refresh_now.wait(self.interval)
                continue
            with self.lock:
                self.snapshot, self.taken_at = parts, time.time()
                self._remember(parts)
                self._keep_selection()
                log_for = self.log_for
            if log_for:
                self._read_log(log_for)
            self._wake()
            self.refresh_now.wait(self.interval)
            self.refresh_now.clear()

    def _remember(self, parts: list[dict]) -> None:
        from ..views.health import as_number
        for part in parts:
            for r in part["runs"]:
                h = r.get("health") or {}
                for m in h.get("main_metrics") or []:
                    v = as_number((h.get("metrics") or {}).get(m))
                    if v is not None:
                        seen = self.history.setdefault((part["target"], r["name"], r.get("attempt"), m), [])
                        seen.append(v)
                        del seen[:-60]

    def _read_log(self, key: tuple[str, str]) -> None:
        from .. import api
        target = self._target(key[0])
        try:
            lines = api.logs(target, key[1], lines=LOG_LINES).get("lines") or []
        except RunwardError as e:
            lines = f"could not read the log: {e.message}"
        with self.lock:
            if self.log_for == key:
                self.log_lines = lines
        self._wake()

    def _stop(self, key: tuple[str, str]) -> None:
        from .. import api
        from ..views.render import render_stop
        try:
            res = api.stop(self._target(key[0]), key[1])
            text = render_stop(res).splitlines()[0]
        except RunwardError as e:
            text = f"stop {key[1]}: {e.message}" + (f" ({e.hint})" if e.hint else "")
        with self.lock:
            self.message = text
        self.refresh_now.set()
        self._wake()

    def _target(self, display: str):
        return next(t for t in self.targets if t.display() == display)

    # --- selection and keys

    def rows(self) -> list[tuple[str, dict]]:
        return [(part["target"], r) for part in self.snapshot for r in part["runs"]]

    def _keep_selection(self) -> None:
        keys = [(t, r["name"]) for t, r in self.rows()]
        if self.selected not in keys:
            self.selected = keys[0] if keys else None

    def _move(self, step: int) -> None:
        keys = [(t, r["name"]) for t, r in self.rows()]
        if keys:
            i = keys.index(self.selected) if self.selected in keys else 0
            self.selected = keys[max(0, min(len(keys) - 1, i + step))]

    def key(self, data: bytes) -> bool:
        """Act on one read from the keyboard; False to quit."""
        with self.lock:
            if self.confirm is not None:
                key, self.confirm = self.confirm, None
                if data[:1] in (b"y", b"Y"):
                    self.message = f"stopping {key[1]} on {key[0]} ..."
                    worker = threading.Thread(target=self._stop, args=(key,), daemon=True)
                    self.stops.append(worker)
                    worker.start()
                else:
                    self.message = f"not stopped: {key[1]}"
                return True
            if data[:1] in (b"q", b"Q"):
                return False
            if data in (b"\x1b[A", b"\x1bOA", b"k"):
                self._move(-1)
            elif data in (b"\x1b[B", b"\x1bOB", b"j"):
                self._move(1)
            elif data == b"\x1b":
                self.log_for = None
            elif data[:1] == b"l" and self.selected:
                if self.log_for == self.selected:
                    self.log_for = None
                else:
                    self.log_for, self.log_lines = self.selected, "reading the log ..."
                    threading.Thread(target=self._read_log, args=(self.selected,), daemon=True).start()
            elif data[:1] == b"s" and self.selected:
                self.confirm = self.selected
                self.message = f"stop {self.selected[1]} on {self.selected[0]}? y/n"
        return True

    # --- the loop

    def loop(self) -> int:
        import select
        import termios
        import tty
        from rich.console import Console
        from rich.live import Live
        from . import _topview
        fd = sys.stdin.fileno()
        saved = termios.tcgetattr(fd)
        fetcher = threading.Thread(target=self._fetch_loop, daemon=True)
        fetcher.start()
        try:
            tty.setcbreak(fd)  # keys one at a time, unechoed; Ctrl-C still interrupts
            with Live(console=Console(), screen=True, auto_refresh=False) as live:
                while True:
                    with self.lock:
                        live.update(_topview.view(self), refresh=True)
                    ready, _, _ = select.select([fd, self.wake_r], [], [])  # a key, or a worker done
                    if self.wake_r in ready:
                        os.read(self.wake_r, 4096)
                    if fd in ready:
                        data = os.read(fd, 64)
                        if not data or not all(self.key(k) for k in split_keys(data)):
                            break
        except KeyboardInterrupt:
            return 130
        finally:
            self.done.set()
            self.refresh_now.set()
            termios.tcsetattr(fd, termios.TCSADRAIN, saved)
            self._finish(fetcher)
        return EXIT_OK

    def _finish(self, fetcher: threading.Thread) -> None:
        """The CLI leaves without the interpreter's teardown (launch.entry), so a call still in
        flight would be cut off: a stop asked for is waited for and its answer printed; a
        refresh is given a few seconds (its agent call may hang on a dead host)."""
        if any(w.is_alive() for w in self.stops):
            print("waiting for the stop asked for to finish ...", flush=True)
            for worker in self.stops:
                worker.join()
            print(self.message, flush=True)
        fetcher.join(5.0)
