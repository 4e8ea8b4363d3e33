"""kubectl as the tests and the demo run it: against the local cluster or an external one."""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml


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
