"""The oracle's job: a stand-in for a training script, deployed by runward and driven by the
oracle from outside, as the world drives a real job (signals, a control file).

argv: job.py TOKEN. It writes what it is to ran-TOKEN beside itself (its own word: the code
version it runs, for invariant 5), keeps one worker child (its data loader), prints a line, and waits. The worker reads a pipe from the job, so it ends with the job (as a data loader
worker does) and an exit by itself leaves no stray unless an escape was asked for. On SIGUSR1
it reads ctl-TOKEN beside itself and does what it says:
    exit N           exit with code N
    signal N         kill itself with signal N
    escape KIND      leave a process behind that carries TOKEN in its command line:
                     setsid (new session), double (double fork), envi (double fork, env -i)
    nan 0            print a NaN loss line
On SIGTERM (a stop's signal) it appends its nonce to term-TOKEN beside itself, as a training
script writes its checkpoint, then dies by that signal: the oracle reads there whether the
handler ran (a paused job's stop must resume it).
Every process it makes carries TOKEN in its command line, so the oracle finds them by token
and by ancestry, never by asking runward. Stdlib only: it runs in the containers too."""
import os
import signal
import subprocess
import sys
import time

VERSION = "v0"
HERE = os.path.dirname(os.path.abspath(__file__))
TOKEN = sys.argv[1]


def sleeper(tag):
    # `; :` keeps sh alive above sleep, so the token stays visible in a command line
    return ["sh", "-c", "sleep 3600; : %s-%s" % (TOKEN, tag)]


def escape(kind):
    if kind == "setsid":
        subprocess.Popen(sleeper("setsid"), start_new_session=True, stdin=subprocess.DEVNULL)
        return
    sys.stdout.flush()
    pid = os.fork()
    if pid:
        os.waitpid(pid, 0)
        return
    os.setsid()
    os.closerange(3, 4096)  # not the worker's pipe: the worker must end with the job
    if os.fork():
        os._exit(0)
    env = {} if kind == "envi" else dict(os.environ)
    os.execvpe("sh", sleeper(kind), dict(env, PATH="/usr/bin:/bin"))


def on_usr1(signum, frame):
    with open(os.path.join(HERE, "ctl-" + TOKEN)) as f:
        verb, arg = f.read().split()
    print("oracle-job %s: %s %s" % (TOKEN, verb, arg), flush=True)
    if verb == "exit":
        os._exit(int(arg))
    if verb == "signal":
        signal.signal(int(arg), signal.SIG_DFL)
        os.kill(os.getpid(), int(arg))
    if verb == "escape":
        escape(arg)
    if verb == "nan":   # a diverged loss, as a training script logs it (a health action's cue)
        print("iter 3010: loss nan", flush=True)


def on_term(signum, frame):
    with open(os.path.join(HERE, "term-" + TOKEN), "a") as f:
        f.write("%s\n" % main.nonce)
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def main():
    signal.signal(signal.SIGUSR1, on_usr1)
    nonce = main.nonce = "%d.%d" % (os.getpid(), time.time_ns())
    signal.signal(signal.SIGTERM, on_term)
    # printed before it is recorded: a ran- line names a line the job has printed, so a stop
    # landing between the two (a loaded machine, a short settle) cannot pass for a lost line
    print("oracle-job %s version %s nonce %s" % (TOKEN, VERSION, nonce), flush=True)
    with open(os.path.join(HERE, "ran-" + TOKEN), "a") as f:
        f.write("%s %s\n" % (VERSION, nonce))
    # kept referenced: the pipe's write end must stay open while the job lives
    main.worker = subprocess.Popen(["sh", "-c", "read x; : %s-worker" % TOKEN], stdin=subprocess.PIPE)
    while True:
        signal.pause()


main()
