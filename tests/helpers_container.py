"""The testbed's container image and podman options, for the tests that make containers of their
own."""

from __future__ import annotations


IMAGE = "localhost/runward-testbed:bookworm"
OPTS = ["--network", "none", "--ulimit", "nofile=1024:4096", "--ulimit", "nproc=4096:4096",
        "--label", "runward-testbed=1"]  # scripts/testbed's RUN_OPTS, minus --init
