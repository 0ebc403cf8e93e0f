"""What `runward` runs first: the console script (runward.launch:entry) and `python -m
runward`. It runs cli.main, then leaves without the interpreter's teardown."""

from __future__ import annotations

import os
import sys


def entry() -> None:
    """main(), then out without the interpreter's teardown, which frees every module's
    objects one by one (6-7 ms, a fifth of a warm status). Output is flushed first, and
    every thread and child the CLI starts is done with by the time main() returns. An
    exception or a SystemExit (argparse's errors, --help) leaves the ordinary way."""
    from .cli import exit_on_closed_output, main, output_closed
    code = main(sys.argv[1:])
    try:
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:  # None: started with that descriptor closed
                stream.flush()
    except BrokenPipeError:
        if output_closed():  # `runward status | head -1`: quietly, as git (cli.main)
            exit_on_closed_output()
        sys.exit(code)
    except OSError:  # let the interpreter report it as it always does
        sys.exit(code)
    os._exit(code)
