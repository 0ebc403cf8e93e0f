"""runward start NAME [--on TARGET] ... -- COMMAND [ARG]...: verified alive after settling."""

from __future__ import annotations

from .. import options
from ._common import old_spelling, show

# the supervision policy's flags (supervision.py reads them, runward.toml's keys of the same names too)
POLICY = ("restart", "max_restarts", "restart_window", "backoff", "min_uptime", "restart_exit_codes",
          "no_restart_exit_codes", "notify", "checkpoint", "checkpoint_marker", "checkpoint_saved", "max_no_progress",
          "gpu_release_timeout", "resume_default")


def add_arguments(p) -> None:
    p.add_argument("name", nargs="?", help="the run (or --all)")
    p.add_argument("--all", action="store_true",
                   help="every run in runward.toml, each on its own target, in parallel; exit code: the worst run's")
    for name in ("env", "env_file", "cwd", "log", "settle", "ready", "ready_timeout", "replace", "replace_grace",
                 "lock_timeout", "gpus", "wait_gpus_free", "gpu_wait_timeout"):
        options.add(p, name)
    old_spelling(p, "--timeout", "gpu_wait_timeout", type=float)
    for name in ("log_max", "log_keep", "max_used", "stop_signal", "grace", "sh", "master_addr", "nproc_per_node",
                 "on_node_failure", *POLICY, "stall_after", "straggler_ratio"):
        options.add(p, name)
    p.add_argument("command", nargs="*", help="-- COMMAND [ARG]... (everything after --)")


def run(args, out) -> int:
    from ..operations.start import StartOptions, start
    return show(out, start(StartOptions.from_args(args)))
