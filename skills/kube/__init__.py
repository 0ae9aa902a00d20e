"""The Kubernetes layer: one raw-JSON client, cluster access, GPU nodes, EFA environment, pod reading."""
