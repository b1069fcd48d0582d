"""tinykube kubelet process."""
