"""The rule families, one module each, named after what they check:

- selfmatch: a kill or a process listing whose pattern matches a process that encloses it
  (self-kill, self-kill-fragile, self-kill-wrapper, self-match-list);
- broadkill: a signal to every process the caller may signal, or to every process of a name
  (kill-everything, kill-by-name);
- verification: a job started, restarted or waited for with nothing that verifies it
  (kill-then-start, unverified-nohup, sleep-as-verification);
- filesystem: files copied to one filesystem and used in a container that has another
  (host-path-in-container);
- parsing: a line, or a string nested in it, that a shell cannot parse (parse-error), and
  words ssh joins that the remote shell splits again (ssh-word-split).
"""
