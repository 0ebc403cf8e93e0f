"""What the CLI and the agent share on purpose: the protocol version, the bootstrap, the
argv words of the detached agents, the blob the package travels as, and the one message both
sides print about a GPU that is still held. Stdlib only and cheap to import: the CLI imports
this module on every call, and it imports nothing at module level.

The blob: every *.py of this package, sorted by relative path, as
"relname\\0source\\0relname\\0source..." (relname like "core/procfs.py", "ops/start.py"),
zlib-compressed; its name is the sha256 of the uncompressed bytes. The far side compiles each
source once, caches the code objects (each one marshalled) by that name, and runs __main__.py,
which imports the package as the top-level package "runward_agent" from them (no file on disk).
"""

import os

PROTOCOL = 1
# The bootstrap is the only code on the command line; it carries no request data. It reads
# "<length> <sha256>" and the zlib-compressed blob from stdin (length 0: none, the caller
# believes it is cached here; if it is not, the one reply is AgentMissing and nothing ran,
# so the caller sends it again with the blob), and hands the compressed blob on
# (AGENT_SOURCE) so the shim is started the same way, with no agent file on disk. Compiling
# the sources costs more than the rest of a status call, so the code objects are cached by
# the blob's hash in a 0700 directory of the user's own, each module marshalled on its own
# and unmarshalled only when imported (all ~55 at once cost ~3 ms of every call; a stop uses
# ~20). A cache file that is not ours or is group/world-writable is ignored (nothing
# world-writable is trusted: docs/protocol.md).
# The umask 077 around makedirs makes the parents it creates (~/.runward itself) 0700 too.
# Nothing is written into a home that is not ours (homeowner.not_ours' rule: the home, or the
# cache, owned by another user; for root, a missing home under another user's directory):
# root with another user's HOME (sudo -E) would leave root-owned files there.
# An agent starting one of its own (the shim, a health action's stop) hands it the code it
# runs, already compiled: the header "<length> <sha256> m" and the marshalled dict of modules
# (handoff()), so the child needs neither the source nor the cache, and a start needs no
# source from the CLI.
BOOTSTRAP = """import sys,os,marshal
b=sys.stdin.buffer;n,h,*m=b.readline().split();z=b.read(int(n));h=h.decode()
if m:c=marshal.loads(z);z=b'';k=2
else:
 d=os.path.join(os.environ.get('RUNWARD_HOME') or os.path.expanduser('~/.runward'),'cache')
 p=os.path.join(d,'agent-%s.%s'%(h[:32],sys.implementation.cache_tag))
 try:
  f=open(p,'rb');st=os.fstat(f.fileno())
  if st.st_uid!=os.getuid() or st.st_mode&0o22:raise OSError
  c=marshal.loads(f.read());f.close();k=1
 except Exception:
  if not z:print('{"v": 1, "ok": false, "error": {"type": "AgentMissing", "message": "agent %s is not cached here"}}'%h[:12]);sys.exit(3)
  import zlib;s=zlib.decompress(z).split(b'\\0');c={}
  for i in range(0,len(s),2):r=s[i].decode();c[r]=marshal.dumps(compile(s[i+1],'runward_agent/'+r,'exec'))
  k=0
  try:
   q=os.path.abspath(d);L=len(os.path.dirname(q));w=os.getuid()
   while not os.path.lexists(q):q=os.path.dirname(q)
   o=os.stat(q).st_uid
   if o!=w and not(w and len(q)<L):raise OSError
   u=os.umask(63);os.makedirs(d,0o700,exist_ok=True);os.umask(u);t='%s.%d'%(p,os.getpid());f=os.open(t,os.O_WRONLY|os.O_CREAT|os.O_EXCL,0o600)
   os.write(f,marshal.dumps(c));os.close(f);os.rename(t,p);k=1
  except Exception:pass
exec(marshal.loads(c['__main__.py']),{'__name__':'__main__','MODULES':c,'AGENT_SOURCE':z,'AGENT_SHA':h,'AGENT_CACHED':k})"""
# The bootstrap's first line, the same in every runward version: a shim or agent of another
# version (its bootstrap's text differs) is still known as one (procfs.is_shim, ps and kill)
BOOTSTRAP_HEAD = BOOTSTRAP.split("\n", 1)[0] + "\n"
SHIM_ARG = "runward-shim"
RESIDENT_ARG = "runward-resident"
ZLIB_LEVEL = 1  # fixed, so the same tree gives the same bytes; 9 costs 8x the time for 17% less

