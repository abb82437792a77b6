"""API keys: the keys file, and who a request's ``Authorization: Bearer KEY`` names.

One key per line; blank lines and ``#`` comments are skipped::

    # name:key  or  name key  or  key alone, then optional limits, models, class, weight
    alice:sk-alice-0123456789abcdef rpm=60 tpm=20000 concurrency=4
    batch sk-batch-0123456789abcdef concurrency=2 rpm=none class=batch weight=2
    clinic-app:sk-clinic-0123456789abcdef models=clinic,smollm2-135m-instruct
    ops:sk-ops-0123456789abcdef admin
    sk-anonymous-0123456789abcdef

A limit a line does not set comes from ``gateway.key_limits``; ``none`` lifts it.
``models=`` limits the key to those model ids (a base model or LoRA adapters): any
other is a 404 "does not exist or you do not have access to it", as OpenAI answers,
and ``/v1/models`` lists only those. Without it a key may call every model.
``class=NAME`` is the key's priority class, one of ``gateway.priority.classes``
(default ``gateway.priority.default_class``); a request may lower it, never raise it
(:mod:`serving.admission.priority`). ``weight=W`` (a number > 0, default 1) is the key's
weight in the token-fair sharing of its class (:mod:`serving.admission.bound`): a key of
weight 2 is served twice the tokens of a key of weight 1 when both want more.
``admin`` lets the key change the running stack's adapters (the admin endpoint,
:mod:`serving.admin.endpoint`); no other key may.
The name is what metrics and logs show (a key without one is named
``key-<first 8 hex digits of its sha256>``); the key itself is kept only as a
sha256 digest, and a presented key is compared with every digest in constant time.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from serving.config.gateway import KeyLimits
from serving.config.priority import CLASS_NAME, PrioritySpec
from serving.errors import AuthenticationError, ConfigError

ANONYMOUS = "anonymous"  # the caller's name when no keys are configured
MIN_KEY_CHARS = 16
_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
_KEY = re.compile(r"^[\x21-\x7e]+$")  # printable ASCII without spaces
_OPTION = re.compile(r"^([a-z_]+)=(\S*)$")
_LIMITS = tuple(KeyLimits.model_fields)
_MODELS = re.compile(r"^[A-Za-z0-9._:-]+(?:,[A-Za-z0-9._:-]+)*$")
_WEIGHT = re.compile(r"^(?:\d+(?:\.\d*)?|\.\d+)$")
_DEFAULTS = PrioritySpec()


@dataclass(frozen=True)
class Caller:
    """Who sent a request: a key's name (a bounded metrics label) and its limits."""

    name: str
    limits: KeyLimits = KeyLimits()
    models: frozenset[str] | None = None  # the model ids it may call (None: every one)
    admin: bool = False  # may change the stack's adapters (the admin endpoint)
    priority_class: str = _DEFAULTS.default_class  # the highest class its requests may have
    weight: float = 1.0  # its weight in the token-fair sharing of its class

    def may_use(self, model: str) -> bool:
        return self.models is None or model in self.models


ANONYMOUS_CALLER = Caller(ANONYMOUS)


@dataclass(frozen=True)
class KeyEntry:
    """One line of a keys file. Holds the raw key: hash it (:class:`KeyRing`), do not keep it."""

    name: str
    key: str = field(repr=False)
    limits: KeyLimits
    models: frozenset[str] | None = None
    admin: bool = False
    priority_class: str = _DEFAULTS.default_class
    weight: float = 1.0


def parse_keys(text: str, *, defaults: KeyLimits, source: str = "keys file",
               priority: PrioritySpec | None = _DEFAULTS) -> list[KeyEntry]:
    """The keys in ``text``; :class:`ConfigError` (never showing a key) on any bad line.
    ``priority``: the classes a ``class=`` may name, and the default class (None: any
    well-formed name, for a command that only needs a key to send)."""
    entries: list[KeyEntry] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = re.split(r"(?:^|\s)#", raw, maxsplit=1)[0].strip()
        if line:
            entries.append(_parse_line(line, defaults, priority, f"{source} line {number}"))
    if not entries:
        raise ConfigError(f"{source} holds no keys (every request would be refused)")
    _check_unique(entries, source)
    return entries


def read_keys_file(path: Path, *, defaults: KeyLimits,
                   priority: PrioritySpec | None = _DEFAULTS) -> list[KeyEntry]:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read API keys file {path}: {exc}") from None
    return parse_keys(text, defaults=defaults, source=str(path), priority=priority)


