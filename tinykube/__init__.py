"""tinykube: a small, real, multi-process Kubernetes-style control plane."""
