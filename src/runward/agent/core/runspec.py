"""A run's spec as both sides say it: the keys of a start request that the attempt's record
keeps (its "spec", which restart starts from), and the defaults the agent applies where a
request or a record leaves a value out. The CLI side reads it too (spec/options.py's help, api.start's
keywords, spec/restartspec.py's keys). Stdlib only and nothing imported: the CLI's `--help` path loads it."""

SPEC_KEYS = ("argv", "sh", "cwd", "env", "env_from", "env_overrides", "log", "settle", "ready", "ready_timeout",
             "gpus", "wait_gpus_free", "stop_signal", "grace", "files", "hash_files", "log_max", "log_keep",
             "multinode", "supervise", "stall")

SETTLE_S = 3.0          # alive this long counts as started
GRACE_S = 30.0          # seconds after the stop signal before KILL: ML jobs need time to checkpoint
READY_TIMEOUT_S = 600.0  # with ready: how long to wait for the ready line
STOP_SIGNAL = "TERM"    # what a stop sends first (INT is torchrun's orderly stop)

# each default by the option's name, for the CLI side's request (api.start) and the agent's reader alike
DEFAULTS = {"settle": SETTLE_S, "grace": GRACE_S, "ready_timeout": READY_TIMEOUT_S, "stop_signal": STOP_SIGNAL}
