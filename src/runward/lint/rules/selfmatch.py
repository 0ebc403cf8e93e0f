"""Self-match: a kill or a listing whose pattern matches a process enclosing it.

`pkill -f P`, `killall P`, `kill $(pgrep -f P)`, `ps aux | grep P | xargs kill` and
`for p in $(pgrep -f P); do kill $p; done` are evaluated, with the tool's own regex flavour,
against the command line of every process alive around them (rules self-kill,
self-kill-fragile); `pgrep -f P` and `ps | grep P` against the same, and against their own
pipeline (self-match-list). The fix offered is `runward kill`/`runward ps`, and the bracket
trick (`[t]rain.py`) only after linting the line with it and seeing it work.
"""

from __future__ import annotations

from dataclasses import replace

from ..lexer import ParseError, Source, Word
from ..parse import Command, Pipeline, Script, argv_of, basename, parse, unwrap
from ..processes import HARMLESS_SIGNALS, SIGNAL_NAMES, Ctx, Proc, harmed, kill_signal, sees
from ..queries import Query, kill_consumer, killall_query, lister_at, loop_kill, pgrep_query
from ..regex import bracket_trick
from ..report import always_quote, command_text, display_argv, quote
from ..scan import KillEvent, Scan

WHY_SELF_KILL = (
    "pkill -f and pgrep -f match the regex against the whole command line of every process "
    "(/proc/PID/cmdline, NULs read as spaces) and skip only their own pid. A shell started "
    "with -c (by bash -c, by sshd for `ssh HOST CMD`, by an agent tool) keeps the whole "
    "script, this pattern included, in its argv, so it is signalled too: the commands after "
    "this one in that shell never run, its exit status is the signal's, and `|| true` cannot "
    "help (docs/from-shell.md, \"Stop, then start again, in one ssh call\").")
WHY_KILLALL = (
    "killall matches process names (the comm that `ps -o comm` shows, the basename of the "
    "program), and this name or regex matches the name of a process that encloses the "
    "command, so that process is signalled and whatever it was running stops with it.")
WHY_PS_GREP_KILL = (
    "ps lists every process with its whole command line and grep keeps the lines that match: "
    "the shell running this pipeline carries the pattern in its own command line, so its pid "
    "is in the list that kill receives, and the shell is killed along with the target "
    "(docs/from-shell.md, \"Kill by pattern\").")
WHY_FRAGILE = (
    "pkill -f skips only its own pid. Here the only shell whose command line matches "
    "replaces itself with this command (exec) because it is the only or last command of its "
    "-c string, so by the time pkill looks that shell is pkill. Add anything after it "
    "(`; nohup ...`, `&& echo done`, a redirection), run it under an older bash or dash, and "
    "the shell kills itself.")
WHY_WRAPPER = (
    "The shell you wrote execs this command, so it is not there to be signalled; but a "
    "program that runs your text through a shell of its own and keeps that shell alive (an "
    "agent tool's Bash, a CI step's script) has the whole text, this pattern included, in "
    "that shell's argv, and pkill -f skips only its own pid: that outer shell is signalled, "
    "and the tool reports a killed command.")
WHY_SELF_LIST = (
    "pgrep -f and `ps | grep` match against whole command lines, and a shell running this "
    "line carries the pattern in its own argv (as does the grep itself), so the output lists "
    "that shell: the check reports the job alive, or finds a pid to kill, when the job is not "
    "running at all.")


def kill_command(scan: Scan, words: list[Word], command: Command, ctx: Ctx) -> None:
    """`pkill ...` or `killall ...`: what it selects, against what encloses it."""
    read_query = pgrep_query if basename(words[0].value) == "pkill" else killall_query
    query, signal = read_query(words)
    if query is not None:
        evaluate(scan, query, ctx, signal=signal, span=command.span(),
                 text=command_text(words), words=words)


def kill_substitutions(scan: Scan, words: list[Word], command: Command, ctx: Ctx,
                       handled: set[int]) -> None:
    """`kill $(pgrep -f P)`, `kill \\`ps aux | grep P | awk ...\\``: the list is the kill."""
    signal = kill_signal(words[1:])
    for word in words[1:]:
        for sub in word.subs:
            listed_then_killed(scan, sub, signal, command.span(),
                               command_text(words), ctx, handled)


