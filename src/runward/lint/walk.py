"""The walk over a command line: level by level, each simple command once, with the
processes around it, handing each command to the rule families."""

from __future__ import annotations

from dataclasses import replace

from . import hops
from .lexer import ParseError, Source, Word
from .parse import CATCHES_SIGNALS, Command, Pipeline, Script, argv_of, basename, parse, unwrap
from .processes import EXEC_SHELLS, Ctx, Proc
from .report import SEVERITY_RANK, Finding
from .rules import broadkill, filesystem, parsing, selfmatch, verification
from .scan import Scan

MAX_DEPTH = 24


class Linter:
    """Walks a command line once, level by level, collecting findings in a Scan."""

    def __init__(self, command: str, assume_shell: bool, suggest: bool = True):
        self.scan = Scan(command, assume_shell, relint=self._relint, suggest=suggest)

    def _relint(self, command: str) -> list[Finding]:
        return Linter(command, self.scan.assume_shell, suggest=False).run()

    def run(self) -> list[Finding]:
        command = self.scan.command
        top = Source(command, tuple(range(len(command))))
        try:
            script = parse(top)
        except ParseError as e:
            return [parsing.finding(top, e, nested=False)]
        self.walk_script(script, self.top_context())
        if self.scan.suggest:  # a verification pass only needs the self-match findings
            verification.finish(self.scan)
        unique = {(f.rule, f.start, f.end, f.message): f for f in self.scan.findings}
        return sorted(unique.values(), key=lambda f: (f.start, SEVERITY_RANK[f.severity],
                                                      f.end, f.rule))

    def top_context(self) -> Ctx:
        if self.scan.assume_shell:
            # An agent tool (or a script) runs the command as `bash -c '<command>'` and wraps
            # it in commands of its own, so that shell stays alive while the command runs.
            agent = Proc(("bash", "-c", self.scan.command), (), 0, "agent", family="agent")
            return Ctx(enclosing=(agent,), runner=0)
        # An interactive shell's argv is just `-bash`; it ignores SIGTERM (bash(1), SIGNALS).
        interactive = Proc(("-bash",), (), 0, "interactive", catches=True)
        return Ctx(enclosing=(interactive,))

    def walk_source(self, src: Source, ctx: Ctx) -> None:
        if ctx.depth > MAX_DEPTH:
            return
        try:
            script = parse(src)
        except ParseError as e:
            self.scan.findings.append(parsing.finding(src, e, nested=True))
            return
        self.walk_script(script, ctx)

    def walk_script(self, script: Script, ctx: Ctx) -> None:
        for idx, pipeline in enumerate(script.pipelines):
            pipeline_ctx = runner_state(script, idx, ctx)
            handled = selfmatch.loop_kills(self.scan, script, idx, pipeline_ctx)
            self.walk_pipeline(pipeline, pipeline_ctx, handled, script, idx)
            verification.sleep_before_check(self.scan, script, idx)

    def walk_pipeline(self, pipeline: Pipeline, ctx: Ctx, handled: set[int] | None = None,
                      script: Script | None = None, idx: int = 0) -> None:
        handled = set() if handled is None else handled
        selfmatch.listers(self.scan, pipeline, ctx, handled, script, idx)
        for command in pipeline.commands:
            self.walk_command(command, ctx, handled)
        if pipeline.background:
            verification.record_launch(self.scan, pipeline, ctx)

    def walk_command(self, command: Command, ctx: Ctx, handled: set[int]) -> None:
        self.scan.seq += 1
        wrappers, words = unwrap(command.words)
        if not command.expanded:
            if words and basename(words[0].value) == "kill":
                selfmatch.kill_substitutions(self.scan, words, command, ctx, handled)
            self.walk_substitutions(command, ctx, handled)
        filesystem.host_paths_in_container(self.scan, command, ctx)
        if not words:
            return
        procs = [Proc(argv_of(w), ctx.domain, ctx.level, "wrapper", ctx.where,
                      catches=basename(w[0].value) in CATCHES_SIGNALS) for w in wrappers]
        self.dispatch(words, command, ctx.push(*procs) if procs else ctx, handled)

    def walk_substitutions(self, command: Command, ctx: Ctx, handled: set[int]) -> None:
        # $(...) and `...` run in a forked subshell while this shell waits for their output,
        # so this shell is alive (and visible to pgrep) whatever comes after.
        sub_ctx = replace(ctx.with_runner_state("alive"), depth=ctx.depth + 1)
        for word in command.all_words():
            for sub in word.subs:
                if id(sub) not in handled:
                    self.walk_source(sub, sub_ctx)

    def dispatch(self, words: list[Word], command: Command, ctx: Ctx,
                 handled: set[int]) -> None:
        """Follow a hop into the command it runs, or check a program."""
        if basename(words[0].value) == "ssh" and (split := parsing.ssh_word_split(words)):
            self.scan.findings.append(split)
        inner = hops.enter(words, ctx)
        if inner is None:
            self.check_program(words, command, ctx, handled)
        elif isinstance(inner.body, Pipeline):
            self.walk_pipeline(inner.body, inner.ctx)
        elif inner.body is not None:
            self.walk_source(inner.body, inner.ctx)

    def check_program(self, words: list[Word], command: Command, ctx: Ctx,
                      handled: set[int]) -> None:
        name = basename(words[0].value)
        if id(command) not in handled and name in ("pkill", "killall"):
            selfmatch.kill_command(self.scan, words, command, ctx)
        if name in ("kill", "killall", "killall5", "pkill"):
            broadkill.check(self.scan, words, command, ctx)
        if name == "cd":
            filesystem.record_cd(self.scan, words, ctx)
        filesystem.record_copy(self.scan, words, ctx)
        verification.record_program(self.scan, words, command, ctx)


