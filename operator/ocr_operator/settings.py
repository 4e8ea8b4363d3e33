"""kopf settings for a level-based operator that writes only what it means to write."""

from __future__ import annotations

import kopf

from . import children, naming

# Children whose watch streams wake the owner's reconcile; filtered server-side by label.
CHILD_RESOURCES = tuple((k.group, k.version, k.plural) for k in children.watched())
MANAGED_SELECTOR = f"{naming.LABEL_MANAGED_BY}={naming.FIELD_MANAGER}"


class NoDiffBase(kopf.DiffBaseStorage):
    """A diff base that is never built, read or stored: the operator has only `on.event`
    handlers (handlers.py), which kopf calls without a diff."""

    def build(self, *, body, extra_fields=None):
        return {}

    def fetch(self, *, body):
        return None

    def store(self, *, body, patch, essence) -> None:
        return None


def configure(settings: kopf.OperatorSettings) -> None:
    # Persistence in annotations under our own prefix (kopf ignores it in diffs). We use no
    # change handlers, so nothing is stored in practice; fixed once so it never transitions.
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=naming.KOPF_PREFIX)
    # No diff base: without change handlers kopf never uses one, but its default still deep-copies
    # every watched body (pods and Deployments included) on every event to build it, about a
    # tenth of the operator's CPU under load.
    settings.persistence.diffbase_storage = NoDiffBase()
    settings.persistence.finalizer = f"{naming.PREFIX}/kopf-finalizer"
    # No kopf peering (its KopfPeering CRDs and a keep-alive write every minute): what keeps a
    # second replica from reconciling is our Lease (leader.py), taken before kopf even starts.
    settings.peering.standalone = True
    # Our Events are posted by status.py on transitions only; kopf posts none.
    settings.posting.enabled = False
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.watching.connect_timeout = 10
    settings.watching.reconnect_backoff = 1.0
    settings.networking.request_timeout = 60
    settings.networking.connect_timeout = 10
    for group, version, plural in CHILD_RESOURCES:
        settings.watching.label_selectors[group, version, plural] = MANAGED_SELECTOR
