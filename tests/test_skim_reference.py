"""The skim (logmetrics/skim.py) held to the line-by-line parse on random logs: training lines,
every event text and NaN/Inf spelling in odd cases, near misses, tracebacks, CRLF, invalid
UTF-8, very long lines, chunks cut anywhere. The reference is the full parse of the whole log
(every line through the parser), never the skim: the same facts, line numbers, lines and
repeats, and the same line count; and each line the parser calls an event or a NaN is hit.
Chunks with and without an upper-case N/A/I/F take the skim's two ways (raw and folded)."""

from __future__ import annotations

import time
import types

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from runward.agent import logmetrics as lm
from runward.agent.logmetrics import reader as lm_reader
from runward.agent.logmetrics import skim as lm_skim

from helpers_skim import FACTS, log

def evidence(alerts):
    return [(a["kind"], a["line_no"], a["line"], a.get("repeats", 0)) for a in alerts if a["kind"] in FACTS]


def matters(ln):
    """The reference: a line the parser calls an event (EVENT_RE), or one with a NaN/Inf value."""
    values = lm.parse_line(ln.decode("utf-8", "replace")) or {}
    return bool(lm.EVENT_RE.search(ln + b"\n")) or any(v != v or v in (float("inf"), float("-inf"))
                                                       for v in values.values())


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(body=log())
def test_the_skim_finds_what_the_line_by_line_parse_finds(tmp_path_factory, body):
    """Through lm.scan: the whole log parsed line by line against all of it skimmed but the
    last byte, in one chunk: the same facts, numbers, lines and repeats (chunks cut anywhere:
    test_chunks_and_the_skims_end_cut_anywhere_change_no_fact)."""
    body += b"step 1 | loss 2.0000\n"
    path = tmp_path_factory.mktemp("skim") / "train.log"
    path.write_bytes(body)
    now = time.time()
    full = lm.scan(str(path), {}, {"max_bytes": len(body) + 1, "drop_fraction": 0}, now)
    sk = lm.scan(str(path), {}, {"max_bytes": 1, "drop_fraction": 0, "skim": True}, now)
    assert sk["lines"] == full["lines"] and sk["bytes"] == len(body)
    assert evidence(sk["alerts"]) == evidence(full["alerts"])


class Record(object):
    """A feed that keeps each line handed to it, by number."""

    def __init__(self):
        self.lines, self.fed = 0, {}
        self.events = types.SimpleNamespace(tracebacks=types.SimpleNamespace(open={}), quiet={})
        self.rules = types.SimpleNamespace(violating={})

    def feed(self, buf):
        for n, ln in enumerate(buf.split(b"\n")[:-1], self.lines + 1):
            self.fed[n] = ln
        self.lines += buf.count(b"\n")


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(body=log(), chunk=st.integers(64, 9000), budget=st.integers(0, 3000))
def test_each_line_that_matters_is_fed_with_its_number(tmp_path, body, chunk, budget):
    """Skim.run in chunks cut anywhere: every line the reference calls an event or a NaN is
    handed to the feed, whole and with its number, and every line is counted."""
    path = tmp_path / "train.log"
    path.write_bytes(body)
    rec, cursor = Record(), lm_reader.Cursor({})
    old_chunk = lm_skim.CHUNK
    lm_skim.CHUNK = chunk
    try:
        with open(path, "rb") as f:
            lm_skim.Skim(rec).run(f, cursor, max(0, len(body) - budget))
    finally:
        lm_skim.CHUNK = old_chunk
    lines = body[:cursor.offset].split(b"\n")[:-1]
    assert rec.lines == len(lines) + cursor.skip_long  # a cut line counts when it is cut
    for n, ln in enumerate(lines, 1):
        if len(ln) <= lm_reader.CARRY_MAX and matters(ln):
            assert rec.fed.get(n) == ln, (n, ln[:200])


def skimmed(path, chunk, budget, now):
    """lm.scan of PATH with the skim's chunks CHUNK bytes and the newest BUDGET bytes parsed."""
    old_chunk = lm_skim.CHUNK
    lm_skim.CHUNK = chunk
    try:
        return lm.scan(str(path), {}, {"max_bytes": budget, "drop_fraction": 0, "skim": True}, now)
    finally:
        lm_skim.CHUNK = old_chunk


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(body=log(), chunk=st.integers(64, 9000), budget=st.integers(1, 3000))
# a line with a progress word that is no progress ("val_loss=na") after the one that is, at a
# chunk's end while an OOM's burst is open: the skim fed only the later one, the burst stayed
# open, and the next "Killed" read as a repeat (found by this test in a full run)
@example(body=b"Killed\r\nstep 0 | loss 0.0000 | tok/s 14000 | lr 3.0e-04\r\nepoch 0 val_loss=na, seen\r\n"
              b"\x00\r\nKilled\r\n", chunk=64, budget=22)
def test_chunks_and_the_skims_end_cut_anywhere_change_no_fact(tmp_path_factory, body, chunk, budget):
    """Chunks cut anywhere, the skim's end anywhere: the facts, numbers, lines and repeats of
    the line-by-line parse. A burst's progress line in one chunk and its next event in the
    next (or after the skim's end) make that event a new alert, as line by line."""
    body += b"step 1 | loss 2.0000\n"
    path = tmp_path_factory.mktemp("skim") / "train.log"
    path.write_bytes(body)
    now = time.time()
    full = lm.scan(str(path), {}, {"max_bytes": len(body) + 1, "drop_fraction": 0}, now)
    sk = skimmed(path, chunk, budget, now)
    assert sk["lines"] == full["lines"]
    assert evidence(sk["alerts"]) == evidence(full["alerts"])


def test_an_event_just_after_a_chunk_boundary_is_a_new_burst(tmp_path):
    """CUDA OOM, training goes on (its last progress line ends the first chunk), CUDA OOM
    again first thing in the next chunk: two alerts, as line by line; the same where the
    skim's end falls between the progress line and the second OOM."""
    head = b"".join(b"step %d | loss 2.%04d | tok/s 14000\n" % (i, i) for i in range(40))
    oom = b"RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
    body = head + oom + b"step 41 | loss 2.0041 | tok/s 14000\n"
    second = len(body)
    body += oom + head
    path = tmp_path / "train.log"
    path.write_bytes(body)
    now = time.time()
    full = lm.scan(str(path), {}, {"max_bytes": len(body) + 1, "drop_fraction": 0}, now)
    assert [(a["kind"], a.get("repeats", 0)) for a in full["alerts"]] == [("cuda_oom", 0), ("cuda_oom", 0)]
    at_boundary = skimmed(path, second, len(head), now)  # the first chunk ends at the second OOM
    at_the_end = skimmed(path, 1 << 20, len(body) - second, now)  # the skim ends there
    for sk in (at_boundary, at_the_end):
        assert evidence(sk["alerts"]) == evidence(full["alerts"])
