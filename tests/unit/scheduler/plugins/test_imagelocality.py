"""ImageLocality: nodes holding the pod's images score higher, scaled by spread."""

from __future__ import annotations

from scheduler.plugins.imagelocality import ImageLocality
from tests.unit.scheduler.builders import PodBuilder
from tests.unit.scheduler.plugins.harness import MI, n, score_of


def test_image_locality() -> None:
    nodes = [n("a").image("nginx:latest", 500 * MI), n("b")]
    pod = PodBuilder().container(image="nginx")
    # 500Mi * (1 node / 2 nodes) = 250Mi; (250-23)*100/(1000-23) = 23
    assert score_of(ImageLocality(), pod, *nodes) == [23, 0]
