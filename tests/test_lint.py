"""runward lint: real-world command shapes, properties, and the premise itself.

The shapes are the commands people and agents actually type (docs/from-shell.md's one-liners first);
each lists every finding expected, so a false positive fails as loudly as a miss. The last
tests run the trap for real, with a random token so that only the test's own processes can
match: `bash -c 'pkill -9 -f TOKEN; echo survived'` really kills its own shell.
"""

from __future__ import annotations

import ast
import os
import re
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from runward.lint import RULES, Finding, format_findings, lint

E, W, I = "error", "warning", "info"
DOCS = Path(__file__).resolve().parent.parent / "docs" / "lint.md"

DESIGN_1 = ("ssh root@host \"pct exec 200 -- bash -lc 'pkill -9 -f /root/run.sh; sleep 2; "
            "nohup /root/run.sh > train.log 2>&1 & sleep 5; pgrep -f run.sh; tail train.log'\"")
DESIGN_2 = ("ssh root@host \"pct exec 200 -- bash -lc 'pkill -f train_dflash_pipeline.py; "
            "cd /root && nohup python3 train_dflash_pipeline.py > train.log 2>&1 &'\"")


def shape(command, *expected, assume_shell=True, id=None):
    return pytest.param(command, assume_shell, sorted(expected), id=id)


