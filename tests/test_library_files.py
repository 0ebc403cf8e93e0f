"""The operations layer (issue 27), verbs push, deploy and pull: `import runward` calls the verb's
operation directly (no argv, nothing captured), and the operation itself answers an Outcome
whose document is the CLI's --json document, held to the very golden the CLI is
(tests/golden/), for the same files."""

from __future__ import annotations

from helpers_golden import _deploy_config, check


def test_library_push_is_the_clis_push_document(cli, tmp_path, lib):
    (cli.cwd / "a.txt").write_text("golden\n")
    dest = tmp_path / "far"
    res = lib.push({"a.txt": f"{dest}/a.txt"}, on="local")
    assert res.ok and (dest / "a.txt").read_text() == "golden\n", res.to_json()
    check("push", res.exit_code, res.to_json(), cli, tmp_path)


def test_push_operation_answers_the_clis_document_and_text(cli, tmp_path, lib):
    """The operation, typed options in, Outcome out: its document the CLI's golden, its
    human text made only when asked."""
    from runward.operations.push import PushOptions, push
    (cli.cwd / "a.txt").write_text("golden\n")
    dest = tmp_path / "far"
    out = push(PushOptions(specs=[f"a.txt:{dest}/a.txt"], on="local"))
    assert out.code == 0 and "pushed" in out.render(), out.document
    check("push", out.code, out.document, cli, tmp_path)


def test_library_deploy_is_the_clis_deploy_document(cli, tmp_path, lib):
    from runward.operations.deploy import DeployOptions, deploy
    _deploy_config(cli, tmp_path, "on")
    res = lib.deploy("g-deploy")
    assert res.ok and (tmp_path / "far" / "train.cfg").read_text() == "lr = 3e-4\n", res.to_json()
    check("deploy", res.exit_code, res.to_json(), cli, tmp_path)
    out = deploy(DeployOptions(name="g-deploy"))  # again, the operation itself: nothing differs now
    assert out.code == 0 and out.document["result"]["sent"] == [] and "1 unchanged" in out.render(), out.document


def test_library_deploy_with_a_bad_config_is_the_clis_error_document(cli, tmp_path, lib):
    _deploy_config(cli, tmp_path, "target")  # a plausible typo: the key is `on`
    res = lib.deploy("g-deploy")
    assert res.exit_code == 2, res.to_json()
    check("err_config_unknown_key", res.exit_code, res.to_json(), cli, tmp_path)


def test_deploy_of_a_run_without_files_is_bad_input_naming_the_fix(cli, lib):
    (cli.cwd / "runward.toml").write_text('[runs.g-nofiles]\ncommand = ["true"]\n')
    res = lib.deploy("g-nofiles")
    assert res.exit_code == 2 and res.error["type"] == "BadInput", res.to_json()
    assert "has no files" in res.error["message"] and "add files" in res.to_json()["error"]["hint"], res.to_json()


def test_library_pull_is_the_clis_pull_document(cli, tmp_path, lib, no_verb):
    """Pulled files are the bytes (sha256-checked); the library's document is the CLI's."""
    import hashlib
    no_verb("pull")
    src = tmp_path / "remote.bin"
    src.write_bytes(bytes(range(256)) * 64)
    res = lib.pull({str(src): str(tmp_path / "a.bin")})
    rc, doc = cli.json("pull", f"{src}:{tmp_path / 'b.bin'}")
    assert res.ok and rc == 0, (res.to_json(), doc)
    for name in ("a.bin", "b.bin"):
        assert (tmp_path / name).read_bytes() == src.read_bytes()
    digest = hashlib.sha256(src.read_bytes()).hexdigest()
    assert res.result["files"][0]["sha256"] == doc["result"]["files"][0]["sha256"] == digest
    res.to_json()["result"]["files"][0]["local"] = doc["result"]["files"][0]["local"]
    assert res.to_json() == doc
