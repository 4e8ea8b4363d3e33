"""Make kopf watch an optional API (ServiceMonitor, PrometheusRule) that appeared after it started.

kopf starts watching a custom resource when a CustomResourceDefinition event arrives and the API
server's discovery already lists the resource: on each CRD event it rescans that CRD's group, and
at no other time. The API server publishes a new CRD in discovery a moment after the CRD's last
event (Established), so kopf can miss it and never watch the kind until the operator restarts. A
ServiceMonitor changed by someone else would then be repaired only at the next resync (minutes).

The operator's own discovery loop polls (`Controller._discovery`); when it sees an optional API
appear it calls `KopfRescan.rescan(group)`, which does what kopf does for a CRD event. These are
kopf's internal observation functions (kopf is pinned to a minor version in pyproject.toml).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import kopf

log = logging.getLogger("ocr_operator.rescan")


@dataclass
class KopfRescan:
    """kopf's view of the served resources (`insights`, also passed to `kopf.run`) and its registry."""

    insights: Any
    settings: kopf.OperatorSettings
    registry: Any = None

    async def rescan(self, group: str) -> None:
        from kopf._cogs.clients import scanning
        from kopf._core.reactor import observation

        registry = self.registry if self.registry is not None else kopf.get_default_registry()
        resources = await scanning.scan_resources(groups={group}, settings=self.settings, logger=log)
        async with self.insights.revised:
            observation.revise_resources(resources=resources, insights=self.insights, registry=registry, group=group)
            await self.insights.backbone.fill(resources=resources)
            self.insights.revised.notify_all()
        log.info("asked kopf to rescan API group %s: %d resource(s) served", group, len(resources))


def new_insights() -> Any:
    """The object kopf keeps its served resources in; `kopf.run(insights=...)` takes it."""
    from kopf._cogs.structs.references import Insights

    return Insights()