SHAPES = [
    # the one-liners of docs/from-shell.md, the failures runward is built against
    shape(DESIGN_1, ("self-kill", E), ("kill-then-start", W), ("self-match-list", W),
          ("sleep-as-verification", I), id="design-1-pkill-run.sh-in-pct-bash-lc"),
    shape(DESIGN_2, ("self-kill", E), ("kill-then-start", W), ("unverified-nohup", I),
          id="design-2-pkill-train_dflash"),
    shape("ssh root@host 'pgrep -f \"python3.*train_dflash\" | xargs kill'", ("self-kill", E),
          id="design-2-pgrep-xargs-kill-over-ssh"),
    shape("scp train_dflash_pipeline.py root@host:/root/ && "
          "ssh root@host \"pct exec 200 -- python3 /root/train_dflash_pipeline.py\"",
          ("host-path-in-container", W), id="design-3-scp-to-host-run-in-container"),
    # the same with relative paths (docs/from-shell.md's example): the job's shell `cd`s first
    shape("scp train.py root@host:/root/train.py && "
          "ssh root@host \"pct exec 200 -- bash -lc 'cd /root && nohup python3 train.py &'\"",
          ("host-path-in-container", W), ("unverified-nohup", I),
          id="design-3-relative-after-cd-in-pct"),
    shape("scp train.py root@host:train.py && "
          "ssh root@host \"pct exec 200 -- bash -lc 'cd ~ && python3 ./train.py'\"",
          ("host-path-in-container", W), id="design-3-relative-home-after-cd-home"),
    # another directory, or no cd at all (where pct exec starts is not known): nothing to say
    shape("scp train.py root@host:/root/train.py && "
          "ssh root@host \"pct exec 200 -- bash -lc 'cd /srv && python3 train.py'\"",
          id="relative-after-cd-elsewhere"),
    shape("scp train.py root@host:/root/train.py && "
          "ssh root@host \"pct exec 200 -- bash -lc 'cd $D && python3 train.py'\"",
          id="relative-after-cd-to-a-variable"),
    shape("nohup python train.py > train.log 2>&1 & sleep 5; tail -n 20 train.log",
          ("sleep-as-verification", I), id="design-5-sleep-then-tail"),
    # pkill -f at the top level: the agent's `bash -c '<command>'` carries the pattern
    shape("pkill -f train.py", ("self-kill", E), id="pkill-f-top-level-agent-shell"),
    shape("pkill -f train.py", assume_shell=False, id="pkill-f-interactive-prompt"),
    shape("pkill -f train.py; sleep 3; nohup python train.py > train.log 2>&1 &",
          ("self-kill", E), ("kill-then-start", W), ("unverified-nohup", I),
          id="restart-one-liner"),
    shape("pkill -f train.py; sleep 3; nohup python train.py > train.log 2>&1 &",
          ("kill-then-start", W), ("unverified-nohup", I), assume_shell=False,
          id="restart-one-liner-interactive"),
    shape("bash -c 'pkill -f train.py; echo done'", ("self-kill", E), assume_shell=False,
          id="bash-c-pkill-then-more"),
    shape("bash -c 'pkill -f train.py'", ("self-kill-fragile", W), assume_shell=False,
          id="bash-c-lone-pkill-execs"),
    shape("bash -c 'pkill -f train.py 2>/dev/null'", ("self-kill", E), assume_shell=False,
          id="bash-c-lone-pkill-with-redirection-forks"),
    # issue 31: bash -c / -lc exec a lone or last pkill, so it is no error; the agent tool's
    # wrapper that would carry the text is a warning of its own; dash (sh -c) stays an error
    shape("bash -c 'pkill -f train.py'", ("self-kill-fragile", W), ("self-kill-wrapper", W),
          id="bash-c-lone-pkill-agent-mode"),
    shape("bash -lc 'pkill -f train.py'", ("self-kill-fragile", W), ("self-kill-wrapper", W),
          id="bash-lc-lone-pkill-agent-mode"),
    shape("bash -c 'cd /w && pkill -f train.py'", ("self-kill-fragile", W), ("self-kill-wrapper", W),
          id="bash-c-last-pkill-agent-mode"),
    shape("sh -c 'pkill -f train.py'", ("self-kill", E), id="sh-c-lone-pkill-agent-mode"),
    shape("bash -c 'pkill -f train.py; echo done'", ("self-kill", E), id="bash-c-pkill-then-more-agent-mode"),
    shape("ssh gpu1 'pkill -f train.py'", ("self-kill-fragile", W), id="ssh-lone-pkill"),
    shape("ssh gpu1 'pkill -f train.py || true; nohup python train.py > log 2>&1 &'",
          ("self-kill", E), ("kill-then-start", W), ("unverified-nohup", I),
          id="ssh-pkill-or-true"),
    shape("ssh -p 2222 -i ~/.ssh/id_ed25519 root@10.1.2.6 "
          "'pkill -9 -f train.py; sleep 1; nvidia-smi'",
          ("self-kill", E), ("sleep-as-verification", I), id="ssh-options-pkill-9"),
    shape("ssh localhost 'pkill -f train.py'", ("self-kill", E), assume_shell=False,
          id="ssh-localhost-kills-local-ssh-client"),
    shape("lxc-attach -n c1 -- bash -c 'pkill -f train.py; echo ok'", ("self-kill", E),
          id="lxc-attach-bash-c"),
    shape("docker exec trainer sh -c 'pkill -f train.py'", ("self-kill", E),
          id="docker-exec-sh-c-dash-does-not-exec"),
    shape("sudo -u ml bash -lc 'pkill -f train.py; sleep 2; python train.py'",
          ("self-kill", E), ("kill-then-start", W), assume_shell=False, id="sudo-bash-lc"),
    shape("kill $(pgrep -f train.py)", ("self-kill", E), id="kill-dollar-pgrep"),
    shape("kill -9 `pgrep -f train.py`", ("self-kill", E), id="kill-backquote-pgrep"),
    shape("ps -ef | grep train.py | awk '{print $2}' | xargs kill -9", ("self-kill", E),
          id="ps-grep-awk-xargs-kill"),
    shape("for p in $(pgrep -f train.py); do kill $p; done", ("self-kill", E),
          id="for-loop-over-pgrep-kill"),
    shape("pgrep -f train.py | while read pid; do kill -9 \"$pid\"; done", ("self-kill", E),
          id="pgrep-while-read-kill"),
    shape("for p in $(pgrep -f train.py); do echo $p; done", ("self-match-list", W),
          id="for-loop-over-pgrep-echo"),
    shape("ssh h \"kill \\$(pgrep -f train.py); echo\"", ("self-kill", E),
          id="remote-kill-pgrep-escaped-dollar"),
    shape("killall -r 'ba.h'", ("self-kill", E), ("kill-by-name", W),
          id="killall-r-matches-shell-name"),
    shape("pkill -9 bash", ("self-kill", E), id="pkill-by-name-bash"),
    shape("timeout 10 pkill -9 -f train.py", ("self-kill", E), assume_shell=False,
          id="timeout-cannot-catch-kill"),
    # listing: the output includes the shell that runs the check
    shape("pgrep -af train.py", ("self-match-list", W), id="pgrep-af"),
    shape("pgrep -af train.py", assume_shell=False, id="pgrep-af-interactive"),
    shape("pgrep -f train.py > /dev/null && echo running", ("self-match-list", W),
          id="pgrep-as-alive-check"),
    shape("ps aux | grep train.py", ("self-match-list", W), id="ps-aux-grep"),
    shape("ps aux | grep train.py", ("self-match-list", W), assume_shell=False,
          id="ps-aux-grep-lists-grep-itself"),
    shape("podman exec --user root trainer bash -c 'pgrep -af train.py; nvidia-smi'",
          ("self-match-list", W), id="podman-exec-pgrep"),
    shape("watch -n 1 'pgrep -af train.py'", ("self-match-list", W), assume_shell=False,
          id="watch-runs-sh-c"),
    shape("pgrep -f train.py | xargs -r kill -0", ("self-match-list", W),
          id="kill-0-is-a-check-not-a-kill"),
    # files copied to the host and used in a container
    shape("cp run.sh /root/run.sh && pct exec 200 -- bash /root/run.sh",
          ("host-path-in-container", W), id="cp-on-host-run-in-pct"),
    shape("scp run.sh root@host:/root/run.sh && ssh root@host "
          "\"pct push 200 /root/run.sh /root/run.sh && pct exec 200 -- bash /root/run.sh\"",
          id="scp-then-pct-push-is-fine"),
    # unverified starts
    shape("nohup python train.py > train.log 2>&1 &", ("unverified-nohup", I),
          id="nohup-and-walk-away"),
    shape("ssh gpu1 \"cd /work && git pull && nohup python train.py > train.log 2>&1 & "
          "sleep 10; tail -5 train.log\"", ("sleep-as-verification", I),
          id="ssh-start-sleep-tail"),
    # safe: false positives are bugs
    shape("pkill -f '[t]rain.py'", id="bracket-trick"),
    shape("ps aux | grep '[t]rain.py'", id="ps-grep-bracket-trick"),
    shape("ps aux | grep train | grep -v grep", id="ps-grep-v-grep-filters-the-shell-too"),
    shape("ssh gpu1 'ps aux | grep train | grep -v grep | awk \"{print \\$2}\" | xargs kill'",
          id="ps-grep-v-grep-xargs-kill"),
    shape("pkill python", id="pkill-by-name-python"),
    shape("kill 1234", id="kill-pid"),
    shape("systemctl restart trainer", id="systemctl"),
    shape("pgrep -x python", id="pgrep-exact-name"),
    shape("pkill -f \"^python train.py\"", id="anchored-pattern"),
    shape("bash -c 'pkill -f \"^python train.py\"; echo done'", assume_shell=False,
          id="anchored-pattern-in-bash-c"),
    shape("pkill -f 'train[.]py'", id="bracketed-dot"),
    shape("pkill -f 'epoch[[:digit:]]+'", id="posix-class"),
    shape("pkill -f 'train\\.py'", id="escaped-dot-text-does-not-match-itself"),
    shape("pkill -A -f train.py", id="pkill-ignore-ancestors"),
    shape("killall -r train", ("kill-by-name", W),
          id="killall-r-matches-names-not-command-lines"),
    # broad kills: every process the caller may signal, or every process of a name
    shape("kill -9 -1", ("kill-everything", E), id="kill-9-minus-1"),
    shape("kill -- -1", ("kill-everything", E), id="kill-dashdash-minus-1"),
    shape("kill -s KILL -1", ("kill-everything", E), id="kill-s-kill-minus-1"),
    shape("kill -1 -1", ("kill-everything", E), id="kill-hup-minus-1"),
    shape("ssh root@host \"pct exec 200 -- kill -9 -1\"", ("kill-everything", E),
          id="kill-minus-1-in-container"),
    shape("sudo killall5 -9", ("kill-everything", E), id="killall5"),
    # bash's kill reads the pid as a decimal: leading zeros still name pid -1
    shape("kill -9 -01", ("kill-everything", E), id="kill-9-minus-01"),
    shape("kill -9 -001", ("kill-everything", E), id="kill-9-minus-001"),
    shape("kill -9 -- -01", ("kill-everything", E), id="kill-dashdash-minus-01"),
    shape("kill -01 -01", ("kill-everything", E), id="kill-hup-as-01-minus-01"),
    shape("kill -0 -01", id="kill-0-minus-01-is-a-check"),
    shape("kill -l", id="kill-l-lists-signals"),
    # every process of a user: as root, everything
    shape("killall -u root", ("kill-everything", E), id="killall-u-root"),
    shape("killall -9 -u alice", ("kill-everything", E), id="killall-9-u-user"),
    shape("killall --user=root", ("kill-everything", E), id="killall-user-equals"),
    shape("pkill -u root", ("kill-everything", E), id="pkill-u-root"),
    shape("pkill -9 -u root", ("kill-everything", E), id="pkill-9-u-root"),
    shape("pkill -U 0", ("kill-everything", E), id="pkill-real-uid-0"),
    shape("killall -u root python3", ("kill-by-name", W), id="killall-u-with-name-is-by-name"),
    shape("pkill -u root python", id="pkill-u-with-name-is-narrowed"),
    shape("pkill -u root -P 1", id="pkill-u-with-parent-is-narrowed"),
    shape("pkill -0 -u root", id="pkill-0-u-root-is-a-check"),
    shape("killall -0 -u root", id="killall-0-u-root-is-a-check"),
    shape("killall python3", ("kill-by-name", W), id="killall-by-name"),
    shape("kill -1", id="kill-1-is-a-signal-without-pid"),
    shape("kill -0 -1", id="kill-0-minus-1-is-a-check"),
    shape("kill -9 -1234", id="kill-process-group-is-not-everything"),
    shape("killall -0 python3", id="killall-0-is-a-check"),
    shape("timeout 10 pkill -f train.py", assume_shell=False, id="timeout-relays-term"),
    shape("docker exec trainer pkill -f train.py", id="docker-exec-argv-no-shell"),
    shape("pct exec 200 -- pkill -f train.py", id="pct-exec-argv-no-shell"),
    shape("ssh root@host \"pct exec 200 -- pkill -f train.py\"",
          id="host-shell-not-visible-from-container"),
    shape("docker exec -it trainer bash -lc 'pgrep -af train.py'", id="lone-pgrep-execs"),
    shape("echo 'pkill -f train.py'", id="echo-mentions-pkill"),
    shape("git commit -m \"pkill -f train.py; fix\"", id="commit-message-mentions-pkill"),
    shape("python -c 'import os; os.system(\"pkill -f x\")'", id="python-not-a-shell"),
    shape("tail -f train.log", id="tail"),
    shape("for h in gpu1 gpu2; do ssh $h nvidia-smi; done", id="for-loop-over-hosts"),
    shape("nvidia-smi --query-gpu=memory.used --format=csv", id="nvidia-smi"),
    # ssh joins the words after the host; the remote shell splits them again
    shape("ssh host pct exec 200 -- bash -lc 'cd /root/work; python3 train.py'", ("ssh-word-split", E),
          id="ssh-joins-a-bash-lc-string-host-runs-the-rest"),
    shape("ssh -p 2222 root@host grep -r 'step 1' /root/train.log", ("ssh-word-split", E),
          id="ssh-joins-a-pattern-with-a-space"),
    shape("ssh host docker exec trainer sh -c 'ls && python3 t.py'", ("ssh-word-split", E),
          id="ssh-joins-a-docker-sh-c-string"),
    shape("ssh host \"pct exec 200 -- bash -lc 'cd /root/work; python3 train.py'\"",
          id="ssh-one-remote-word-quoted-once"),
    shape("ssh host bash -c \"'echo a; echo b'\"", id="ssh-word-quoted-for-the-remote-shell"),
    shape("ssh host ls -la /root/work", id="ssh-plain-words"),
    # unparseable
    shape("ssh host 'pkill -f train.py", ("parse-error", W), id="unterminated-quote"),
    shape("bash -c 'echo \"unterminated'", ("parse-error", W), id="nested-unterminated"),
]


