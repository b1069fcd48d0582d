"""Cluster DNS: Services and pods by name (CoreDNS's kubernetes plugin as the model)."""