def loop_kills(scan: Scan, script: Script, idx: int, ctx: Ctx) -> set[int]:
    """`for p in $(pgrep -f P); do kill $p; done`: the substitution feeds a kill."""
    handled: set[int] = set()
    for command in script.pipelines[idx].commands:
        head = command.skipped
        if len(head) < 4 or head[0].value != "for" or head[2].value != "in":
            continue
        found = loop_kill(script, idx + 1, head[1].value)
        if found is None:
            continue
        signal, kill_words = found
        text = f"for {head[1].value} in ...; kill ... ${head[1].value}"
        for word in head[3:]:
            for sub in word.subs:
                listed_then_killed(scan, sub, signal, command.span(), text, ctx, handled)
    return handled


def listed_then_killed(scan: Scan, sub: Source, signal: int, span, text: str,
                       ctx: Ctx, handled: set[int]) -> None:
    """A substitution whose output a kill takes: a lister there is a kill."""
    try:
        script = parse(sub)
    except ParseError:
        return
    if len(script.pipelines) != 1:
        return
    progs = [unwrap(c.words) for c in script.pipelines[0].commands]
    found = lister_at(progs, 0)
    if found is None:
        return
    handled.add(id(sub))
    # The substitution runs in a subshell while this shell waits: this shell is alive.
    sub_ctx = replace(ctx.with_runner_state("alive"), depth=ctx.depth + 1)
    wrappers = [Proc(argv_of(w), ctx.domain, ctx.level, "wrapper", ctx.where)
                for w in progs[0][0]]
    evaluate(scan, found[0], sub_ctx, signal=signal, span=span, text=text, words=None,
             extra=wrappers)


def listers(scan: Scan, pipeline: Pipeline, ctx: Ctx, handled: set[int],
            script: Script | None = None, idx: int = 0) -> None:
    """pgrep -f P, `ps aux | grep P`, and either one piped to `xargs kill` or to
    `while read p; do kill $p; done`."""
    progs = [unwrap(c.words) for c in pipeline.commands]
    i = 0
    while i < len(progs):
        found = lister_at(progs, i)
        if found is None:
            i += 1
            continue
        query, end = found
        handled.update(id(c) for c in pipeline.commands[i:end])
        consumer = kill_consumer(progs, end, script, idx)
        last = consumer[0] if consumer else end - 1
        span = (pipeline.commands[i].span()[0], pipeline.commands[last].span()[1])
        text = " | ".join(command_text(c.words) for c in pipeline.commands[i:last + 1])
        own = [Proc(argv_of(w), ctx.domain, ctx.level, "wrapper", ctx.where)
               for w in progs[i][0]]
        siblings = [Proc(argv_of(c.words), ctx.domain, ctx.level, "sibling", ctx.where)
                    for k, c in enumerate(pipeline.commands)
                    if k != i or query.tool == "ps|grep"]
        evaluate(scan, query, ctx, signal=consumer[1] if consumer else None, span=span,
                 text=text, words=None, extra=own, siblings=siblings)
        i = end