@pytest.mark.parametrize("command, assume_shell, expected", SHAPES)
def test_command_shapes(command, assume_shell, expected):
    findings = lint(command, assume_shell=assume_shell)
    got = sorted((f.rule, f.severity) for f in findings)
    assert got == expected, format_findings(command, findings)


def test_at_least_thirty_distinct_shapes():
    assert len({p.values[0] for p in SHAPES}) >= 30


# ---------------------------------------------------------------- what a finding says


def only(command, rule, **kw) -> Finding:
    found = [f for f in lint(command, **kw) if f.rule == rule]
    assert len(found) == 1, found
    return found[0]


def test_span_points_at_the_nested_command_in_the_original_string():
    f = only(DESIGN_1, "self-kill")
    assert DESIGN_1[f.start:f.end] == "pkill -9 -f /root/run.sh"
    sleep = only(DESIGN_1, "sleep-as-verification")
    assert DESIGN_1[sleep.start:sleep.end] == "sleep 5"


def test_span_through_escapes_and_double_quotes():
    command = 'ssh h "bash -c \\"pkill -f x.py; echo\\""'
    f = only(command, "self-kill")
    assert command[f.start:f.end] == "pkill -f x.py"


def test_message_names_the_enclosing_command_line_and_level():
    f = only(DESIGN_1, "self-kill")
    assert "pattern '/root/run.sh'" in f.message
    assert "`bash -lc 'pkill -9 -f /root/run.sh; sleep 2; nohup /root/run.sh" in f.message
    assert "(level 2, inside pct exec 200 on root@host)" in f.message
    assert "SIGKILL" in f.message


