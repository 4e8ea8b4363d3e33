"""kubectl as the tests and the demo run it: against the local cluster or an external one."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import yaml

from localcluster.waiting import wait_for


class KubectlCommands:
    """kubectl against a cluster: needs `bin_dir` (holding kubectl) and `env` (with KUBECONFIG)."""

    bin_dir: Path
    env: dict[str, str]

    def kubectl(self, *args: str, input: str | None = None, check: bool = True,
                timeout: float = 60) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([str(self.bin_dir / "kubectl"), *args], input=input, text=True,
                              capture_output=True, env=self.env, timeout=timeout)
        if check and proc.returncode != 0:
            error = subprocess.CalledProcessError(proc.returncode, proc.args, proc.stdout, proc.stderr)
            error.add_note(f"kubectl stderr: {proc.stderr.strip()}")  # what a failing test shows
            raise error
        return proc

    def apply(self, manifest: dict | list | str) -> None:
        if not isinstance(manifest, str):
            docs = manifest if isinstance(manifest, list) else [manifest]
            manifest = yaml.safe_dump_all(docs)
        self.kubectl("apply", "-f", "-", input=manifest)

    def get_object(self, kind: str, name: str, namespace: str | None = None) -> dict | None:
        """`kubectl get KIND NAME -o json`, or None when it does not exist (the local cluster reads
        it over a kept-alive connection instead: LocalCluster.get_object)."""
        proc = self.kubectl("get", kind, name, *(["-n", namespace] if namespace else []), "-o", "json",
                            "--show-managed-fields", check=False)
        if proc.returncode != 0:
            if "NotFound" in proc.stderr or "not found" in proc.stderr:
                return None
            raise AssertionError(proc.stderr)
        return json.loads(proc.stdout)

    def require_object(self, kind: str, name: str, namespace: str | None = None) -> dict:
        """get_object, failing (AssertionError naming it) when the object does not exist."""
        obj = self.get_object(kind, name, namespace)
        if obj is None:
            raise AssertionError(f"{kind} {namespace + '/' if namespace else ''}{name} not found")
        return obj

    def wait_default_serviceaccount(self, namespace: str, timeout: float = 30) -> None:
        """Until the namespace's default ServiceAccount exists (a pod created before it is refused)."""
        wait_for(lambda: self.get_object("serviceaccount", "default", namespace) is not None, timeout=timeout,
                 message=f"default ServiceAccount in {namespace}")

    def list_objects(self, kind: str, namespace: str | None = None, selector: str | None = None,
                     fields: str | None = None) -> list[dict]:
        """`kubectl get KIND [-l SELECTOR] [--field-selector FIELDS] -o json`'s items."""
        args = ["get", kind, *(["-n", namespace] if namespace else []), "-o", "json"] + (["-l", selector] if selector else []) \
            + (["--field-selector", fields] if fields else [])
        return json.loads(self.kubectl(*args).stdout)["items"]
