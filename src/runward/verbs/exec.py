"""runward exec --on TARGET -- COMMAND...: its exit code or signal, output, and a diagnosis. runward exits
with the command's own code (128+N for signal N), as ssh and docker exec do."""

from __future__ import annotations

import sys

from ..errors import BadInput
from ._common import load_config, target_of

# Ctrl-C (cli.main): the command runs in a session of its own on the target, which neither a
# terminal's Ctrl-C nor the end of our agent or ssh reaches (checked: it ran on after "interrupted")
INTERRUPTED = ("interrupted: the command may still be running on the target (it has a session of its "
               "own, and runward does not end it); find it with `runward ps PATTERN --on TARGET`")


def add_arguments(p) -> None:
    p.add_argument("--sh", metavar="STRING", help="one shell command line (linted first)")
    p.add_argument("--force", action="store_true", help="run --sh even when the linter finds an error")
    p.add_argument("--cwd", metavar="DIR", help="working directory on the target (default: the target user's home)")
    p.add_argument("--env", action="append", metavar="K=V|NAME",
                   help="environment entry (repeatable); a bare NAME passes NAME from this shell's environment")
    p.add_argument("--timeout", type=float, metavar="SECONDS", help="kill the command after this long (default: none)")
    p.add_argument("command", nargs="*", help="-- COMMAND [ARG]...")


def run(args, out) -> int:
    from .. import api
    cfg = load_config(args)
    target = target_of(args, cfg)
    command = list(args.command or [])
    if command and args.sh is not None:
        raise BadInput("both --sh and a command after -- were given", "use one of them")
    if not command and args.sh is None:
        raise BadInput("no command given", "runward exec --on TARGET -- COMMAND [ARG]..., or --sh 'LINE'")
    lint_findings = _lint_first(args) if args.sh is not None else []
    res = api.exec_(target, argv=command or None, sh=args.sh, cwd=args.cwd, env=api.parse_env(args.env),
                    timeout=args.timeout)
    res["lint"] = [f.to_dict() for f in lint_findings]
    ok = res["code"] == 0
    res["exit"] = exit_code(res)
    out.doc({"ok": ok, "command": "exec", "target": str(target), "result": res})
    if not out.json:
        sys.stdout.write(res["stdout"])
        sys.stderr.write(res["stderr"])
        if not ok:
            what = f"killed by {res['signal']}" if res.get("signal") else f"exit code {res['code']}"
            print(f"runward exec: {what} after {res['duration_s']:.2f}s on {target}"
                  + (f"\n  diagnosis: {res['diagnosis']}" if res.get("diagnosis") else ""), file=sys.stderr)
    return res["exit"]


def exit_code(res: dict) -> int:
    """The command's own exit code, as ssh and docker exec pass it on: 128+N for a death by
    signal N (as a shell says it), 124 for our --timeout (as timeout(1) says it). With --json,
    "error" in the document means runward failed; "result.exit" is the command's."""
    if res.get("timed_out"):
        return 124
    if res.get("signal"):
        import signal
        try:
            return 128 + signal.Signals[res["signal"]].value
        except KeyError:
            return 1  # a signal this machine has no number for: failed, and said so above
    return int(res["code"] or 0) & 0xFF


def _lint_first(args) -> list:
    """The linter's findings on --sh; an error refuses the run unless --force."""
    from .. import lint as _lint
    findings = _lint.lint(args.sh)
    errors = [f for f in findings if f.severity == "error"]
    if errors and not args.force:
        raise BadInput("refusing to run: the linter found " + "; ".join(f.message for f in errors),
                       "fix the command (see `runward lint`), or pass --force", details={
                           "findings": [f.to_dict() for f in findings]})
    return findings
