"""Line timestamps to epoch seconds."""

import calendar
import time

from .patterns import TS_MD_RE, TS_RE


class Clock(object):
    """Line timestamps to epoch seconds; the date part of each is converted once."""

    def __init__(self, now):
        self.now = now
        # The time a line without a timestamp is stamped with: when its file was last
        # written (scan.py sets it per file read), not when this scan read it: else a CUDA
        # OOM line read 5 s after the job's exit would be stamped after that exit, the cause
        # after its effect.
        self.written = now
        self.year = time.localtime(now).tm_year
        self.hours = {}

    def parse(self, line):
        """(epoch seconds or None, end of the timestamp in LINE)."""
        m = TS_RE.match(line)
        if m:
            y, mo, d, h, mi, s, frac, tz = m.groups()
            key = (y, mo, d, h, tz)
            base = self.hours.get(key)
            if base is None:
                try:
                    base = self._hour(int(y), int(mo), int(d), int(h), tz)
                except (ValueError, OverflowError):
                    return None, 0
                self.hours[key] = base
            t = base + int(mi) * 60 + int(s)
            if frac:
                t += int(frac) / (10.0 ** len(frac))
            return t, m.end()
        m = TS_MD_RE.match(line)
        if m:
            mo, d, h, mi, s = (int(x) for x in m.groups())
            try:
                t = self._hour(self.year, mo, d, h, None) + mi * 60 + s
                if t > self.now + 86400:  # no year in the log: December's lines in January
                    t = self._hour(self.year - 1, mo, d, h, None) + mi * 60 + s
            except (ValueError, OverflowError):
                return None, 0
            return t, 0
        return None, 0

    def of(self, line):
        """Time of LINE: its timestamp, else the time its file was last written."""
        t = self.parse(line)[0]
        return self.written if t is None else t

    @staticmethod
    def _hour(y, mo, d, h, tz):
        if tz is None:  # the log's local time is the target's, where this code runs
            return time.mktime((y, mo, d, h, 0, 0, 0, 0, -1))
        t = calendar.timegm((y, mo, d, h, 0, 0, 0, 0, 0))
        if tz != "Z":
            sign = -1 if tz[0] == "+" else 1
            tz = tz[1:].replace(":", "")
            t += sign * (int(tz[:2]) * 3600 + int(tz[2:]) * 60)
        return t