def _sets_trap(pipeline) -> bool:
    """`trap ACTION SIG...` with a handler: bash 5.2 then never execs a later command (it must
    stay to run the handler), checked with EXIT, ERR and INT; `trap '' SIG` and `trap - SIG`
    leave the exec alone."""
    for c in pipeline.commands:
        words = [w.value for w in c.words]
        if words[:1] == ["trap"]:
            args = words[2:] if words[1:2] == ["--"] else words[1:]
            if len(args) >= 2 and args[0] not in ("", "-"):
                return True
    return False


def runner_state(script: Script, idx: int, ctx: Ctx) -> Ctx:
    """Is the shell reading this script still alive while this pipeline runs?

    bash, zsh and ksh exec the only command of a -c string instead of forking it (bash
    >= 5.1 also the last one), unless it has redirections; dash does not. Verified with
    bash 5.2 and dash 0.5.12: `bash -c 'pkill -f X'` survives, `sh -c ...` does not, nor
    `bash -c 'pkill -f X 2>/dev/null'`, nor `bash -c 'sleep 1 & pkill -f X'`.
    """
    if ctx.runner < 0:
        return ctx
    runner = ctx.enclosing[ctx.runner]
    pipeline = script.pipelines[idx]
    state = "alive"
    if (runner.family in EXEC_SHELLS and not script.compound and ctx.evaluated != ctx.runner
            and len(pipeline.commands) == 1 and not pipeline.background
            and not pipeline.negated and not pipeline.timed and not pipeline.commands[0].redirs
            and not any(_sets_trap(p) for p in script.pipelines[:idx])):
        if len(script.pipelines) == 1:
            state = "exec-lone"
        elif idx == len(script.pipelines) - 1 and not any(
                p.background for p in script.pipelines[:idx]):
            state = "exec-last"  # not with a background job pending: bash waits for it
    command = pipeline.commands[0]
    if command.words and command.words[0].value == "exec" and len(command.words) > 1:
        state = "exec"
    return ctx.with_runner_state(state)
