"""One function per verb: turn parsed arguments into an operation call and render it.
Imported only once a command runs (cli.py stays light for --help)."""

from __future__ import annotations

import sys

from . import config as _config
from . import api as ops
from .errors import BadInput, EXIT_OK, RunwardError
from .render import render_start, render_status, render_stop


def _cfg(args):
    return _config.load(getattr(args, "config", None))


def _target(args, cfg, run: str | None = None):
    import os
    if cfg.ssh_config and not os.environ.get("RUNWARD_SSH_CONFIG"):
        os.environ["RUNWARD_SSH_CONFIG"] = cfg.ssh_config
    return cfg.target(getattr(args, "on", None), run)


def _gpus(text: str | list | None) -> list[int] | None:
    if text is None:
        return None
    if isinstance(text, list):
        return [int(g) for g in text]
    try:
        gpus = [int(g) for g in str(text).split(",") if g.strip() != ""]
    except ValueError:
        raise BadInput(f"invalid --gpus {text!r}", "give GPU indices like 0,1,2")
    if any(g < 0 for g in gpus):
        raise BadInput(f"invalid --gpus {text!r}", "GPU indices are >= 0")
    return gpus


def _emit(out, cmd: str, target, result: dict, text: str, code: int = EXIT_OK) -> int:
    out.doc({"ok": code == EXIT_OK, "command": cmd, "target": str(target), "result": result})
    out.say(text)
    return code


def start_kwargs_from_config(run: dict) -> dict:
    kw = {}
    if "command" in run:
        kw["argv"] = list(run["command"])
    if "sh" in run:
        kw["sh"] = run["sh"]
    for k in ("cwd", "env", "log", "settle", "ready", "ready_timeout", "stop_signal", "grace"):
        if k in run:
            kw[k] = run[k]
    if "gpus" in run:
        kw["gpus"] = _gpus(run["gpus"])
    if run.get("wait_gpus_free"):   # true, or {timeout = S, max_used_mib = MiB}
        w = run["wait_gpus_free"]
        kw["wait_gpus_free"] = {"timeout": 300.0, "max_used_mib": 1024.0, **(w if isinstance(w, dict) else {})}
    if run.get("files"):
        kw["hash_files"] = [f.split(":", 1)[1] for f in run["files"] if ":" in f]
        kw["files"] = list(run["files"])
    return kw


def cmd_start(args, out) -> int:
    cfg = _cfg(args)
    target = _target(args, cfg, args.name)
    kw = start_kwargs_from_config(cfg.runs.get(args.name, {}))
    command = list(args.command or [])
    if command and command[0] == "--":
        command = command[1:]
    if command and args.sh is not None:
        raise BadInput("both --sh and a command after -- were given", "use one of them")
    if command:
        kw["argv"] = command
        kw.pop("sh", None)
    if args.sh is not None:
        kw["sh"], kw["argv"] = args.sh, None
    kw["env"] = {**kw.get("env", {}), **ops.parse_env(args.env)}
    for opt, key in (("cwd", "cwd"), ("log", "log"), ("settle", "settle"), ("ready", "ready"),
                     ("ready_timeout", "ready_timeout"), ("stop_signal", "stop_signal"), ("grace", "grace")):
        v = getattr(args, opt)
        if v is not None:
            kw[key] = v
    if args.gpus is not None:
        kw["gpus"] = _gpus(args.gpus)
    if args.wait_gpus_free:
        if kw.get("gpus") is None:
            raise BadInput("--wait-gpus-free needs --gpus", "e.g. --gpus 0,1 --wait-gpus-free")
        kw["wait_gpus_free"] = {"timeout": args.timeout if args.timeout is not None else 300.0,
                                "max_used_mib": args.max_used if args.max_used is not None else 1024.0}
    kw["replace"] = args.replace
    if not kw.get("argv") and kw.get("sh") is None:
        raise BadInput(f"no command for run {args.name!r}",
                       f"runward start {args.name} -- COMMAND [ARG]..., --sh 'LINE', or define [runs.{args.name}] in runward.toml")
    res = ops.start(target, args.name, **kw)
    return _emit(out, "start", target, res, render_start(res))