def evaluate(scan: Scan, query: Query, ctx: Ctx, *, signal: int | None, span, text: str,
             words: list[Word] | None, extra: list[Proc] = (),
             siblings: list[Proc] = ()) -> None:
    """Which processes around the command the query selects, and what that does to them.

    A signal that harms a selected process that is alive is a self-kill; one that only
    spares a shell because that shell exec'd this command is fragile; a listing (no signal)
    that shows one of them, or a process of its own pipeline, is a self-match.
    """
    visible = [p for p in ctx.enclosing if sees(ctx.domain, p.domain)] + list(extra)
    if query.ignores_ancestors:
        visible = []
    matched = [p for p in visible if query.selects(p)]
    if signal is not None and signal not in HARMLESS_SIGNALS:
        scan.kills.append(KillEvent(query, ctx.domain, span, text))
        killed = [p for p in matched if p.state == "alive" and harmed(p, signal)]
        spared = [p for p in matched if p.state in ("exec-lone", "exec-last")
                  and harmed(p, signal)]
        # A kill that only the *assumed* wrapper (level 0) dies of, while
        # the shell you wrote execs it, is not an error: bash -c / -lc is gone by the time
        # pkill looks. The wrapper's truth is kept as a warning of its own.
        wrapper_only = spared and all(p.role == "agent" for p in killed)
        if killed and not wrapper_only:
            add_self_kill(scan, query, ctx, killed, signal, span, text, words)
        elif spared:
            add_fragile(scan, query, ctx, spared, span, text)
        if killed and wrapper_only:
            add_wrapper(scan, query, ctx, killed[-1], signal, span, words)
        return
    listed = [p for p in matched if p.state == "alive" and p.role != "interactive"]
    listed += [p for p in siblings if query.selects(p)]
    if listed:
        add_self_list(scan, query, ctx, listed, span, text)


def add_self_kill(scan: Scan, query, ctx, killed, signal, span, text, words) -> None:
    victim = killed[-1]
    others = f"; {len(killed) - 1} more enclosing process(es) match too" if len(
        killed) > 1 else ""
    sig = SIGNAL_NAMES.get(signal, str(signal))
    what = "process name" if query.subject == "name" else "command line"
    message = (f"`{text}` kills its own {noun(victim)}: pattern {query.pattern!r} matches the "
               f"{what} of the enclosing `{display_argv(victim.argv)}` "
               f"({describe(victim)}), which gets SIG{sig}{others}")
    why = {"killall": WHY_KILLALL, "ps|grep": WHY_PS_GREP_KILL}.get(query.tool,
                                                                    WHY_SELF_KILL)
    fix = safe_kill_fix(query, ctx)
    bracket = bracket_fix(scan, query, span, "self-kill", words)
    scan.add("self-kill", span, message, why, fix + bracket)


def add_fragile(scan: Scan, query, ctx, spared, span, text) -> None:
    shell = spared[-1]
    when = ("it is the only command of that string" if shell.state == "exec-lone" else
            "it is the last command of that string (bash >= 5.1 and zsh exec it; older "
            "bash and dash are killed)")
    if shell.role == "sshd-shell":
        # sshd runs the user's login shell (passwd), which lint cannot see from here
        when += ("; the shell is the user's login shell on that host, unknown here: bash "
                 "execs such a command, dash (`sh`) does not and is killed")
    message = (f"`{text}` survives by luck: pattern {query.pattern!r} matches the command "
               f"line of the enclosing `{display_argv(shell.argv)}` ({describe(shell)}), "
               f"which is spared only because it replaces itself with this command: "
               f"{when}")
    fix = (safe_kill_fix(query, ctx) + "; if you keep it, keep it the last command of "
           "its string, with no redirection")
    scan.add("self-kill-fragile", span, message, WHY_FRAGILE, fix)


def add_wrapper(scan: Scan, query, ctx, wrapper, signal, span, words) -> None:
    sig = SIGNAL_NAMES.get(signal, str(signal))
    message = (f"the shell you wrote execs `{command_text(words) if words else 'this'}`, but "
               f"a wrapper that runs this text and stays alive (an agent tool's `bash -c` "
               f"adding its own cd/eval/pwd, assumed at level 0) carries pattern "
               f"{query.pattern!r} in its command line, "
               f"`{display_argv(wrapper.argv)}`, and would get SIG{sig}; typed at a prompt "
               f"(`runward lint --interactive`) nothing carries it")
    fix = safe_kill_fix(query, ctx) + ", or `runward stop NAME` for a run runward started"
    fix += bracket_fix(scan, query, span, "self-kill-wrapper", words)
    scan.add("self-kill-wrapper", span, message, WHY_WRAPPER, fix)


