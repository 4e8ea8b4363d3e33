"""kopf settings for a level-based operator that writes only what it means to write."""

from __future__ import annotations

import kopf

from ocr_operator.labels import KOPF_PREFIX, MANAGED_SELECTOR, PREFIX
from ocr_operator.wiring import WATCHED

# Watched kinds the operator does not apply (pods, Jobs, ReplicaSets): their streams are filtered server-side
# by the managed-by label. The kinds it applies are watched unfiltered (runtime/cache.py: the
# cache knows every taken name, so the apply's ownership check asks nothing).
LABEL_FILTERED = tuple((k.group, k.version, k.plural) for k in WATCHED if not k.owned)
UNFILTERED = tuple((k.group, k.version, k.plural) for k in WATCHED if k.owned)


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
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=KOPF_PREFIX)
    # No diff base: without change handlers kopf never uses one, but its default still deep-copies
    # every watched body (pods and Deployments included) on every event to build it, about a
    # tenth of the operator's CPU under load.
    settings.persistence.diffbase_storage = NoDiffBase()
    settings.persistence.finalizer = f"{PREFIX}/kopf-finalizer"
    # No kopf peering (its KopfPeering CRDs and a keep-alive write every minute): what keeps a
    # second replica from reconciling is our Lease (runtime/leader.py), taken before kopf starts.
    settings.peering.standalone = True
    # Our Events are posted by the runtime's recorder on transitions only; kopf posts none.
    settings.posting.enabled = False
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.watching.connect_timeout = 10
    settings.watching.reconnect_backoff = 1.0
    settings.networking.request_timeout = 60
    settings.networking.connect_timeout = 10
    # kopf runs a worker per watched object while its events come, and that worker keeps the last
    # body it handled until it exits: 5 s idle by default. The handlers only hand the event on, so
    # a worker that exits after half a second keeps a burst of events (hundreds of new children
    # and pods at once) from holding every body at the same time, which is the operator's peak RSS
    # (500 new OcrServices at once: peak 137 MiB against 146 MiB with the default).
    settings.queueing.idle_timeout = 0.5
    for group, version, plural in LABEL_FILTERED:
        settings.watching.label_selectors[group, version, plural] = MANAGED_SELECTOR
