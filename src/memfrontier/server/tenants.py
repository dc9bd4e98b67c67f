"""Tenants of the REST service: tenant names and the scope confinement (keys, usage and
in-flight slots are in :mod:`memfrontier.server.keys`).

A tenant is a name (``^[a-z0-9][a-z0-9_-]{0,62}$``).

Confinement: every scope id a request names is stored as ``<tenant>/<id>``
(:func:`tenant_scope`). The tenant name contains no ``/``, so the encoding is injective (split at
the first ``/``) and no id a request can send reaches another tenant's records: a request's
ids all carry its own tenant's prefix, and a store scope field matches only equal strings.
:func:`client_scope` strips the prefix on the way out.
"""

from __future__ import annotations

import re

from pydantic import ValidationError

from ..core.errors import explain_validation
from ..core.types import Scope, missing_scope_message

TENANT_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")


def check_tenant(tenant: str) -> str:
    """``tenant`` when it is a valid tenant name; ValueError naming the rule otherwise."""
    if not isinstance(tenant, str) or not TENANT_RE.match(tenant):
        raise ValueError(
            f"tenant must match {TENANT_RE.pattern} (lower-case letters, digits, '_' and '-'), got {tenant!r}"
        )
    return tenant


def tenant_scope(tenant: str, user_id: str | None, agent_id: str | None, run_id: str | None) -> Scope:
    """The store scope of a request of ``tenant``: each given id becomes ``<tenant>/<id>``, absent
    ids stay ``None``. Raises ValueError when no id is given (a request never reads every scope) or
    an id is not one (:class:`~memfrontier.core.types.Scope`'s rules; the message quotes the id as
    sent, without the prefix)."""
    check_tenant(tenant)
    ids = {"user_id": user_id, "agent_id": agent_id, "run_id": run_id}
    if all(v is None for v in ids.values()):
        raise ValueError(missing_scope_message("a request"))
    try:  # the client's own ids first: an error names them as sent, never the tenant's prefix
        Scope(**ids)
    except ValidationError as e:
        raise ValueError(explain_validation("the scope", e)) from None
    return Scope(**{k: None if v is None else f"{tenant}/{v}" for k, v in ids.items()})


def client_scope(tenant: str, scope: Scope) -> Scope:
    """The inverse of :func:`tenant_scope` for a stored scope of ``tenant``. Raises ValueError for
    an id outside the tenant (a confinement bug: never returned to a client)."""
    prefix = f"{tenant}/"
    out = {}
    for k in ("user_id", "agent_id", "run_id"):
        v = getattr(scope, k)
        if v is not None and not v.startswith(prefix):
            raise ValueError(f"stored {k} is outside tenant {tenant!r}")
        out[k] = None if v is None else v[len(prefix) :]
    return Scope(**out)
