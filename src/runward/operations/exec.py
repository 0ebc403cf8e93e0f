"""exec: run a command on a target (argv, or one shell line, linted first): its exit code or
signal, output, and a diagnosis. The exit code is the command's own (128+N for signal N), as
ssh and docker exec pass it on."""

from __future__ import annotations

from ..errors import BadInput
from . import Outcome, Targeted
from .common import load_config, target_of


class ExecOptions(Targeted):
    """What `runward exec` takes (verbs/exec.py's flags). Its --cwd means the one-off command's
    directory, not a run's (tests/test_options_agree.py's ANOTHER_MEANING); its value is checked
    as the declared cwd's kind (a non-empty string), as every declared field is."""
    sh: str | None = None
    force: bool = False
    cwd: str | None = None
    env: dict | None = None  # NAME -> value
    timeout: float | None = None
    command: list = []


def exec(opts: ExecOptions) -> Outcome:  # noqa: A001 - the verb's name, as runward.exec's
    """The Outcome's text is what runward itself says of a failed command (for stderr); the
    command's own output is the result's stdout and stderr, which the CLI passes on as they are."""
    from .. import api
    cfg = load_config(opts)
    target = target_of(opts, cfg)
    command = list(opts.command or [])
    if command and opts.sh is not None:
        raise BadInput("both --sh and a command after -- were given", "use one of them")
    if not command and opts.sh is None:
        raise BadInput("no command given", "runward exec --on TARGET -- COMMAND [ARG]..., or --sh 'LINE'")
    lint_findings = _lint_first(opts) if opts.sh is not None else []
    res = api.exec_(target, argv=command or None, sh=opts.sh, cwd=opts.cwd, env=dict(opts.env or {}) or None,
                    timeout=opts.timeout)
    res["lint"] = [f.to_dict() for f in lint_findings]
    ok = res["code"] == 0
    res["exit"] = exit_code(res)
    return Outcome("exec", res["exit"], {"ok": ok, "command": "exec", "target": str(target), "result": res},
                   lambda: "" if ok else _failure(res, target))


def _failure(res: dict, target) -> str:
    what = f"killed by {res['signal']}" if res.get("signal") else f"exit code {res['code']}"
    return (f"runward exec: {what} after {res['duration_s']:.2f}s on {target}"
            + (f"\n  diagnosis: {res['diagnosis']}" if res.get("diagnosis") else ""))


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


def _lint_first(opts) -> list:
    """The linter's findings on --sh; an error refuses the run unless --force."""
    from .. import lint as _lint
    findings = _lint.lint(opts.sh)
    errors = [f for f in findings if f.severity == "error"]
    if errors and not opts.force:
        raise BadInput("refusing to run: the linter found " + "; ".join(f.message for f in errors),
                       "fix the command (see `runward lint`), or pass --force", details={
                           "findings": [f.to_dict() for f in findings]})
    return findings
