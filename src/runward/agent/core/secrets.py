"""Which environment entries are secrets, and how they are shown: the one rule both sides
use (the agent for what it sends back, the CLI for what it prints on its own), so a name
hidden in one place is never shown in another.

Stdlib only and nothing imported (no re): the agent imports this on every start."""

REDACTED = "[secret]"  # what a secret name's value is shown as
MASK = "***"  # what the password of a URL is shown as

# A name is split into words on '_' and every other character that is not a letter or a
# digit, upper-cased; it is secret when one word contains one of these (APIKEY, HFTOKEN)...
_WORD_HOLDS = ("TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "PRIVATE", "COOKIE", "KEY")
# ... starts with one of these (DB_PASS, PASSPHRASE, NPM_AUTH, AUTHORIZATION) ...
_WORD_STARTS = ("PASS", "AUTH")
# ... ends with PWD (MYSQL_PWD) or is PAT (GITHUB_PAT; a word merely holding it, PATH or
# PATTERN, is no secret).
_WORD_ENDS = ("PWD",)
_WORD_IS = ("PAT",)
# The shell's own variables, which the rule above would catch (PWD ends with PWD).
_NEVER = frozenset(("PWD", "OLDPWD", "PATH"))


def _words(name):
    words, cur = [], []
    for c in name.upper():
        if c.isalnum():
            cur.append(c)
        elif cur:
            words.append("".join(cur))
            cur = []
    if cur:
        words.append("".join(cur))
    return words


def is_secret_name(name):
    """True when an environment variable of this name holds a secret by its name's words.
    KEYBOARD counts (it holds KEY): hiding a harmless value costs a glance, showing a
    secret cannot be undone, so the rule has no exceptions beyond the shell's own three."""
    if not isinstance(name, str) or name.upper() in _NEVER:
        return False
    for w in _words(name):
        if (any(s in w for s in _WORD_HOLDS) or w.startswith(_WORD_STARTS) or w.endswith(_WORD_ENDS)
                or w in _WORD_IS):
            return True
    return False


def mask_url_passwords(text):
    """text with the password of every URL in it (scheme://user:password@host...) shown as
    ***. The user info ends at the last '@' of the authority, which ends at the first '/',
    '?', '#' or whitespace (RFC 3986, as urllib reads it): a raw '@' in a password is
    still hidden whole."""
    if not isinstance(text, str) or "://" not in text or "@" not in text:
        return text
    out, pos = [], 0
    for start, end, user, password in _url_userinfos(text):
        out.append(text[pos:start])
        out.append(user + ":" + MASK + text[text.rindex("@", start, end):end] if password else text[start:end])
        pos = end
    out.append(text[pos:])
    return "".join(out)


def url_passwords(text):
    """The passwords of the URLs in text, as mask_url_passwords finds them, each also as it
    reads percent-decoded (p%40ss is the password p@ss, which a file may write as it is)."""
    if not isinstance(text, str) or "://" not in text or "@" not in text:
        return []
    found = []
    for pw in (pw for _, _, _, pw in _url_userinfos(text) if pw):
        found.append(pw)
        decoded = _percent_decoded(pw)
        if decoded != pw:
            found.append(decoded)
    return found


def _percent_decoded(s):
    """s with each %XX as its byte (UTF-8), as urllib's unquote reads it; without urllib.parse,
    which a start does not import."""
    if "%" not in s:
        return s
    out, i = bytearray(), 0
    while i < len(s):
        h = s[i + 1:i + 3]
        if s[i] == "%" and len(h) == 2 and all(c in "0123456789abcdefABCDEF" for c in h):
            out.append(int(h, 16))
            i += 3
        else:
            out += s[i].encode("utf-8")
            i += 1
    return out.decode("utf-8", "replace")


def _url_userinfos(text):
    """(start, end, user, password) of each URL authority in text ("" where no password)."""
    pos = 0
    while True:
        i = text.find("://", pos)
        if i < 0:
            return
        start = end = i + 3
        while end < len(text) and text[end] not in "/?#" and not text[end].isspace():
            end += 1
        if end > start and text.startswith("://", end - 1):
            # the next URL began inside this authority ("amqp://u:P1@h1,amqp://u:P2@h2"): this
            # one ends before that URL's scheme, so the next search finds the next URL's "://"
            end -= 1
            while end > start and (text[end - 1].isalnum() or text[end - 1] in "+-."):
                end -= 1
        userinfo, at, _ = text[start:end].rpartition("@")
        user, colon, password = userinfo.partition(":")
        yield start, end, user, password if at and colon else ""
        pos = end


def holds_masked_password(text):
    """True when a URL in text has *** for its password: the shown form of one whose real
    password was never kept (a notify URL's), which these characters cannot stand for."""
    return isinstance(text, str) and (":" + MASK + "@") in text


def redact_value(name, value):
    """How an environment entry is shown: [secret] under a secret name, else the value with
    every URL's password masked."""
    if is_secret_name(name):
        return REDACTED
    return mask_url_passwords(value)


def redact_env(env):
    """An environment as it may be shown or sent back (the target keeps the values)."""
    return {k: redact_value(k, v) for k, v in (env or {}).items()}


def shown_multinode(part):
    """A multi-node run's part of a record as it may be shown or sent back: the secret its
    nodes prove themselves with (agent/supervise/peers.py) stays on the target."""
    if isinstance(part, dict) and part.get("secret"):
        return dict(part, secret=REDACTED)
    return part


def is_shown_form(name, value, kept):
    """True when value is what redact_value showed for the kept value: a request carrying
    it back (restart from a spec) means the kept value, not these characters."""
    return value == REDACTED or (kept is not None and value != kept and value == redact_value(name, kept))
