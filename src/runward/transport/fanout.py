"""Many targets or runs at once: a bounded pool of threads that keeps the order of its items,
turns each one's RunwardError into that item's error, and is joined so that Ctrl-C waits for
every call to end (what each did is then known); and the one exit code of such rows.
Below api.py, multinode/ and operations/, which all fan out."""

from __future__ import annotations

from collections.abc import Callable

from ..errors import (EXIT_BAD_INPUT, EXIT_FAILED, EXIT_NO_SUCH_RUN, EXIT_NOT_VERIFIED, EXIT_OK, EXIT_UNREACHABLE,
                      RunwardError)
from ..targets import Target


FANOUT = 16  # hosts queried at once by --all

# `start/stop/restart --all` (and a multi-node run's nodes): the exit code is that of the
# worst row, worst first: done but not verified (something may be half done: a survivor,
# GPUs held, alive but not ready), unreachable (that run's state is unknown), failed
# (verified), refused as bad input (nothing done), no such run (nothing there). docs/cli.md,
# "Several runs at once".
ALL_RUNS_WORST_FIRST = (EXIT_NOT_VERIFIED, EXIT_UNREACHABLE, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_NO_SUCH_RUN)


def worst_code(results: list[dict]) -> int:
    """The exit code of several runs' (or nodes') rows: 0 when every one was verified, else
    the worst failure's code (ALL_RUNS_WORST_FIRST)."""
    codes = {r["error"].get("exit_code", EXIT_FAILED) for r in results if not r["ok"]}
    if not codes:
        return EXIT_OK
    return next((c for c in ALL_RUNS_WORST_FIRST if c in codes), max(codes))


def fan_out(targets: list[Target], fn: Callable[[Target], dict], limit: int = FANOUT) -> list[dict]:
    """Run fn on every target in parallel (bounded); one failing host never hides the others."""
    def one(t: Target) -> dict:
        try:
            return {"target": t.display(), "ok": True, "result": fn(t)}
        except RunwardError as e:
            return {"target": t.display(), "ok": False, "error": e.to_dict()}
    return parallel(one, targets, limit)


def fan_out_runs(runs: list[tuple[str, Target]], fn: Callable[[str, Target], dict],
                 limit: int = FANOUT) -> list[dict]:
    """fn(name, target) for every (run name, its target) in parallel (bounded), in the
    order given: {"name", "target", "ok", "result"} or {..., "ok": False, "error"} (with the
    error's "result" when it carries one); one failing run never hides the others."""
    def one(item: tuple[str, Target]) -> dict:
        name, t = item
        try:
            return {"name": name, "target": t.display(), "ok": True, "result": fn(name, t)}
        except RunwardError as e:
            return {"name": name, "target": t.display(), "ok": False, "error": e.to_dict(),
                    **({"result": e.result} if e.result is not None else {})}
    return parallel(one, runs, limit)


def parallel(fn: Callable, items: list, limit: int = FANOUT) -> list:
    """[fn(item) for item in items], at most LIMIT at once, in threads. Every item runs to
    its end, through a Ctrl-C too (raised here once all have ended: a start under way is
    seen to its end and can be rolled back); fn's own exception, if any, is raised then.
    Plain threads: concurrent.futures costs every multi-host call some 30 ms of imports."""
    import threading
    out: list = [None] * len(items)
    failed: list[BaseException] = []
    todo = iter(range(len(items)))
    lock = threading.Lock()

    def worker() -> None:
        while True:
            with lock:
                i = next(todo, None)
            if i is None:
                return
            try:
                out[i] = fn(items[i])
            except BaseException as e:  # raised again in the caller's thread
                failed.append(e)

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(max(1, min(limit, len(items))))]
    for t in threads:
        t.start()
    if join(threads):
        raise KeyboardInterrupt
    if failed:
        raise failed[0]
    return out


def join(threads: list) -> bool:
    """Wait for every thread to end, through Ctrl-C; whether one came."""
    interrupted = False
    for t in threads:
        while t.is_alive():
            try:
                t.join()
            except KeyboardInterrupt:
                interrupted = True
    return interrupted
