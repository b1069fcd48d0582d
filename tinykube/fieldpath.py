"""kube's fieldpath helpers shared by the apiserver (validation) and the kubelet (env values)."""

from __future__ import annotations


def split_subscripted_path(path: str) -> tuple[str, str] | None:
    """kube's fieldpath.SplitMaybeSubscriptedPath: "metadata.labels['k']" -> (path, "k"); None
    for a path without a subscript."""
    if not path.endswith("']"):
        return None
    head, sep, subscript = path[:-2].partition("['")
    if not sep or not head:
        return None
    return head, subscript
