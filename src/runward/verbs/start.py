"""runward start NAME [--on TARGET] ... -- COMMAND [ARG]...: verified alive after settling."""

from __future__ import annotations

from ..spec import options
from ._common import old_spelling, show


def add_arguments(p) -> None:
    p.add_argument("name", nargs="?", help="the run (or --all)")
    p.add_argument("--all", action="store_true",
                   help="every run in runward.toml, each on its own target, in parallel; exit code: the worst run's")
    for name in options.TAKES["start"]:
        options.add(p, name)
    old_spelling(p, "--timeout", "gpu_wait_timeout", type=float)
    p.add_argument("command", nargs="*", help="-- COMMAND [ARG]... (everything after --)")


def run(args, out) -> int:
    """The flags' words made values here, at the edge: --env K=V|NAME and --env-file PATH as
    NAME -> value (with where each untyped one came from), --gpus 0,1 as indices, --log-max
    SIZE as bytes, the restart policy's durations (1h, 10s) as seconds."""
    from ..spec.inputs import parse_duration, parse_size, read_env
    from ..operations.common import gpu_list
    from ..operations.start import DURATIONS, StartOptions, start
    env, env_from = read_env(args.env, args.env_file)
    log_max = None if args.log_max is None else parse_size(args.log_max)
    durations = {k: parse_duration(getattr(args, k), k) for k in DURATIONS}
    return show(out, start(StartOptions.from_args(args, env=env, env_from=env_from, gpus=gpu_list(args.gpus),
                                                  log_max=log_max, **durations)))