def _parse_line(line: str, defaults: KeyLimits, priority: PrioritySpec | None, where: str) -> KeyEntry:
    first, *rest = line.split()
    name: str | None
    if ":" in first:
        name, key = first.split(":", 1)
    elif rest and not _OPTION.match(rest[0]):
        name, key, rest = first, rest[0], rest[1:]
    else:
        name, key = None, first
    if not _KEY.match(key) or len(key) < MIN_KEY_CHARS:
        raise ConfigError(f"{where}: a key must be at least {MIN_KEY_CHARS} printable ASCII "
                          "characters without spaces (e.g. `openssl rand -hex 24`)")
    if name is None:
        name = "key-" + hashlib.sha256(key.encode()).hexdigest()[:8]
    elif not _NAME.match(name) or name == ANONYMOUS:
        raise ConfigError(f"{where}: a key name must be 1-64 of A-Z a-z 0-9 _ . - "
                          f"(and not `{ANONYMOUS}`)")
    models = [o for o in rest if o.startswith("models=")]
    classes = [o.removeprefix("class=") for o in rest if o.startswith("class=")]
    weights = [o.removeprefix("weight=") for o in rest if o.startswith("weight=")]
    limits = _limits([o for o in rest if not o.startswith(("models=", "class=", "weight=")) and o != "admin"],
                     defaults, where)
    return KeyEntry(name, key, limits, _models(models, where), admin="admin" in rest,
                    priority_class=_class(classes, priority, where), weight=_weight(weights, where))


def _class(values: list[str], priority: PrioritySpec | None, where: str) -> str:
    if not values:
        return (priority or _DEFAULTS).default_class
    known = priority is not None and values[0] in priority.names
    if len(values) > 1 or not (known or priority is None and re.match(CLASS_NAME, values[0])):
        raise ConfigError(f"{where}: class= takes one priority class of gateway.priority.classes"
                          + (f" ({', '.join(priority.names)})" if priority else ""))
    return values[0]


def _weight(values: list[str], where: str) -> float:
    if not values:
        return 1.0
    if len(values) > 1 or not _WEIGHT.match(values[0]) or not 0 < float(values[0]) <= 1000:
        raise ConfigError(f"{where}: weight= takes one number > 0 and <= 1000 (e.g. weight=2)")
    return float(values[0])


def _models(options: list[str], where: str) -> frozenset[str] | None:
    if not options:
        return None
    if len(options) > 1 or not _MODELS.match(options[0].removeprefix("models=")):
        raise ConfigError(f"{where}: models= takes one comma-separated list of model ids, e.g. "
                          "models=clinic,pharmacy")
    return frozenset(options[0].removeprefix("models=").split(","))


def _limits(options: list[str], defaults: KeyLimits, where: str) -> KeyLimits:
    values = defaults.model_dump()
    for option in options:
        match = _OPTION.match(option)
        if match is None or match[1] not in _LIMITS:  # never echoed: it may be a key
            raise ConfigError(f"{where}: after the key, only limits, models=, class=, weight= and admin may "
                              f"follow (valid: {', '.join(f'{n}=N|none' for n in _LIMITS)}, models=ID,ID, "
                              "class=NAME, weight=W, admin)")
        value = match[2]
        if value != "none" and not (value.isdigit() and int(value) >= 1):
            raise ConfigError(f"{where}: {match[1]} must be a whole number >= 1 or `none`")
        values[match[1]] = None if value == "none" else int(value)
    return KeyLimits(**values)


def _check_unique(entries: list[KeyEntry], source: str) -> None:
    names, digests = set(), set()
    for entry in entries:
        if entry.name in names:
            raise ConfigError(f"{source}: the key name `{entry.name}` is used twice")
        digest = _digest(entry.key)
        if digest in digests:
            raise ConfigError(f"{source}: the key named `{entry.name}` appears twice")
        names.add(entry.name)
        digests.add(digest)


def bearer_token(authorization: str | None) -> str | None:
    """The key in an ``Authorization: Bearer KEY`` header value, else None."""
    if authorization is None:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("latin-1", errors="replace")).digest()


class KeyRing:
    """The configured keys, as sha256 digests; tells which one a request presents."""

    def __init__(self, entries: Iterable[KeyEntry]) -> None:
        self._keys = tuple((_digest(e.key), Caller(e.name, e.limits, e.models, e.admin,
                                                           e.priority_class, e.weight)) for e in entries)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(caller.name for _, caller in self._keys)

    def identify(self, token: str | None) -> Caller:
        """The caller whose key is ``token``, or :class:`AuthenticationError`.

        Compares against every key with :func:`hmac.compare_digest` (no early exit), so
        timing does not tell how many keys there are or which one came close.
        """
        if token is None:
            raise AuthenticationError(
                "You didn't provide an API key. Send it in an Authorization header using Bearer "
                "auth (i.e. Authorization: Bearer YOUR_KEY).")
        digest, found = _digest(token), None
        for stored, caller in self._keys:
            match = hmac.compare_digest(stored, digest)
            found = caller if match else found
        if found is None:
            raise AuthenticationError("Incorrect API key provided.")
        return found