def add_self_list(scan: Scan, query, ctx, listed, span, text) -> None:
    shown = listed[-1]
    if shown.role == "sibling":
        whose = f"`{display_argv(shown.argv)}` in the same pipeline"
    else:
        whose = f"the enclosing `{display_argv(shown.argv)}` ({describe(shown)})"
    message = (f"`{text}` lists its own shell: pattern {query.pattern!r} matches the "
               f"command line of {whose}")
    on = f" --on {ctx.target}" if ctx.target else ""
    fix = (f"use `runward ps {always_quote(query.pattern)}{on}` (never lists itself, its "
           f"ancestors or its session's shells)")
    fix += bracket_fix(scan, query, span, "self-match-list", None)
    scan.add("self-match-list", span, message, WHY_SELF_LIST, fix)


def bracket_fix(scan: Scan, query: Query, span, rule: str, words: list[Word] | None) -> str:
    """Suggest `[t]rain.py` only after linting the line with it and seeing it work."""
    word = query.word
    if word is None or query.subject in ("name", "comm") or not word.literal:
        return ""
    bracketed = bracket_trick(word.value)
    if bracketed is None:
        return ""
    shown = (bracketed_command(words, word, bracketed) if words
             else always_quote(bracketed))
    fixed = with_bracket(scan.command, word, bracketed)
    if fixed is None or not scan.suggest or scan.verifications_left <= 0:
        return (f", or the bracket trick: {shown}, whose own text no longer matches "
                f"(check that nothing else on that line does)")
    scan.verifications_left -= 1
    again = scan.relint(fixed)
    if not any(f.rule == rule and f.start == span[0] for f in again):
        return f", or the bracket trick: {shown}, whose own text no longer matches"
    action = "kill" if rule == "self-kill" else "check"
    return (f". The bracket trick ({always_quote(bracketed)}) does not help here: "
            f"{still_matching(query, fixed)} on the same line matches the pattern too, "
            f"so make the {action} a call of its own")


def with_bracket(command: str, word: Word, bracketed: str) -> str | None:
    """The top-level command with the pattern word rewritten, or None if it is not
    spelled out contiguously there (escapes between its chars)."""
    if not word.pos:
        return None
    first, last = word.pos[0], word.pos[-1]
    if last - first + 1 != len(word.value) or command[first:last + 1] != word.value:
        return None
    return command[:first] + bracketed + command[last + 1:]


def still_matching(query: Query, text: str) -> str:
    """The word of `text` that the query's first positive regex still finds, for messages."""
    stage = next((st for st in query.stages if not st.invert), None)
    m = stage.regexes[0].search(text) if stage else None
    if m is None:
        return "other text"
    begin = max(text.rfind(" ", 0, m.start()), text.rfind("'", 0, m.start()),
                text.rfind('"', 0, m.start()), text.rfind(";", 0, m.start())) + 1
    ends = [k for k in (text.find(c, m.end()) for c in " '\";") if k >= 0]
    return f"`{text[begin:min(ends, default=len(text))]}`"


def safe_kill_fix(query: Query, ctx: Ctx) -> str:
    on = f" --on {ctx.target}" if ctx.target else ""
    return (f"use `runward kill {always_quote(query.pattern)}{on} --yes` (the pattern travels on "
            f"stdin, never in an argv, and runward never signals its own ancestors)")


def bracketed_command(words: list[Word], word: Word, bracketed: str) -> str:
    return " ".join(quote(bracketed) if w is word else quote(w.value) for w in words)


def noun(proc: Proc) -> str:
    if proc.role in ("client", "wrapper"):
        return f"{proc.name} {'client' if proc.role == 'client' else 'process'}"
    return "shell"


def describe(proc: Proc) -> str:
    """Where an enclosing process sits: `level 2, inside pct exec 200 on root@host`."""
    if proc.role == "agent":
        return ("level 0, the `bash -c` assumed to run this whole command, as an agent tool "
                "or a script does; for a command typed at an interactive prompt, lint it with "
                "`runward lint --interactive`")
    if proc.role == "interactive":
        return "your interactive shell"
    role = {"sshd-shell": "started by sshd", "wrapper": f"{proc.name} waiting for its command",
            "client": f"the {proc.name} client"}.get(proc.role)
    text = f"level {proc.level}" + (f", {role}" if role else "")
    if proc.where:
        text += (" " if proc.role == "sshd-shell" else ", ") + proc.where
    return text
