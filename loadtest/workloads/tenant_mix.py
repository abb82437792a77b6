"""The tenants of one load test: who sends each session, with which key and class (pure).

serveout's gateway knows its callers by API key; each key has a priority class (a
request may lower its own with the header :data:`PRIORITY_HEADER`), limits and a fair
share. A tenant mix (``--tenant``, ``--tenants FILE``) drives several at once: a tenant
has a name, a key, an optional class, a weight (its share of the sessions), an
optional SLO of its own (the ``--slo`` syntax) and optionally requests of its own (a
``workload``, in the ``--workload`` syntax: a clinic's short chats beside a batch
job's long summaries).

The sessions are spread over the tenants as ``--model-mix`` spreads them over models:
each stage's sessions get exactly the weights' shares, in an order shuffled with the
stage's seed (:func:`~loadtest.workloads.model_mix.shuffled_quotas`); every request of a
session is its tenant's. A tenant with a workload of its own sends its own sessions in
its share of the places (:func:`assign_tenants`); the arrival profile stays the run's,
so a tenant's request rate is its share of the profile's. A key is given as it is or as
``env:VAR`` (read from the environment when the run starts: :meth:`TenantMix.keys`).
Reports name tenants only: a key given as it is is written :data:`HIDDEN`, an
``env:VAR`` as that reference.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import (AliasChoices, BaseModel, ConfigDict, Field, ValidationError, field_serializer, field_validator,
                      model_validator)

from loadtest.analysis.slo import Objective, parse_slos
from loadtest.errors import ConfigError, SLOError
from loadtest.workloads import TraceWorkload, WorkloadConfig, parse_workload
from loadtest.workloads.base import WorkloadContext, WorkloadPlan
from loadtest.workloads.model_mix import Weight, positive, shuffled_quotas

PRIORITY_HEADER = "X-Serveout-Priority-Class"
HIDDEN = "<hidden>"  # a key given as it is, as summaries and reports show it
ENV = "env:"
FIELDS = ("name", "key", "class", "weight", "slo", "workload")
TENANT_SEED_STRIDE = 7_919  # a tenant's own sessions are drawn with the stage's seed + this x its rank
SYNTAX = "name=NAME,key=KEY|env:VAR[,class=CLASS][,weight=W][,workload=NAME:k=v][,ttft_p95=500ms,...]"


class TenantSpec(BaseModel):
    """One tenant: ``key`` as it is or ``env:VAR``; ``priority_class`` (``class`` in
    files and on the command line) sent as :data:`PRIORITY_HEADER` (without it, the
    key's own class applies); ``weight`` its share of the sessions; ``slos`` its own
    SLO (``slo: "ttft_p95=500ms,..."`` in a file); ``workload`` its own requests
    (``workload: "random:input_len=2000,output_len=200"`` in a file; on the command
    line one parameter at most, the items being comma-separated; None: the run's)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1, pattern=r"^[\w.-]+$")
    key: str = Field(min_length=1, repr=False)
    priority_class: str | None = Field(None, min_length=1, validation_alias=AliasChoices("class", "priority_class"))
    weight: Weight = 1.0
    slos: tuple[Objective, ...] = ()
    workload: WorkloadConfig | None = None

    @field_validator("workload", mode="before")
    @classmethod
    def _workload_text(cls, value: Any) -> Any:
        if isinstance(value, str):
            try:
                return parse_workload(value)
            except ConfigError as exc:
                raise ValueError(str(exc)) from None
        return value

    @field_validator("workload")
    @classmethod
    def _not_a_trace(cls, value: WorkloadConfig | None) -> WorkloadConfig | None:
        if isinstance(value, TraceWorkload):
            raise ValueError("a trace's requests are replayed as the run's workload, not as one tenant's")
        return value

    @model_validator(mode="before")
    @classmethod
    def _slo_text(cls, data: Any) -> Any:
        if isinstance(data, dict) and "slo" in data:
            rest = {k: v for k, v in data.items() if k != "slo"}
            try:
                return {**rest, "slos": parse_slos(str(data["slo"]))}
            except SLOError as exc:
                raise ValueError(f"slo: {exc}") from None
        return data

    @model_validator(mode="after")
    def _env(self) -> TenantSpec:
        if self.key.startswith(ENV) and not self.key[len(ENV):]:
            raise ValueError("key env: needs a variable name (env:VAR)")
        return self

    @field_serializer("key")
    def _hide(self, key: str) -> str:
        return key if key.startswith(ENV) else HIDDEN

    def resolve_key(self, environ: Mapping[str, str]) -> str:
        """The key to send: as given, or the environment variable ``env:VAR`` names."""
        if not self.key.startswith(ENV):
            return self.key
        value = environ.get(var := self.key[len(ENV):], "")
        if not value:
            raise ConfigError(f"tenant {self.name!r}: the environment variable {var} (its key) is unset or empty")
        return value

    def describe(self) -> str:
        """``name=weight (class) [workload kind]``, without the key."""
        return (f"{self.name}={self.weight:g}" + ("" if self.priority_class is None else f" ({self.priority_class})")
                + ("" if self.workload is None else f" [{self.workload.kind}]"))


class TenantMix(BaseModel):
    """The tenants of a run (names unique)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tenants: tuple[TenantSpec, ...] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique(self) -> TenantMix:
        names = [t.name for t in self.tenants]
        if twice := sorted({n for n in names if names.count(n) > 1}):
            raise ValueError(f"tenant {', '.join(map(repr, twice))} given twice")
        return self

    def describe(self) -> str:
        return ", ".join(t.describe() for t in self.tenants)

    def shares(self) -> dict[str, float]:
        """Tenant name -> share of the sessions (summing to 1)."""
        total = sum(t.weight for t in self.tenants)
        return {t.name: t.weight / total for t in self.tenants}

    def keys(self, environ: Mapping[str, str]) -> dict[str, str]:
        """Tenant name -> the key it sends (:class:`ConfigError` for an unset ``env:VAR``)."""
        return {t.name: t.resolve_key(environ) for t in self.tenants}

    def objectives(self) -> dict[str, tuple[Objective, ...]]:
        """Tenant name -> its own SLO (empty: none)."""
        return {t.name: t.slos for t in self.tenants}

    def classes(self) -> dict[str, str | None]:
        return {t.name: t.priority_class for t in self.tenants}

    def workloads(self) -> dict[str, WorkloadConfig]:
        """Tenant name -> its own workload (the tenants that have one)."""
        return {t.name: t.workload for t in self.tenants if t.workload is not None}


def tenant_headers(key: str, priority_class: str | None) -> dict[str, str]:
    """The request headers that make a request a tenant's."""
    return {"Authorization": f"Bearer {key}", **({PRIORITY_HEADER: priority_class} if priority_class else {})}


def tenant_plans(mix: TenantMix | None, pool: int, ctx: WorkloadContext) -> dict[str, WorkloadPlan]:
    """The sessions of each tenant with a workload of its own: as many as its share of a
    stage's ``pool``, each tenant's drawn with a seed of its own."""
    if mix is None:
        return {}
    shares = mix.shares()
    return {name: workload.build(max(1, math.ceil(pool * shares[name])),
                                 dataclasses.replace(ctx, seed=ctx.seed + TENANT_SEED_STRIDE * (index + 1)))
            for index, (name, workload) in enumerate(mix.workloads().items())}


def assign_tenants(plan: WorkloadPlan, mix: TenantMix | None, seed: int,
                   own: Mapping[str, WorkloadPlan] | None = None) -> WorkloadPlan:
    """``plan`` with every session given a tenant (and its class) in the mix's exact
    shares, in an order shuffled with ``seed``; a tenant in ``own`` (its own workload's
    plan) gets its own sessions in its places, in turn; ``plan`` itself without a mix."""
    if mix is None:
        return plan
    own = own or {}
    classes = mix.classes()
    names = shuffled_quotas(mix.shares(), len(plan.sessions), f"tenant-mix:{seed}")
    systems, offsets = list(plan.systems), {}
    for name, tenant_plan in own.items():
        offsets[name] = len(systems)
        systems.extend(tenant_plan.systems)
    sent = dict.fromkeys(own, 0)
    sessions = []
    for session, name in zip(plan.sessions, names):
        if name in own:  # its own session, in the run's session's place (and id)
            pool = own[name].sessions
            mine = pool[sent[name] % len(pool)]
            sent[name] += 1
            system = None if mine.system is None else mine.system + offsets[name]
            session = mine.model_copy(update={"id": session.id, "system": system})
        sessions.append(session.model_copy(update={"tenant": name, "priority_class": classes[name]}))
    return plan.model_copy(update={"sessions": tuple(sessions), "systems": tuple(systems)})


def parse_tenant(text: str) -> dict[str, Any]:
    """One ``--tenant`` (:data:`SYNTAX`) as the fields of a :class:`TenantSpec`; items
    that are no field are objectives of its SLO."""
    fields: dict[str, Any] = {}
    slo: list[str] = []
    for number, item in enumerate((part.strip() for part in text.split(",")), 1):
        name, sep, value = (part.strip() for part in item.partition("="))
        if not sep or not name:  # the item is not shown: it may be a key
            raise ConfigError(f"--tenant: item {number} is not FIELD=VALUE ({SYNTAX})")
        if name in fields:
            raise ConfigError(f"--tenant: {name!r} is given twice")
        if name in FIELDS:
            fields[name] = value
            continue
        try:
            parse_slos(item)
        except SLOError:
            raise ConfigError(f"--tenant: unknown field {name!r} (fields: {', '.join(FIELDS)}, "
                              "or an objective such as ttft_p95=500ms)") from None
        slo.append(item)
    if "weight" in fields:
        try:
            fields["weight"] = positive(fields["weight"], "the weight")
        except ValueError as exc:
            raise ConfigError(f"--tenant: {exc}") from None
    if slo:
        if "slo" in fields:
            raise ConfigError("--tenant: give objectives either as slo=... or as items")
        fields["slo"] = ",".join(slo)
    return fields


def read_tenants(path: Path) -> list[Any]:
    """The tenants of a YAML or JSON file: a list, or a mapping with ``tenants:``."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"--tenants: cannot read {path}: {exc.strerror}") from None
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        raise ConfigError(f"--tenants {path}: not valid {path.suffix.lstrip('.') or 'YAML'}: {exc}") from None
    if isinstance(data, dict) and set(data) == {"tenants"}:
        data = data["tenants"]
    if not isinstance(data, list) or not all(isinstance(t, dict) for t in data):
        raise ConfigError(f"--tenants {path}: expected a list of tenants (or `tenants:` and that list)")
    return data


def tenant_mix(items: Sequence[Mapping[str, Any]], where: str) -> TenantMix:
    """A :class:`TenantMix` of tenants' fields; :class:`ConfigError` naming ``where``
    and the tenant otherwise."""
    try:
        return TenantMix(tenants=tuple(items))  # type: ignore[arg-type]
    except ValidationError as exc:
        raise ConfigError(f"{where}: {_problem(exc, items)}") from None


def parse_tenants(items: Sequence[str] = (), path: Path | None = None) -> TenantMix | None:
    """The mix of ``--tenants FILE`` and each ``--tenant`` (``None`` for neither)."""
    fields = [*(read_tenants(path) if path is not None else ()), *map(parse_tenant, items)]
    if not fields:
        return None
    return tenant_mix(fields, "--tenants" if path is not None else "--tenant")


def _problem(exc: ValidationError, items: Sequence[Mapping[str, Any]]) -> str:
    error = exc.errors()[0]
    loc = list(error["loc"])
    who = ""
    if len(loc) >= 2 and loc[0] == "tenants" and isinstance(loc[1], int):
        name = items[loc[1]].get("name") if isinstance(items[loc[1]], Mapping) else None
        who = f"tenant {name if name else loc[1] + 1!r}: "
        loc = loc[2:]
    field = ".".join(str(part) for part in loc if part != "priority_class")
    if error["type"] == "extra_forbidden":
        return f"{who}unknown field {field!r} (fields: {', '.join(FIELDS)})"
    if error["type"] == "missing":
        return f"{who}{field} is missing"
    if field in ("key",) and error["type"] == "string_too_short":
        return f"{who}the key is empty"
    msg = error["msg"].removeprefix("Value error, ")
    return f"{who}{field + ': ' if field else ''}{msg}"
