"""A run's defaults, each said once, read by both sides: the agent where a request or an
attempt's record leaves a value out, the CLI side (options.py) for the help, the Python API and
the request it sends. Stdlib only and nothing imported: the CLI's `--help` path loads it."""

SETTLE_S = 3.0          # alive this long counts as started
GRACE_S = 30.0          # seconds after the stop signal before KILL: ML jobs need time to checkpoint
READY_TIMEOUT_S = 600.0  # with ready: how long to wait for the ready line
STOP_SIGNAL = "TERM"    # what a stop sends first (INT is torchrun's orderly stop)
