"""History of pod templates, so a rollback can restore the last good one.

Pure render and parse of the owned ConfigMap ``<name>-revisions``: it holds a bounded map
revision -> rendered pod template (JSON). Which revision is the last good one is rollout
state and lives in the OcrService's ``status.lastGoodRevision`` (rollout/machine.py), where the state
machine persists it; the history is told it when read (``parse_history(..., last_good=)``), so
trimming never drops that template. The ConfigMap therefore changes only when a new template
is recorded, not when a revision becomes good (one write per rollout less). The operator
records the desired template when a rollout starts and reads the last good template back to
roll back; the ConfigMap is applied like every other child (server-side apply, ownerReference
to the OcrService), so the history survives operator restarts and goes away with the OcrService.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from . import naming

DATA_KEY = "history.json"
DEFAULT_LIMIT = 5


def configmap_name(owner_name: str) -> str:
    return naming.revisions_name(owner_name)


def _canonical(template: Mapping[str, Any]) -> str:
    return json.dumps(template, sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True)
class History:
    """Revisions oldest first, each with its template as canonical JSON (immutable)."""

    entries: tuple[tuple[str, str], ...] = ()
    last_good: str | None = None
    limit: int = DEFAULT_LIMIT
    # Revisions read from the ConfigMap whose template does not hash to them (edited by hand,
    # or tampered with): never kept, never applied, and dropped from the ConfigMap at its next write.
    rejected: tuple[str, ...] = ()

    def revisions(self) -> tuple[str, ...]:
        return tuple(rev for rev, _ in self.entries)

    def template(self, revision: str | None) -> dict[str, Any] | None:
        """A fresh copy of the stored template of ``revision``, or None."""
        for rev, text in self.entries:
            if rev == revision:
                return json.loads(text)
        return None

    def record(self, revision: str, template: Mapping[str, Any]) -> "History":
        """Store ``template`` as the newest entry; drop the oldest beyond ``limit`` but
        never the last good revision (a rollback needs it)."""
        text = _canonical(template)
        if self.entries and self.entries[-1] == (revision, text):
            return self
        entries = [e for e in self.entries if e[0] != revision] + [(revision, text)]
        while len(entries) > max(self.limit, 1):
            victim = next((i for i, (rev, _) in enumerate(entries[:-1]) if rev != self.last_good), None)
            if victim is None:
                break
            del entries[victim]
        return replace(self, entries=tuple(entries))

    def mark_good(self, revision: str | None) -> "History":
        """Remember ``revision`` as the last good one (it must have been recorded)."""
        if revision == self.last_good or revision is None:
            return self
        if revision not in self.revisions():
            raise KeyError(f"revision {revision} has no stored template")
        return replace(self, last_good=revision)


def parse_history(configmap: Mapping[str, Any] | None, limit: int = DEFAULT_LIMIT,
                  last_good: str | None = None) -> History:
    """Read a History from the live ConfigMap (None or unreadable data: empty history).

    `last_good` is the status' last good revision; it is trusted only if its template is stored."""
    if not configmap:
        return History(limit=limit)
    data = configmap.get("data") or {}
    try:
        raw = json.loads(data.get(DATA_KEY) or "[]")
    except ValueError:
        raw = []
    entries: list[tuple[str, str]] = []
    rejected: list[str] = []
    for item in raw if isinstance(raw, list) else []:
        if isinstance(item, Mapping) and isinstance(item.get("revision"), str) and isinstance(
            item.get("template"), Mapping
        ):
            if verified(item["revision"], item["template"]):
                entries.append((item["revision"], _canonical(item["template"])))
            else:
                rejected.append(item["revision"])
    if last_good not in {rev for rev, _ in entries}:
        last_good = None
    return History(entries=tuple(entries), last_good=last_good, limit=limit, rejected=tuple(rejected))


def verified(revision: str, template: Mapping[str, Any]) -> bool:
    """Whether a stored `template` is the one `revision` names: the revision is the hash of
    the template (naming.template_hash), and the template's own revision label, if any, agrees.
    Anyone allowed to edit ConfigMaps in the namespace can edit the history; a rollback must
    only ever re-apply a template the operator rendered."""
    labels = (template.get("metadata") or {}).get("labels") or {}
    label = labels.get(naming.REVISION_KEY) if isinstance(labels, Mapping) else None
    try:
        digest = naming.template_hash(template)
    except (TypeError, ValueError, AttributeError):
        return False
    return digest == revision and label in (None, revision)


def render_history(owner: Mapping[str, Any], history: History) -> dict[str, Any]:
    """The ConfigMap manifest for ``history``, owned by ``owner`` (the OcrService object:
    metadata.name, namespace and uid). Only the templates: marking a revision good changes
    the status, not this ConfigMap."""
    name = owner["metadata"]["name"]
    manifest: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": naming.metadata(owner, configmap_name(name)),
        "data": {
            DATA_KEY: json.dumps(
                [{"revision": rev, "template": json.loads(text)} for rev, text in history.entries],
                sort_keys=True,
                indent=1,
            ),
        },
    }
    return manifest


def target_template(
    target_revision: str,
    desired_revision: str,
    desired_template: Mapping[str, Any],
    history: History,
) -> dict[str, Any] | None:
    """The pod template to apply: the freshly rendered one when the target is the desired
    revision, else the stored one (None when the history lost it)."""
    if target_revision == desired_revision:
        return copy.deepcopy(dict(desired_template))
    return history.template(target_revision)
