"""`runward status` from a shell whose directory was removed under it (rm -rf of a checkout):
the look for runward.toml called os.getcwd(), which raised FileNotFoundError, and the CLI died
of its traceback (exit 1) on every verb. Now it is bad input, said as such (exit 2)."""

from __future__ import annotations

import json
import subprocess


def test_a_removed_working_directory_is_said_not_a_traceback(cli, tmp_path):
    gone = tmp_path / "gone"
    gone.mkdir()
    argv = " ".join(f"'{a}'" for a in cli.argv("status", "--json"))
    p = subprocess.run(["sh", "-c", f"cd '{gone}' && rmdir '{gone}' && exec {argv}"], env=cli.env,
                       capture_output=True, text=True, timeout=60)
    assert "Traceback" not in p.stderr, p.stderr[-600:]
    doc = json.loads(p.stdout)
    assert p.returncode == 2 and doc["error"]["type"] == "BadInput", doc
    assert "no longer exists" in doc["error"]["message"] and "--config" in doc["error"]["hint"], doc
