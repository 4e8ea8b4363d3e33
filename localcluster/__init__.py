"""The local cluster: a real Kubernetes control plane on this machine, and the tools around it.

Tooling, not tests: `make demo`, `make cluster-up`, `make images`, the benchmarks in bench/ and
the e2e tests all run on it. Nothing here is imported by the product (ocr_operator, ocr_server).

- `cluster.LocalCluster`: etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok's
  fake GPU nodes on 127.0.0.1; `start_component` / `wait_ready` / `kubeconfig_for` are how the
  other parts (the real node, the metric chain) add their processes to it.
- `realnode.RealNode`: one real kubelet node (containerd + runc) on a bridge this machine owns.
- `metrics_chain`: Prometheus + prometheus-adapter behind the custom-metrics APIService, with
  `fake_dcgm_exporter` standing in for the GPU's DCGM exporter.
- `external.ExternalCluster`: the same interface over a cluster a kubeconfig names (kind, ...).
- `imagebuild`: the product images from our own Dockerfiles, daemonless (buildah), on a Debian base
  built here; `imagestore` preloads them into the real node's containerd.
- `operator_process.OperatorProcess`, `rollout_watch.RolloutWatch`, `waiting.wait_for`,
  `ports.free_port`: what the tests, bench/ and hack/ share to drive the operator and watch it.
- `versions.env`: every version the build scripts pin, written once.

CLI: `python -m localcluster up|down|status`, `python -m localcluster.imagebuild`.
"""