def cmd_stop(args, out) -> int:
    cfg = _cfg(args)
    target = _target(args, cfg, args.name)
    res = ops.stop(target, args.name, grace=args.grace, signal=args.signal, gpu_timeout=args.gpu_timeout)
    return _emit(out, "stop", target, res, render_stop(res))


def cmd_restart(args, out) -> int:
    cfg = _cfg(args)
    target = _target(args, cfg, args.name)
    overrides = {"settle": args.settle, "ready": args.ready}
    env = ops.parse_env(args.env)
    deploy = None
    if args.deploy:
        from . import files as _files
        run = cfg.runs.get(args.name)
        if not run or not run.get("files"):
            raise BadInput(f"--deploy: run {args.name!r} has no files in runward.toml",
                           f"add files = [\"LOCAL:REMOTE\"] to [runs.{args.name}]")
        deploy = lambda: _files.push(target, run["files"], run=args.name, progress=not out.json,  # noqa: E731
                                     base=_cfg_dir(cfg))
    res = ops.restart(target, args.name, overrides={**overrides, "env": env or None, "reuse_env": True},
                      grace=args.grace, signal=args.signal, deploy=deploy)
    st = res["steps"][-1]["result"]
    text = "\n".join([render_stop(res["steps"][0]["result"]),
                      *(["deployed: " + ", ".join(f["remote"] for f in s["result"].get("files", []))
                         for s in res["steps"] if s["step"] == "deploy"]),
                      render_start(st)])
    return _emit(out, "restart", target, res, text)


def _on_all(cfg, out, command: str, op, render, *, failed, exit_code) -> int:
    """`COMMAND --all`: op on every named target of runward.toml at once, one section each;
    a target's failure is labelled failed(error); the exit code is exit_code(the failed
    results, all results)."""
    targets = cfg.named_targets()
    if not targets:
        raise BadInput("--all: no [targets] in runward.toml", "define named targets, or use --on")
    results = ops.fan_out(targets, op)
    text = "\n".join(
        f"== {r['target']}\n" + (render(r) if r["ok"] else f"  {failed(r['error'])}: {r['error']['message']}" + (
            f"\n  hint: {r['error']['hint']}" if r["error"].get("hint") else ""))
        for r in results)
    failures = [r for r in results if not r["ok"]]
    code = exit_code(failures, results) if failures else EXIT_OK
    out.doc({"ok": code == EXIT_OK, "command": command, "targets": results})
    out.say(text)
    return code


def cmd_status(args, out) -> int:
    cfg = _cfg(args)
    if args.all:
        names = [args.name] if args.name else None
        return _on_all(cfg, out, "status", lambda t: ops.status(t, names),
                       lambda r: render_status(r["result"], r["target"]), failed=_status_failed,
                       exit_code=_status_all_code)
    target = _target(args, cfg, args.name)
    res = ops.status(target, [args.name] if args.name else None)
    run = cfg.runs.get(args.name) if args.name else None
    if run and run.get("files") and res.get("runs"):
        from . import files as _files
        d = _files.local_drift(res["runs"][0], run["files"], base=_cfg_dir(cfg))
        if d:
            res["runs"][0]["local_drift"] = d
    return _emit(out, "status", target, res, render_status(res, str(target)))


def _status_failed(error: dict) -> str:
    if error["type"] == "RunNotFound":
        return "not here"
    return "unreachable" if error.get("exit_code") == 3 else "error"


def _status_all_code(failures: list[dict], results: list[dict]) -> int:
    """`status NAME --all` asks where NAME is: a target without it is an answer, not a
    failure, unless no target has it (4, as on one target). Any other failure decides."""
    others = [r["error"].get("exit_code", 1) for r in failures if r["error"]["type"] != "RunNotFound"]
    if others:
        return max(others)
    return 4 if len(failures) == len(results) else EXIT_OK


def _cfg_dir(cfg) -> str | None:
    import os
    return os.path.dirname(cfg.path) if cfg.path else None