def test_message_names_the_sshd_shell():
    f = only("ssh root@gpu1 'pgrep -f train.py | xargs kill; echo'", "self-kill")
    assert "`bash -c 'pgrep -f train.py | xargs kill; echo'`" in f.message
    assert "level 1, started by sshd on root@gpu1" in f.message


def test_message_names_the_assumed_agent_shell():
    f = only("pkill -f train.py", "self-kill")
    assert "`bash -c 'pkill -f train.py'`" in f.message and "level 0" in f.message
    assert "runward lint --interactive" in f.message  # the flag a person types (stumble 9 of issue 20)


def test_fix_names_the_target_and_the_verified_bracket_trick():
    f = only("ssh root@host \"pct exec 200 -- bash -lc 'pkill -f train.py; nvidia-smi'\"",
             "self-kill")
    assert "`runward kill 'train.py' --on ssh://root@host/pct:200 --yes`" in f.fix
    assert "pkill -f '[t]rain.py'" in f.fix


def test_fix_says_when_the_bracket_trick_does_not_help():
    # The start command on the same line also contains the pattern's text.
    f = only(DESIGN_1, "self-kill")
    assert "does not help here" in f.fix and "'[/]root/run.sh'" in f.fix
    f = only("pkill -f train.py; python train.py", "self-kill")
    assert "does not help here" in f.fix


def test_kill_then_start_names_both_commands():
    f = only("pkill -f train.py; nohup python train.py &", "kill-then-start",
             assume_shell=False)
    assert "`pkill -f train.py`" in f.message and "`nohup python train.py`" in f.message
    assert "runward restart" in f.fix


def test_host_path_message_names_copy_and_container():
    command = ("scp run.sh root@host:/root/run.sh && "
               "ssh root@host \"pct exec 200 -- bash -lc 'cd /root && bash /root/run.sh'\"")
    f = only(command, "host-path-in-container")
    assert command[f.start:f.end] == "bash /root/run.sh"
    assert "/root/run.sh inside pct exec 200 on root@host" in f.message
    assert "`scp run.sh root@host:/root/run.sh`" in f.message
    assert "runward push --on ssh://root@host/pct:200" in f.fix


def test_findings_are_ordered_and_severities_match_rules():
    findings = lint(DESIGN_1)
    assert [f.start for f in findings] == sorted(f.start for f in findings)
    assert all(f.severity == RULES[f.rule] for f in findings)


