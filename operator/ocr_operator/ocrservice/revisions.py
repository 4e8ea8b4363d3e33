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

Anyone who may write ConfigMaps in the namespace may edit it, and a revision is only 10 hex chars
(40 bits) of the template's sha256, few enough to forge a template that hashes to it. So a stored
template is applied only when its full sha256 (naming.template_digest) is the one the status
records for its revision (RolloutStatus.current_digest / last_good_digest, written by the operator
alone): parse_history is told those digests, and target_template never returns a stored template
without one.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
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
    # Revisions whose stored template hashes to the revision but whose full sha256 is not the
    # digest the status records for it (a forged template): treated as rejected ones.
    mismatched: tuple[str, ...] = ()
    # revision -> full digest of its stored template, for the templates the operator vouches for:
    # checked against the status' digests when read, or recorded from a rendered template. Only
    # these are ever applied from the history (target_template). Not part of what is stored.
    digests: Mapping[str, str] = field(default_factory=dict, compare=False)

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
        digests = {**self.digests, revision: naming.template_digest(template)}
        if self.entries and self.entries[-1] == (revision, text):
            return self if self.digests.get(revision) == digests[revision] else replace(self, digests=digests)
        entries = [e for e in self.entries if e[0] != revision] + [(revision, text)]
        while len(entries) > max(self.limit, 1):
            victim = next((i for i, (rev, _) in enumerate(entries[:-1]) if rev != self.last_good), None)
            if victim is None:
                break
            del entries[victim]
        kept = {rev for rev, _ in entries}
        return replace(self, entries=tuple(entries), digests={r: d for r, d in digests.items() if r in kept})

    def mark_good(self, revision: str | None) -> "History":
        """Remember ``revision`` as the last good one (it must have been recorded)."""
        if revision == self.last_good or revision is None:
            return self
        if revision not in self.revisions():
            raise KeyError(f"revision {revision} has no stored template")
        return replace(self, last_good=revision)


def parse_history(configmap: Mapping[str, Any] | None, limit: int = DEFAULT_LIMIT,
                  last_good: str | None = None, digests: Mapping[str, str] | None = None) -> History:
    """Read a History from the live ConfigMap (None or unreadable data: empty history).

    `last_good` is the status' last good revision; it is trusted only if its template is stored.
    `digests`: revision -> full digest the status records (RolloutStatus.digests); a stored
    template of such a revision with another sha256 is dropped (History.mismatched)."""
    digests = digests or {}
    if not configmap:
        return History(limit=limit)
    data = configmap.get("data") or {}
    try:
        raw = json.loads(data.get(DATA_KEY) or "[]")
    except ValueError:
        raw = []
    entries: list[tuple[str, str]] = []
    rejected: list[str] = []
    mismatched: list[str] = []
    for item in raw if isinstance(raw, list) else []:
        if isinstance(item, Mapping) and isinstance(item.get("revision"), str) and isinstance(
            item.get("template"), Mapping
        ):
            revision, template = item["revision"], item["template"]
            if not verified(revision, template):
                rejected.append(revision)
            elif revision in digests and naming.template_digest(template) != digests[revision]:
                mismatched.append(revision)
            else:
                entries.append((revision, _canonical(template)))
    stored = {rev for rev, _ in entries}
    if last_good not in stored:
        last_good = None
    return History(entries=tuple(entries), last_good=last_good, limit=limit, rejected=tuple(rejected),
                   mismatched=tuple(mismatched), digests={r: d for r, d in digests.items() if r in stored})


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
    revision, else the stored one whose full digest the operator vouches for (History.digests);
    None when the history lost it, or holds it without a digest to check it against."""
    if target_revision == desired_revision:
        return copy.deepcopy(dict(desired_template))
    if target_revision not in history.digests:
        return None
    return history.template(target_revision)
