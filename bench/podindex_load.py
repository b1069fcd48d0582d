"""The scheduler's PodIndex under ClusterLoader2's load shape, in one process.

    python bench/podindex_load.py [PODS]            # default 15,000
    python bench/podindex_load.py 6000 --module /path/to/an/older/podindex.py

1,640 Deployments in 5 namespaces (CL2's 3 big of 250 replicas, 25 medium of 30 and 300 small of
5 per namespace), each with a Service selecting `name=<deployment>` and a ReplicaSet selecting
`name=<deployment>,pod-template-hash=<hash>`: kube's default PodTopologySpread constraints make
both spreading selectors. Pods come in a seeded random order over the Deployments and are placed
round robin on 500 node slots; before each placement the scheduler reads the counts of the pod's
two selectors, as PodTopologySpread's score does. Prints the time per pod. `--module` loads
another PodIndex (e.g. `git show <commit>:scheduler/podindex.py > old.py`) to compare.
"""

from __future__ import annotations

import argparse
import importlib.util
import random
import sys
import time
from pathlib import Path
from types import ModuleType

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scheduler import podindex
from tests.unit.scheduler.builders import PodBuilder
from tinykube.selectors import LabelSelector, parse_label_selector


def load_module(path: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location("podindex_other", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("pods", type=int, nargs="?", default=15000)
    p.add_argument("--module", help="a podindex.py to measure instead of scheduler/podindex.py")
    a = p.parse_args()
    module: ModuleType = load_module(a.module) if a.module else podindex
    deployments = [
        (f"load-{ns}", f"d{i}", 250 if i < 3 else 30 if i < 28 else 5)
        for ns in range(5)
        for i in range(328)
    ]
    order = [(ns, name) for ns, name, size in deployments for _ in range(size)]
    random.Random(1).shuffle(order)
    order = order[: a.pods]
    infos = [
        PodBuilder(f"{name}-{k}", ns)
        .labels(name=name, group="load", version="1", **{"pod-template-hash": f"h{name}"})
        .container()
        .info()
        for k, (ns, name) in enumerate(order)
    ]
    selectors: dict[tuple[str, str], tuple[LabelSelector, LabelSelector]] = {}
    index = module.PodIndex(500)
    began = time.perf_counter()
    for k, (info, (ns, name)) in enumerate(zip(infos, order, strict=True)):
        if (ns, name) not in selectors:
            selectors[ns, name] = (
                parse_label_selector(f"name={name}"),
                parse_label_selector(f"name={name},pod-template-hash=h{name}"),
            )
        for selector in selectors[ns, name]:
            index.counts(frozenset({ns}), selector)
        index.placed(k % 500, info, 1)
    seconds = time.perf_counter() - began
    print(
        f"{module.__file__}: {len(infos)} pods, {len(selectors) * 2} selectors, "
        f"{1e3 * seconds / len(infos):.3f} ms per pod ({seconds:.1f} s)"
    )


if __name__ == "__main__":
    main()
