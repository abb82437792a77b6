"""A request's priority class: its key's class, or a lower one the request asks for (pure).

A client lowers one request's class with the header ``X-Serveout-Priority-Class: NAME``
(e.g. an interactive key's overnight job sends ``batch``). A class above the key's is
refused with 403 ``permission_denied``; a name that is not a class with 400
``invalid_request_error`` (param ``X-Serveout-Priority-Class``). Without the header the
request has its key's class. OpenAI's ``service_tier`` body field stays accepted and
without effect: its tiers (``flex``, ``priority``) are prices, not our classes.
"""

from __future__ import annotations

from serving.admission.api_keys import Caller
from serving.config.priority import PrioritySpec
from serving.errors import InvalidRequestError, PermissionDeniedError

PRIORITY_HEADER = "x-serveout-priority-class"
HEADER_PARAM = "X-Serveout-Priority-Class"


def key_class(caller: Caller, spec: PrioritySpec) -> str:
    """The highest class ``caller`` may use: its key's, or the default class when its
    key names no class of ``spec`` (the anonymous caller of a stack without keys)."""
    return caller.priority_class if caller.priority_class in spec.names else spec.default_class


def request_class(caller: Caller, asked: str | None, spec: PrioritySpec) -> str:
    """The class one request runs in: ``asked`` (a header value, None when absent) if it
    is the key's class or below it; else an error the client sees."""
    own = key_class(caller, spec)
    if asked is None or not asked.strip():
        return own
    asked = asked.strip().lower()
    if asked not in spec.names:
        raise InvalidRequestError(
            f"unknown priority class `{asked[:32]}` in {HEADER_PARAM}; the classes are, highest first: "
            f"{', '.join(spec.names)}", param=HEADER_PARAM)
    if spec.rank(asked) < spec.rank(own):
        raise PermissionDeniedError(
            f"API key `{caller.name}` may not raise its priority class: its class is `{own}`, the "
            f"request asked for `{asked}`; a request may only lower its class "
            f"(classes, highest first: {', '.join(spec.names)})", param=HEADER_PARAM)
    return asked