def test_to_dict():
    d = only("pkill -f train.py", "self-kill").to_dict()
    assert set(d) == {"rule", "severity", "start", "end", "message", "why", "fix"}
    assert (d["rule"], d["severity"], d["start"], d["end"]) == ("self-kill", "error", 0, 17)


def test_format_findings_puts_carets_under_the_span():
    command = "cd /work && pkill -f train.py"
    text = format_findings(command, lint(command))
    lines = text.splitlines()
    assert lines[0].startswith("error[self-kill] at 12-29: ")
    assert lines[1] == "  " + command
    assert lines[2] == "  " + " " * 12 + "^" * 17
    assert lines[3].startswith("  why: ") and lines[4].startswith("  fix: ")
    assert text.endswith("1 error")


def test_format_findings_on_a_long_nested_line_keeps_carets_aligned():
    text = format_findings(DESIGN_1, lint(DESIGN_1))
    line, carets = text.splitlines()[1:3]
    begin = carets.index("^")
    assert line[begin:begin + len("pkill -9 -f /root/run.sh")] == "pkill -9 -f /root/run.sh"


def test_broad_kills_name_the_danger_and_the_runward_fix():
    f = only("ssh root@host \"pct exec 200 -- kill -9 -1\"", "kill-everything")
    assert "every process the caller may signal inside pct exec 200 on root@host" in f.message
    assert "runward stop NAME" in f.fix and "--on ssh://root@host/pct:200" in f.fix
    f = only("killall5", "kill-everything")
    assert "outside its own session" in f.message and "sshd" in f.why
    f = only("pkill -9 -u root", "kill-everything")
    assert "every process of user root on this machine" in f.message
    assert "runward stop NAME" in f.fix
    f = only("killall python3", "kill-by-name")
    assert "every process named 'python3'" in f.message and "runward kill" in f.fix


def test_format_no_findings():
    assert format_findings("ls", []) == "no findings"


def test_every_rule_is_documented():
    docs = DOCS.read_text()
    for rule, severity in RULES.items():
        assert f"`{rule}`" in docs and severity in docs


def test_import_is_light():
    code = ("import sys; before = set(sys.modules); import runward.lint; "
            "print(' '.join(sorted(set(sys.modules) - before)))")
    src = str(Path(__file__).resolve().parent.parent / "src")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=src), check=True).stdout.split()
    assert not {"subprocess", "json", "shlex", "hypothesis", "asyncio"} & set(out), out


