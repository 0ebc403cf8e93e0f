"""runward agent: the side that runs where the job lives.

A stdlib-only package (Python >= 3.8, Linux), shipped through the hop chain as one blob and
run by a fixed bootstrap (boot.py); on the target it is the top-level package
"runward_agent", in the source tree runward.agent. The request travels on stdin, never in
argv, so no process we start ever carries a run name or a pattern in its command line (the
`pkill -f` self-match; docs/protocol.md).

This module imports nothing: the CLI imports agent.boot and agent.logmetrics without paying
for the rest.
"""
