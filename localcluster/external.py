"""A cluster that someone else runs (kind, for example), behind the `LocalCluster` interface.

The e2e tests (`CAUSALFLOW_E2E_CLUSTER=external`) and `bench/rollback_bench.py --kubeconfig` run
against the cluster a kubeconfig names. What only the local harness has (its settable DCGM
exporter, restarting its API server, the audit log, the real node) is not there: the methods
raise `NotInExternalCluster`, which the tests turn into a skip with its reason.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from localcluster.kubectl import KubectlCommands


class NotInExternalCluster(RuntimeError):
    """A part of the local harness that an external cluster does not have."""


class ExternalCluster(KubectlCommands):
    """The cluster KUBECONFIG names; offers the LocalCluster interface where it can."""

    external = True
    audit_log = None
    real_node = None
    real_node_skipped = "external cluster: the harness's real node is not part of it"

    def __init__(self, kubeconfig: Path) -> None:
        self.kubeconfig = self.operator_kubeconfig = kubeconfig
        self.bin_dir = Path(shutil.which("kubectl") or "kubectl").parent
        self.env = dict(os.environ, KUBECONFIG=str(kubeconfig))

    def set_metric(self, *args, **kwargs) -> None:
        raise NotInExternalCluster("external cluster: the DCGM metrics come from your own dcgm-exporter, "
                                   "not the harness's test exporter")

    def restart_apiserver(self) -> None:
        raise NotInExternalCluster("external cluster: the harness cannot restart its API server")