def cmd_exec(args, out) -> int:
    cfg = _cfg(args)
    target = _target(args, cfg)
    command = list(args.command or [])
    if command and args.sh is not None:
        raise BadInput("both --sh and a command after -- were given", "use one of them")
    if not command and args.sh is None:
        raise BadInput("no command given", "runward exec --on TARGET -- COMMAND [ARG]..., or --sh 'LINE'")
    lint_findings = []
    if args.sh is not None:
        from . import lint as _lint
        lint_findings = _lint.lint(args.sh)
        errors = [f for f in lint_findings if f.severity == "error"]
        if errors and not args.force:
            raise BadInput("refusing to run: the linter found " + "; ".join(f.message for f in errors),
                           "fix the command (see `runward lint`), or pass --force", details={
                               "findings": [f.to_dict() for f in lint_findings]})
    res = ops.exec_(target, argv=command or None, sh=args.sh, cwd=args.cwd, env=ops.parse_env(args.env),
                    timeout=args.timeout)
    res["lint"] = [f.to_dict() for f in lint_findings]
    ok = res["code"] == 0
    out.doc({"ok": ok, "command": "exec", "target": str(target), "result": res})
    if not out.json:
        sys.stdout.write(res["stdout"])
        sys.stderr.write(res["stderr"])
        if not ok:
            what = f"killed by {res['signal']}" if res.get("signal") else f"exit code {res['code']}"
            print(f"runward exec: {what} after {res['duration_s']:.2f}s on {target}"
                  + (f"\n  diagnosis: {res['diagnosis']}" if res.get("diagnosis") else ""), file=sys.stderr)
    return 0 if ok else 1


def cmd_push(args, out) -> int:
    from . import files as _files
    cfg = _cfg(args)
    target = _target(args, cfg)
    res = _files.push(target, args.specs, progress=not out.json)
    text = "\n".join(f"pushed {f.get('local', '?')} -> {target}:{f['remote']}  sha256 {f['sha256'][:12]} verified"
                     for f in res["files"] if f.get("sha256"))
    return _emit(out, "push", target, res, text or "nothing to push")


def cmd_deploy(args, out) -> int:
    from . import files as _files
    cfg = _cfg(args)
    target = _target(args, cfg, args.name)
    run = cfg.runs.get(args.name)
    if not run or not run.get("files"):
        raise BadInput(f"run {args.name!r} has no files in runward.toml",
                       f"add files = [\"LOCAL:REMOTE\"] to [runs.{args.name}]")
    res = _files.push(target, run["files"], run=args.name, progress=not out.json, base=_cfg_dir(cfg))
    text = "\n".join(f"deployed {f.get('local', '?')} -> {target}:{f['remote']}  sha256 {f['sha256'][:12]} verified"
                     for f in res["files"] if f.get("sha256"))
    return _emit(out, "deploy", target, res, text)


def cmd_gpus(args, out) -> int:
    from .render import render_gpus
    cfg = _cfg(args)
    if args.all:
        return _on_all(cfg, out, "gpus", lambda t: ops.gpus(t, mapping=args.map),
                       lambda r: render_gpus(r["result"]), failed=lambda error: "error",
                       exit_code=lambda failures, _: max(r["error"].get("exit_code", 1) for r in failures))
    target = _target(args, cfg)
    res = ops.gpus(target, mapping=args.map)
    return _emit(out, "gpus", target, res, render_gpus(res))


def cmd_doctor(args, out) -> int:
    cfg = _cfg(args)
    target = _target(args, cfg)
    res = ops.doctor(target)
    from .render import render_doctor
    code = 0 if res["ok"] else 3
    out.doc({"ok": res["ok"], "command": "doctor", "target": str(target), "result": res})
    out.say(render_doctor(res))
    return code


def cmd_logs(args, out) -> int:
    cfg = _cfg(args)
    target = _target(args, cfg, args.name)
    if args.follow:
        events = []

        def on_line(ev: dict) -> None:
            if "line" in ev:
                if out.json:
                    events.append(ev["line"])
                else:
                    print(ev["line"], flush=True)
            elif "switch" in ev and not out.json:
                print(f"--- runward: log switched to {ev['switch']}", file=sys.stderr, flush=True)
        res = ops.logs(target, args.name, lines=args.n, follow=True, on_line=on_line, for_s=args.for_s)
        res["lines"] = events
        out.doc({"ok": True, "command": "logs", "target": str(target), "result": res})
        return EXIT_OK
    res = ops.logs(target, args.name, lines=args.n)
    return _emit(out, "logs", target, res, "\n".join(res["lines"]))


