"""ImageLocality (Score; weight 1): prefer nodes that already hold the pod's images.

kube's scaledImageScore: each image's size weighted by the share of nodes holding it, summed,
clamped between 23 MB and 1000 MB per container, and scaled to 0-100.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from scheduler.cache import (
    EventKind,
    NodeTable,
)
from scheduler.framework import (
    MAX_NODE_SCORE,
    CycleState,
)
from scheduler.plugins.helper import I64, IDX
from scheduler.podinfo import PodInfo

MB = 1024 * 1024
IMAGE_MIN_THRESHOLD = 23 * MB
IMAGE_MAX_CONTAINER_THRESHOLD = 1000 * MB


class ImageLocality:
    name: ClassVar[str] = "ImageLocality"
    events: ClassVar[frozenset[EventKind]] = frozenset()
    node_static: ClassVar[bool] = True

    def score(self, state: CycleState, pod: PodInfo, nodes: NodeTable, idx: IDX) -> I64:
        n = nodes.n
        size = n if idx is None else len(idx)
        held = [(im, nodes.images[im]) for im in pod.images if nodes.images.get(im)]
        if not held:
            return np.zeros(size, np.int64)  # the common case: no node has the images
        total = np.zeros(n, np.int64)
        count = max(nodes.count, 1)
        for _im, holders in held:
            # scaledImageScore: size weighted by the fraction of nodes holding the image
            slots = np.fromiter(holders.keys(), np.intp, len(holders))
            sizes = np.fromiter(holders.values(), np.int64, len(holders))
            total[slots] += sizes * len(holders) // count
        n_containers = max(len(pod.pod.spec.containers), 1)
        hi = IMAGE_MAX_CONTAINER_THRESHOLD * n_containers
        clipped = np.minimum(np.maximum(total, IMAGE_MIN_THRESHOLD), hi)
        out: I64 = MAX_NODE_SCORE * (clipped - IMAGE_MIN_THRESHOLD) // (hi - IMAGE_MIN_THRESHOLD)
        return out if idx is None else out[idx]
