"""runward restart NAME: verified stop, [deploy,] verified start with the run's definition
(runward.toml's when it has the run, else the last attempt's spec), and what changed."""

from __future__ import annotations

from ..spec import options
from ._common import old_spelling, show, signal_arg


def add_arguments(p) -> None:
    p.add_argument("name", nargs="?", help="the run (or --all)")
    p.add_argument("--all", action="store_true",
                   help="every run in runward.toml, each on its own target, in parallel; exit code: the worst run's")
    for name in options.TAKES["restart"]:
        options.add(p, name, "restart")
    old_spelling(p, "--signal", "stop_signal", type=signal_arg)
    p.add_argument("--gpu-release-timeout", type=float, metavar="SECONDS",
                   help="a run with GPUs: how long the stop waits for their memory to be released (default: the "
                        "run's gpu_release_timeout, else 60); "
                        "still held then, the new attempt is blocked (exit 5) and starts by itself once they are")
    from .stop import add_checkpoint_args
    add_checkpoint_args(p, "stop, and the new attempt's {last_checkpoint} is that checkpoint")
    how = p.add_mutually_exclusive_group()
    options.add(how, "deploy")
    options.add(how, "no_deploy")


def run(args, out) -> int:
    """The flags' words made values here, at the edge: --env as NAME -> value, `K=` typed (not
    read from a file) as None, which unsets K; --deploy / --no-deploy / neither as True / False / None."""
    from ..spec.inputs import read_env
    from ..operations.restart import RestartOptions, restart
    env, env_from = read_env(args.env, args.env_file)
    env = {k: None if v == "" and k not in env_from else v for k, v in env.items()}
    deploy = True if args.deploy else False if args.no_deploy else None
    opts = RestartOptions.from_args(args, env=env or None, env_from=env_from, deploy=deploy)
    # a deploy's per-file progress on stderr is for a person only (never with --json)
    return show(out, restart(opts, progress=not out.json))
