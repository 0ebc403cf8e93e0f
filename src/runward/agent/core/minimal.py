"""What Debian's python3-minimal lacks and the agent needs: json (and its _json accelerator)
and shutil. The hint for a target without python3 says `apt-get install -y python3-minimal`,
and there every call died with "No module named 'json'". Used only where the real module
is missing; loads and dumps give what json's do with the agent's settings (ensure_ascii,
", " and ": ", NaN allowed; indent as json writes it), checked against json in the tests."""

import os

_ESC = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\b": "\\b", "\f": "\\f"}
_UNESC = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
_CONST = {"true": True, "false": False, "null": None, "NaN": float("nan"), "Infinity": float("inf"),
          "-Infinity": float("-inf")}
_NUM = frozenset("+-0123456789.eE")


def _str(s):
    out = []
    for c in s:
        o = ord(c)
        if c in _ESC:
            out.append(_ESC[c])
        elif 0x20 <= o < 0x7f:
            out.append(c)
        elif o < 0x10000:
            out.append("\\u%04x" % o)
        else:
            o -= 0x10000
            out.append("\\u%04x\\u%04x" % (0xd800 | (o >> 10), 0xdc00 | (o & 0x3ff)))
    return '"' + "".join(out) + '"'


def _scalar(o):
    if o is None or o is True or o is False:
        return {None: "null", True: "true", False: "false"}[o]
    if isinstance(o, int):
        return int.__repr__(o)
    if isinstance(o, float):
        return "NaN" if o != o else "Infinity" if o == float("inf") else "-Infinity" if o == float("-inf") \
            else float.__repr__(o)
    if isinstance(o, str):
        return _str(o)
    raise TypeError("Object of type %s is not JSON serializable" % type(o).__name__)


def _key(k):
    return k if isinstance(k, str) else _scalar(k).strip('"')


def dumps(obj, sort_keys=False, indent=None, scalar=None):
    """json.dumps's text; scalar(o) writes each number, string and constant (this module's
    own by default; wire.json_pretty gives _json's C encoder)."""
    parts = []
    _dump(obj, parts, sort_keys, indent, 0, scalar or _scalar)
    return "".join(parts)


def _dump(o, parts, sort_keys, indent, level, scalar):
    if isinstance(o, (list, tuple, dict)) and o:
        inner = "\n" + " " * (indent * (level + 1)) if indent is not None else ""
        sep = "," + inner if indent is not None else ", "
        items = sorted(o.items()) if isinstance(o, dict) and sort_keys else o.items() if isinstance(o, dict) else o
        parts.append("{" if isinstance(o, dict) else "[")
        for i, item in enumerate(items):
            parts.append(sep if i else inner)
            if isinstance(o, dict):
                parts.append(scalar(_key(item[0])) + ": ")
                item = item[1]
            _dump(item, parts, sort_keys, indent, level + 1, scalar)
        parts.append(("\n" + " " * (indent * level) if indent is not None else "") + ("}" if isinstance(o, dict) else "]"))
    elif isinstance(o, (list, tuple, dict)):
        parts.append("{}" if isinstance(o, dict) else "[]")
    else:
        parts.append(scalar(o))


def loads(s):
    if isinstance(s, bytes):
        s = s.decode()
    t = s.strip(" \t\n\r")
    obj, end = _value(t, 0)
    if end != len(t):
        raise ValueError("not JSON: extra data at character %d" % end)
    return obj


def _ws(s, i):
    while i < len(s) and s[i] in " \t\n\r":
        i += 1
    return i


def _value(s, i):
    i = _ws(s, i)
    c = s[i:i + 1]
    if c == "{":
        return _container(s, i + 1, "}", {})
    if c == "[":
        return _container(s, i + 1, "]", [])
    if c == '"':
        return _string(s, i + 1)
    for word, v in _CONST.items():
        if s.startswith(word, i):
            return v, i + len(word)
    j = i
    while j < len(s) and s[j] in _NUM:
        j += 1
    text = s[i:j]
    if not text:
        raise ValueError("not JSON: expecting a value at character %d" % i)
    return (float(text) if any(x in text for x in ".eE") else int(text)), j


def _container(s, i, close, out):
    i = _ws(s, i)
    if s[i:i + 1] == close:
        return out, i + 1
    while True:
        if close == "}":
            i = _ws(s, i)
            if s[i:i + 1] != '"':
                raise ValueError("not JSON: expecting a name at character %d" % i)
            key, i = _string(s, i + 1)
            i = _ws(s, i)
            if s[i:i + 1] != ":":
                raise ValueError("not JSON: expecting ':' at character %d" % i)
            out[key], i = _value(s, i + 1)
        else:
            v, i = _value(s, i)
            out.append(v)
        i = _ws(s, i)
        c = s[i:i + 1]
        if c == close:
            return out, i + 1
        if c != ",":
            raise ValueError("not JSON: expecting ',' at character %d" % i)
        i += 1


def _string(s, i):
    out = []
    while True:
        j = i
        while j < len(s) and s[j] not in '"\\':
            j += 1
        if j >= len(s):
            raise ValueError("not JSON: unterminated string")
        out.append(s[i:j])
        if s[j] == '"':
            return "".join(out), j + 1
        e = s[j + 1:j + 2]
        if e == "u":
            o = int(s[j + 2:j + 6], 16)
            j += 6
            if 0xd800 <= o < 0xdc00 and s.startswith("\\u", j):
                lo = int(s[j + 2:j + 6], 16)
                if 0xdc00 <= lo < 0xe000:
                    o, j = 0x10000 + ((o - 0xd800) << 10) + (lo - 0xdc00), j + 6
            out.append(chr(o))
            i = j
        elif e in _UNESC:
            out.append(_UNESC[e])
            i = j + 2
        else:
            raise ValueError("not JSON: invalid escape at character %d" % j)


# --- shutil's two the agent uses

def which(name):
    """shutil.which(name) where shutil is there, else the same walk over PATH."""
    try:
        import shutil
        return shutil.which(name)
    except ImportError:
        pass
    for d in os.environ.get("PATH", os.defpath).split(os.pathsep):
        p = os.path.join(d or ".", name)
        if os.path.isfile(p) and os.access(p, os.X_OK):
            return p
    return None


def rmtree(path):
    """shutil.rmtree(path, ignore_errors=True): links are removed, never followed."""
    try:
        import shutil
        return shutil.rmtree(path, ignore_errors=True)
    except ImportError:
        pass
    for root, dirs, files in os.walk(path, topdown=False):
        for n in files + dirs:
            p = os.path.join(root, n)
            try:
                os.rmdir(p) if os.path.isdir(p) and not os.path.islink(p) else os.unlink(p)
            except OSError:
                pass
    try:
        os.rmdir(path)
    except OSError:
        pass