# Set by __main__.py when the bootstrap ran the agent: "source" (the compressed blob as it
# came, b"" when the call sent the hash alone or the code was handed over), "sha", "cached"
# (1: the code is in the cache here, 0: it could not be written, 2: handed by the agent that
# started this one), "codes" (the marshalled modules it runs). Empty in-tree, where blob()
# builds the blob from the files.
SHIPPED = {}
_OWN = []


def build_blob(pkg_dir):
    """(zlib-compressed blob, sha256 hex of the uncompressed blob) of the package in
    pkg_dir, read from the files as they are now."""
    import zlib
    raw, sha = read_blob(pkg_dir)
    return zlib.compress(raw, ZLIB_LEVEL), sha


def read_blob(pkg_dir):
    """(uncompressed blob, its sha256 hex): what a call that sends the hash alone needs
    (compressing costs more than reading and hashing the files together)."""
    import hashlib
    parts = []
    for rel in sources(pkg_dir):
        with open(os.path.join(pkg_dir, *rel.split("/")), "rb") as f:
            parts += [rel.encode(), f.read()]
    raw = b"\0".join(parts)
    return raw, hashlib.sha256(raw).hexdigest()


def sources(pkg_dir):
    """Relative paths ("a/b.py", "/" as separator) of every *.py under pkg_dir, sorted."""
    out = []
    for d, dirs, files in os.walk(pkg_dir):
        dirs[:] = [x for x in dirs if x != "__pycache__" and not x.startswith(".")]
        rel = os.path.relpath(d, pkg_dir)
        for name in files:
            if name.endswith(".py") and not name.startswith("."):
                out.append(name if rel == "." else "/".join(rel.split(os.sep) + [name]))
    return sorted(out)


def blob():
    """(compressed blob or b"", sha256) of the agent that is running: as the bootstrap got
    it when shipped (b"" when the call sent the hash alone), else built from the agent's directory."""
    if SHIPPED.get("sha"):
        return SHIPPED.get("source") or b"", SHIPPED["sha"]
    if not _OWN:
        _OWN[:] = build_blob(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # agent/, above core/
    return _OWN[0], _OWN[1]


def own_sha():
    return blob()[1]


def handoff():
    """What an agent writes to the stdin of an agent it starts (the bootstrap's header and
    what follows it, before the request): the code this one runs, marshalled, where the
    bootstrap ran it; in-tree, the compressed blob."""
    codes = SHIPPED.get("codes")
    if codes:
        import marshal
        data = marshal.dumps(codes)
        return b"%d %s m\n" % (len(data), SHIPPED["sha"].encode()) + data
    src, sha = blob()
    return b"%d %s\n" % (len(src), sha.encode()) + src


# --- the text of a GPU that is still held: the agent's stop and start say it, and so does
# the CLI when it maps a container's GPU holders through the host (runward/operations.py)

def fmt_mib(v):
    return "{:,}".format(int(v)) if isinstance(v, (int, float)) else str(v)


def holder_text(h, with_mib=True):
    if h.get("pid") is None and h.get("host_pid") is not None:
        parts = ["host pid %s" % h["host_pid"]]
    else:
        parts = ["pid %s" % (h.get("pid") if h.get("pid") is not None else (h.get("raw") or {}).get("pid", "?"))]
        if h.get("host_pid") is not None and h["host_pid"] != h.get("pid"):
            parts[0] += " (host pid %s)" % h["host_pid"]
    if h.get("state"):
        parts.append("state %s" % h["state"])
    if h.get("used_mib") is not None and with_mib:
        parts.append("%s MiB" % fmt_mib(h["used_mib"]))
    if h.get("run"):
        parts.append("run %s attempt %s%s" % (h["run"], h.get("attempt"),
                                              " (inferred from memory)" if h.get("mapped_by") == "memory" else ""))
    if h.get("other_home_run"):
        parts.append("run %s of another runward home" % h["other_home_run"])
    if h.get("outside_target"):
        parts.append("outside this target")
    return ", ".join(parts)


def held_message(g, verb="still holds"):
    """"GPU 3 still holds 71,302 MiB (pid 4242, state D, 70,000 MiB)"."""
    if g.get("missing"):
        return "GPU %s is not listed by nvidia-smi" % g["index"]
    used = g.get("used_mib")
    amount = ("%s MiB" % fmt_mib(used) if used is not None else
              "an unreadable amount of memory (memory.used reads %s)" % (g.get("raw") or {}).get("used_mib", "?"))
    hs = g.get("holders") or []
    who = "; ".join(holder_text(h, len(hs) > 1 or h.get("used_mib") != used) for h in hs) or \
        "no process listed: the driver has not freed the memory yet"
    return "GPU %s %s %s (%s)" % (g["index"], verb, amount, who)