def test_lint_package_stays_readable():
    """Issue 12: no module of runward/lint over 600 lines, no function over 60."""
    root = Path(__file__).resolve().parent.parent / "src" / "runward" / "lint"
    modules = sorted(root.rglob("*.py"))
    assert len(modules) > 1, modules
    too_long = []
    for path in modules:
        text = path.read_text()
        where = path.relative_to(root)
        if len(text.splitlines()) > 600:
            too_long.append(f"{where}: {len(text.splitlines())} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > 60:
                    too_long.append(f"{where}:{node.lineno} {node.name}: {length} lines")
    assert not too_long, too_long


# ---------------------------------------------------------------- regex semantics


REGEX_TEXTS = ["train.py", "[t]rain.py", "trainxpy", "python train.py --lr 3e-4",
               "bash -c pkill -f train.py; echo", "epoch12", "epoch[[:digit:]]+", "aab",
               "x{", "a]b", "back\\slash", "retrain", "a)", "*a", "ab-c"]
PGREP_PATTERNS = ["[t]rain.py", "train.py", "^python train", "train\\.py", "epoch[[:digit:]]+",
                  "a{2,3}b", "(ab|xa)+b", "[]a]b", "[^[:space:]]rain", "a**b", "x{", "*a",
                  "\\<train\\>", "[a-c-]c", "\\w+\\.py$", "[\\]s", "a)", "()", "[[:foo:]]",
                  "[z-a]", "(a", "{1}a"]
GREP_PATTERNS = ["[t]rain", "a|^*b", "^+a", "a\\{2\\}b", "\\(ab\\)*c", "a+b", "^*a", "a\\|x{", "x$y", "x{",
                 "train.py$", "\\<rain"]


def matches_by_grep(pattern: str, flavour: str) -> list[bool] | None:
    p = subprocess.run(["grep", flavour, "-n", "-e", pattern], input="\n".join(REGEX_TEXTS),
                       capture_output=True, text=True, env=dict(os.environ, LC_ALL="C"))
    if p.returncode == 2:
        return None
    hit = {int(line.split(":", 1)[0]) for line in p.stdout.splitlines()}
    return [k + 1 in hit for k in range(len(REGEX_TEXTS))]


def matches_by_lint(pattern: str, mode: str, subjects=REGEX_TEXTS) -> list[bool] | None:
    from runward.lint.regex import compile_posix  # the translation under test
    regex = compile_posix(pattern, mode)
    return None if regex is None else [bool(regex.search(t)) for t in subjects]


@pytest.mark.skipif(not shutil.which("grep"), reason="needs grep")
@pytest.mark.parametrize("pattern", GREP_PATTERNS + PGREP_PATTERNS)
def test_grep_flavours_agree_with_gnu_grep(pattern):
    assert matches_by_lint(pattern, "grep-bre") == matches_by_grep(pattern, "-G")
    assert matches_by_lint(pattern, "grep-ere") == matches_by_grep(pattern, "-E")


@pytest.mark.skipif(not (shutil.which("pgrep") and Path("/proc/self/cmdline").exists()),
                    reason="needs procps pgrep and /proc")
def test_pgrep_flavour_agrees_with_pgrep_itself():
    """Start processes whose command line is each text, and ask the real pgrep -f."""
    token = f"rwre{secrets.token_hex(4)}"
    sleep = shutil.which("sleep")
    # argv[0] is the text; Popen returns only once the child has exec'd, so it is in place.
    procs = [subprocess.Popen([f"{t} {token}", "60"], executable=sleep) for t in REGEX_TEXTS]
    subjects = [f"{t} {token} 60" for t in REGEX_TEXTS]  # /proc/PID/cmdline, NULs as spaces
    try:
        for pattern in PGREP_PATTERNS:
            p = subprocess.run(["pgrep", "-f", "--", pattern], capture_output=True, text=True)
            listed = p.stdout.split()
            real = None if p.returncode == 2 else [str(q.pid) in listed for q in procs]
            assert matches_by_lint(pattern, "ere", subjects) == real, pattern
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


# ---------------------------------------------------------------- properties

SAFE_WORD = st.from_regex(r"[A-Za-z0-9_][A-Za-z0-9_.,:/=+-]{0,10}", fullmatch=True)
QUOTED_WORD = st.tuples(SAFE_WORD, st.sampled_from(["", "'", '"'])).map(
    lambda t: f"{t[1]}{t[0]}{t[1]}")
WORDS = st.lists(QUOTED_WORD, max_size=3).map(" ".join)
SIMPLE = st.one_of(
    WORDS.map(lambda w: f"echo {w}".strip()),
    QUOTED_WORD.map(lambda w: f"ls -la {w}"),
    QUOTED_WORD.map(lambda w: f"cd {w}"),
    st.tuples(st.integers(1, 500), QUOTED_WORD).map(lambda t: f"tail -n {t[0]} {t[1]}"),
    st.just("nvidia-smi"),
    WORDS.map(lambda w: f"python script.py {w}".strip()),
)
SEPARATORS = st.sampled_from(["; ", " && ", " || ", " | ", " & ", "\n"])


@st.composite
def safe_scripts(draw):
    commands = draw(st.lists(SIMPLE, min_size=1, max_size=4))
    text = commands[0]
    for command in commands[1:]:
        text += draw(SEPARATORS) + command
    return text + draw(st.sampled_from(["", " &", ";"]))


WRAPPERS = [
    lambda s: s,
    lambda s: f"ssh gpu1 {shlex.quote(s)}",
    lambda s: f"bash -c {shlex.quote(s)}",
    lambda s: f"bash -lc {shlex.quote(s)}",
    lambda s: f"sh -c {shlex.quote(s)}",
    lambda s: f"pct exec 200 -- bash -lc {shlex.quote(s)}",
    lambda s: f"docker exec trainer sh -c {shlex.quote(s)}",
    lambda s: f"ssh root@host {shlex.quote('pct exec 200 -- bash -lc ' + shlex.quote(s))}",
]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(safe_scripts(), st.lists(st.sampled_from(range(len(WRAPPERS))), max_size=2),
       st.booleans())
def test_random_safe_commands_are_never_errors(script, wrappers, assume_shell):
    command = script
    for k in wrappers:
        command = WRAPPERS[k](command)
    findings = lint(command, assume_shell=assume_shell)
    assert not [f for f in findings if f.severity == "error" or f.rule == "parse-error"], (
        format_findings(command, findings))


PATTERN = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{2,14}", fullmatch=True)
SELF_KILLING = [  # (outer template, inner script with {p}, assume_shell)
    ("bash -c {}", "pkill -f {p}; echo done", False),
    ("ssh gpu1 {}", "pkill -f {p} || true; echo done", True),
    ("docker exec trainer sh -c {}", "pkill -f {p}", True),
    ("{}", "pkill -f {p}", True),
    ("bash -c {}", "kill $(pgrep -f {p}); echo", False),
    ("bash -c {}", "pgrep -f {p} | xargs kill", False),
    ("ssh root@host {}", "pct exec 200 -- bash -lc {q}", True),
]


def build(template: str, inner: str, pattern: str) -> str:
    body = inner.format(p=pattern, q=shlex.quote(f"pkill -9 -f {pattern}; sleep 1"))
    return template.format(body if template == "{}" else shlex.quote(body))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(PATTERN, st.sampled_from(SELF_KILLING))
@example("train_py", SELF_KILLING[-1])
def test_word_patterns_in_a_shell_string_are_always_self_kills(pattern, case):
    template, inner, assume_shell = case
    command = build(template, inner, pattern)
    rules = {(f.rule, f.severity) for f in lint(command, assume_shell=assume_shell)}
    assert ("self-kill", "error") in rules, command


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(PATTERN, st.sampled_from(SELF_KILLING))
def test_the_bracket_form_is_never_a_self_kill(pattern, case):
    template, inner, assume_shell = case
    bracketed = f"[{pattern[0]}]{pattern[1:]}"
    command = build(template, inner, shlex.quote(bracketed))
    # The oracle: the regex (word chars) matches a text iff the pattern is a substring of it.
    assume(pattern not in command)
    rules = {f.rule for f in lint(command, assume_shell=assume_shell)}
    assert not rules & {"self-kill", "self-kill-fragile", "parse-error"}, command


FUZZ_PIECES = list("ab $()`'\"\\;&|<>{}[]#\n\t-=*.^/:~!") + [
    "pkill -f ", "bash -c ", "ssh h ", "$(", "pct exec 1 -- ", "pgrep -f ", " | xargs kill",
    "<<EOF\n", "$'", "${", "scp x h:/root/ ", "docker exec c ", "sudo ", "nohup "]


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(FUZZ_PIECES), max_size=40).map("".join), st.booleans())
def test_lint_never_raises(command, assume_shell):
    findings = lint(command, assume_shell=assume_shell)
    for f in findings:
        assert 0 <= f.start <= f.end <= len(command)
        assert f.severity == RULES[f.rule]
    format_findings(command, findings)