def cmd_lint(args, out) -> int:
    from . import lint as _lint
    text = sys.stdin.read() if args.command_line == "-" else args.command_line
    findings = _lint.lint(text, assume_shell=not args.interactive)
    code = 1 if any(f.severity == "error" for f in findings) else 0
    out.doc({"ok": code == 0, "command": "lint", "result": {"command": text,
                                                              "findings": [f.to_dict() for f in findings]}})
    if not out.json:
        out.say(_lint.format_findings(text, findings) if findings else "no findings")
    return code


def cmd_demo(args, out) -> int:
    from . import demo
    return demo.run(out, keep=args.keep)


def cmd_ps(args, out) -> int:
    cfg = _cfg(args)
    target = _target(args, cfg)
    res = ops.ps(target, args.pattern)
    from .render import render_procs
    return _emit(out, "ps", target, res, render_procs(res["processes"]) or f"no process matches {args.pattern!r}")


def cmd_kill(args, out) -> int:
    cfg = _cfg(args)
    target = _target(args, cfg)
    res = ops.kill(target, args.pattern, signal=args.signal, grace=args.grace, tree=args.tree, yes=args.yes,
                   max_matches=args.max)
    from .render import render_procs
    if res.get("dry_run"):
        text = (f"would send {res['signal']} to {len(res['matched'])} process(es) (dry run; add --yes):\n"
                + render_procs(res["matched"])) if res["matched"] else f"no process matches {args.pattern!r}"
    elif not res["processes"]:
        text = f"no process matches {args.pattern!r}"
    else:
        text = f"killed {len(res['processes'])} process(es), verified dead:\n" + "\n".join(
            f"  pid {p['pid']:>7}  {p['fate']:<20} {p.get('cmd', '')[:90]}" for p in res["processes"])
    return _emit(out, "kill", target, res, text)


def cmd_watch(args, out) -> int:
    cfg = _cfg(args)
    target = _target(args, cfg, args.name)
    rules = ops.health_rules(cfg.runs.get(args.name), mins=ops.parse_limits(args.min, "--min"),
                             maxs=ops.parse_limits(args.max, "--max"), stall=args.stall, drop=args.drop)
    from .health import format_alert

    def on_points(ev: dict) -> None:
        if not out.json and out.tty:
            pts = ev.get("points") or []
            if pts:
                m = pts[-1].get("metrics", {})
                print("  " + "  ".join(f"{k}={v}" for k, v in list(m.items())[:6]), flush=True)
    res = ops.watch(target, args.name, for_s=args.for_s, rules=rules, on_points=on_points)
    if res["healthy"]:
        text = (f"{args.name}: healthy for {res['watched_s']:.0f}s"
                + (f"; {res['throughput_metric']} last {res['metrics'].get(res['throughput_metric'])}"
                   if res.get("throughput_metric") else ""))
        return _emit(out, "watch", target, res, text)
    text = "\n".join(f"ALERT {format_alert(a)}" for a in res["alerts"])
    out.doc({"ok": False, "command": "watch", "target": str(target), "result": res,
             "error": {"type": "Alert", "message": res["alert"].get("detail", res["alert"]["kind"]),
                       "exit_code": 1}})
    if not out.json:
        print(text, file=sys.stderr)
    return 1


def cmd_plot(args, out) -> int:
    cfg = _cfg(args)
    target = _target(args, cfg, args.name)
    res = ops.health(target, args.name, ops.health_rules(cfg.runs.get(args.name)), points=True)
    from . import health as _health
    try:
        path = _health.plot(res["series"], res["all_alerts"], args.metric, args.output, x=args.x)
    except ImportError as e:
        raise BadInput(str(e), "pip install matplotlib (or: pip install 'runward[plot]')")
    except ValueError as e:
        raise BadInput(str(e), "check --metric against the metrics in `runward status NAME --json`")
    res = {"name": args.name, "output": str(path or args.output), "points": len(res["series"]),
           "alerts": len(res["all_alerts"])}
    return _emit(out, "plot", target, res, f"wrote {res['output']} ({res['points']} points, {res['alerts']} alerts)")
