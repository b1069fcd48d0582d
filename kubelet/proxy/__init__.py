"""tinykube's kube-proxy: one process per node that makes Services reach ready pods (userspace)."""