# ---------------------------------------------------------------- the premise, for real

needs_procps = pytest.mark.skipif(
    not (shutil.which("pkill") and shutil.which("bash") and Path("/proc/self").exists()),
    reason="needs bash, procps pkill and /proc")


def run_bash(script: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=30)


def unique_token() -> str:
    # Only processes carrying this token can match: the test kills nothing else.
    return f"rwlintprobe{secrets.token_hex(6)}"


@needs_procps
def test_real_pkill_f_kills_its_own_shell_and_lint_says_so():
    command = f"pkill -9 -f {unique_token()}; echo survived"
    p = run_bash(command)
    assert p.returncode == -9 and "survived" not in p.stdout
    assert ("self-kill", E) in {(f.rule, f.severity) for f in lint(command)}
    explicit = f"bash -c {shlex.quote(command)}"
    assert ("self-kill", E) in {(f.rule, f.severity)
                               for f in lint(explicit, assume_shell=False)}


@needs_procps
def test_real_bracket_trick_survives_and_lint_agrees():
    token = unique_token()
    command = f"pkill -9 -f '[{token[0]}]{token[1:]}'; echo survived"
    p = run_bash(command)
    assert p.returncode == 0 and p.stdout.strip() == "survived"
    assert lint(command) == []


@needs_procps
def test_real_lone_pkill_is_spared_by_exec_and_a_redirection_undoes_that():
    token = unique_token()
    lone = f"pkill -9 -f {token}"
    p = run_bash(lone)
    assert p.returncode == 1  # bash exec'd pkill, which skips itself: nothing matched
    rules = [f.rule for f in lint(f"bash -c {shlex.quote(lone)}", assume_shell=False)]
    assert rules == ["self-kill-fragile"]
    redirected = f"pkill -9 -f {token} 2>/dev/null"
    assert run_bash(redirected).returncode == -9
    rules = [f.rule for f in lint(f"bash -c {shlex.quote(redirected)}", assume_shell=False)]
    assert rules == ["self-kill"]


@needs_procps
@pytest.mark.parametrize("flag", ["-c", "-lc"])
def test_real_bash_c_lone_pkill_is_no_error_and_a_live_wrapper_is_warned_of(flag):
    """issue 31: `bash -c` / `bash -lc` exec a lone pkill (checked here: nothing is killed), so
    lint's default mode says no error; but a wrapper that runs that text and stays alive is
    killed (checked here too), and lint's default mode says so as a warning."""
    token = unique_token()
    text = f"bash {flag} {shlex.quote(f'pkill -9 -f {token}')}"
    assert run_bash(text).returncode == 1  # bash exec'd pkill: nothing of ours matched
    wrapped = run_bash(f"{text}; echo survived")  # a wrapper shell that outlives the text
    assert wrapped.returncode == -9 and "survived" not in wrapped.stdout
    found = {(f.rule, f.severity) for f in lint(text)}
    assert found == {("self-kill-fragile", W), ("self-kill-wrapper", W)}, found
    [f] = [f for f in lint(text) if f.rule == "self-kill-wrapper"]
    assert token in f.message and "runward kill" in f.fix and "runward stop" in f.fix, f
    assert f"[{token[0]}]{token[1:]}" in f.fix, f.fix  # the bracket trick, checked to work


@needs_procps
@pytest.mark.skipif(not os.path.realpath("/bin/sh").endswith("dash"), reason="sh is not dash")
def test_real_dash_does_not_exec_a_lone_command():
    command = f"pkill -9 -f {unique_token()}"
    p = subprocess.run(["sh", "-c", command], capture_output=True, timeout=30)
    assert p.returncode == -9
    rules = [f.rule for f in lint(f"sh -c {shlex.quote(command)}", assume_shell=False)]
    assert rules == ["self-kill"]


@needs_procps
def test_real_pgrep_f_lists_its_own_shell():
    command = f"pgrep -f {unique_token()}; echo done"
    proc = subprocess.Popen(["bash", "-c", command], stdout=subprocess.PIPE, text=True)
    out, _ = proc.communicate(timeout=30)
    assert out.split() == [str(proc.pid), "done"]
    assert [f.rule for f in lint(command)] == ["self-match-list"]


