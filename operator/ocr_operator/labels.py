"""The operator's own names on everything it writes, shared by both controllers.

One field manager (server-side apply, the User-Agent, the Events' source), the
``app.kubernetes.io/*`` labels every child carries, and keys under the API group as prefix. The
runtime gets them as its Identity (``IDENTITY``): it writes none of them itself.
"""

from __future__ import annotations

from ocr_operator import __version__
from ocr_operator.runtime.identity import Identity
from ocr_operator.spec import GROUP

FIELD_MANAGER = "causalflow-ocr-operator"
APP_NAME = "causalflow-ocr"

PREFIX = GROUP  # annotation and label keys of our own: ocr.causalflow.dev/...
APPLIED_HASH_KEY = f"{PREFIX}/applied-hash"
KOPF_PREFIX = f"kopf.{PREFIX}"

LABEL_NAME = "app.kubernetes.io/name"
LABEL_INSTANCE = "app.kubernetes.io/instance"
LABEL_COMPONENT = "app.kubernetes.io/component"
LABEL_PART_OF = "app.kubernetes.io/part-of"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_SELECTOR = f"{LABEL_MANAGED_BY}={FIELD_MANAGER}"

IDENTITY = Identity(field_manager=FIELD_MANAGER, version=__version__, managed_label=LABEL_MANAGED_BY,
                    applied_hash_key=APPLIED_HASH_KEY)


def common(component: str) -> dict[str, str]:
    """The app.kubernetes.io labels every object the operator writes carries (its owner's label
    comes on top: app.kubernetes.io/instance for an OcrService, PREFIX/batch for an OcrBatch)."""
    return {LABEL_NAME: APP_NAME, LABEL_COMPONENT: component, LABEL_PART_OF: APP_NAME, LABEL_MANAGED_BY: FIELD_MANAGER}
