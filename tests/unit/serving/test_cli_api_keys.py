"""`serving up --api-keys-file`: checked before anything starts, resolved, announced."""

import pytest

from serving import cli

KEY = "sk-alice-0123456789abcdef"


@pytest.fixture
def no_cluster(monkeypatch):
    """Fails the test instead of starting Ray or preparing a model."""
    import serving.cluster.local

    def refuse(*_, **__):
        raise AssertionError("serving up went on to start the stack")

    monkeypatch.setattr(serving.cluster.local, "LocalCluster", refuse)
    monkeypatch.setattr(cli, "prepare_in_subprocess", refuse)


@pytest.mark.parametrize("content", [None, "alice:short\n", "# nothing\n"])
def test_a_bad_keys_file_stops_serving_up_with_one_line_and_exit_2(tmp_path, capsys, no_cluster, content):
    path = tmp_path / "keys.txt"
    if content is not None:
        path.write_text(content)
    assert cli.main(["up", "--api-keys-file", str(path)]) == 2
    err = capsys.readouterr().err
    assert "error:" in err and "Traceback" not in err


def test_a_relative_keys_file_is_made_absolute_for_the_gateway(tmp_path, monkeypatch):
    (tmp_path / "keys.txt").write_text(f"alice:{KEY} rpm=5\n")
    monkeypatch.chdir(tmp_path)
    args = cli.build_parser().parse_args(["up", "--api-keys-file", "keys.txt", "--metrics-public"])
    config = cli.stack_config_from_args(args, cli._store())
    assert config.gateway.api_keys_file == tmp_path / "keys.txt"
    assert config.gateway.metrics_public
    keys = cli.load_keys(config)
    assert [k.name for k in keys] == ["alice"] and keys[0].limits.rpm == 5
    assert cli.auth_headers(keys) == {"Authorization": f"Bearer {KEY}"}
    said = cli.describe_auth(config, keys, "http://x")
    assert "API keys: 1" in said and "/metrics" not in said and KEY not in said


def test_without_keys_serving_up_says_so_loudly():
    args = cli.build_parser().parse_args(["up"])
    config = cli.stack_config_from_args(args, cli._store())
    assert cli.load_keys(config) == [] and cli.auth_headers([]) == {}
    assert not config.gateway.metrics_public
    assert "NO AUTHENTICATION" in cli.describe_auth(config, [], "http://x")