@needs_procps
def test_real_ps_grep_v_grep_does_not_list_the_shell():
    command = f"ps aux | grep {unique_token()} | grep -v grep; echo done"
    assert run_bash(command).stdout.split() == ["done"]
    assert lint(command) == []


def test_user_facing_text_names_the_cli_flag_and_no_missing_file():
    """What a person reads names what they can type (`--interactive`, not a Python keyword
    argument) and no file outside the repository (design.md)."""
    from runward.lint import format_findings, lint
    for cmd in ("pkill -f train.py; python train.py", "ssh h 'pkill -f x; ./x &'"):
        text = format_findings(cmd, lint(cmd))
        assert "assume_shell" not in text and "design.md" not in text, text
    text = format_findings("pkill -f train.py", lint("pkill -f train.py"))
    assert "runward lint --interactive" in text, text


def test_a_lone_pkill_over_ssh_says_the_login_shell_is_unknown():
    """sshd runs the user's login shell: bash execs a lone command, dash does not (checked in
    test_real_dash_does_not_exec_a_lone_command), so the warning must say which it rests on."""
    [f] = lint("ssh gpu1 'pkill -f train.py'")
    assert f.rule == "self-kill-fragile"
    assert "login shell" in f.message and "dash" in f.message
    [f] = lint("bash -c 'pkill -f train.py'", assume_shell=False)
    assert "login shell" not in f.message  # a `bash -c` we can see is no guess


def test_real_ssh_splits_a_joined_word_and_the_fix_runs_in_the_container():
    """Over real ssh to a host with a container (testbed rw1, pct 200 -> rwlxc): the words
    joined by ssh run `hostname` on the host (the hostname printed is the host's), lint says
    ssh-word-split; the command of lint's fix, run as it is, prints the container's."""
    import testbed
    tb = testbed.require("pct")
    argv = testbed.ssh_argv("rw1", "hostname", tb=tb)
    host = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=testbed.env(tb)).stdout.strip()
    inside = subprocess.run(testbed.ssh_argv("rw1", "pct exec 200 -- hostname", tb=tb), capture_output=True,
                            text=True, timeout=60, env=testbed.env(tb)).stdout.strip()
    assert host and inside and host != inside
    command = f"ssh -F {tb['ssh_config']} rw1 pct exec 200 -- bash -lc 'cd /; hostname'"
    p = run_bash(command)
    assert p.stdout.split() == [host], p  # bash -lc ran a lone cd; hostname ran on the host
    [f] = lint(command)
    assert (f.rule, f.severity) == ("ssh-word-split", E) and "`hostname`" in f.message, f.message
    fixed = re.search(r"one word: `([^`]*)`", f.fix).group(1)
    assert lint(fixed) == [], format_findings(fixed, lint(fixed))
    p = run_bash(fixed)
    assert p.stdout.split() == [inside], (fixed, p)


@pytest.mark.parametrize("script", ['trap "rm -f /tmp/lock" EXIT; pkill -f {p}', "time pkill -f {p}",
                                    'trap "echo bye" INT; true; pkill -f {p}'])
def test_lint_calls_a_bash_c_that_does_not_exec_its_pkill_an_error(cli, script):
    """bash 5.2 execs a -c string's last simple command, unless a trap is set (it must run it)
    or the command is timed (the shell must report the time): then bash stays, carries the
    pattern in its argv and pkill -f kills it. Checked here with real bash first; lint said only
    `self-kill-fragile` (a warning, exit 0) for these."""
    import shutil
    import subprocess
    import uuid
    if not shutil.which("bash"):
        pytest.skip("no bash here to check what it does")
    pat = "rv2" + uuid.uuid4().hex[:8]  # this test's own argv never carries it
    real = subprocess.run(["bash", "-c", script.format(p=pat)], capture_output=True, timeout=20)
    assert real.returncode == -signal.SIGTERM, f"bash was not killed by its own pkill here: {real}"
    rc, doc = cli.json("lint", "bash -c '%s'" % script.format(p="train.py").replace("'", "'\\''"))
    kinds = [(f["rule"], f["severity"]) for f in doc["result"]["findings"]]
    assert ("self-kill", "error") in kinds and rc != 0, (rc, kinds)


def test_lint_calls_a_pkill_under_bash_c_eval_an_error(cli):
    """`bash -c 'eval pkill -f X'`: eval runs the words in the same shell, which stays (bash 5.2
    execs no command from an eval), so pkill -f kills it; lint said a warning, as for a lone
    pkill that bash execs."""
    import subprocess
    import uuid
    pat = "rv2" + uuid.uuid4().hex[:8]
    real = subprocess.run(["bash", "-c", f"eval pkill -f {pat}"], capture_output=True, timeout=20)
    assert real.returncode == -signal.SIGTERM, f"bash was not killed by its own pkill here: {real}"
    rc, doc = cli.json("lint", "bash -c 'eval pkill -f train.py'")
    kinds = [(f["rule"], f["severity"]) for f in doc["result"]["findings"]]
    assert ("self-kill", "error") in kinds and rc != 0, (rc, kinds)
