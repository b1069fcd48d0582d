"""kube-scheduler's default plugins, one module per plugin, vectorised over node slots.

Each module is named after its plugin (lower case, as kube's framework/plugins/<name>/) and keeps
kube-scheduler's name, default weight, failure reasons (the strings users see in "0/5 nodes are
available: ..."), and semantics, including the easy-to-miss ones listed in DESIGN.md. This
package's own module is the registry: the default profile's plugins in kube's order, and the
factories that build them from their arguments.

Pure and synchronous except DefaultBinder, which awaits the handle's bind call.
"""

from __future__ import annotations

from scheduler.framework import Registry
from scheduler.plugins.defaultbinder import DefaultBinder
from scheduler.plugins.defaultpreemption import DefaultPreemption
from scheduler.plugins.imagelocality import ImageLocality
from scheduler.plugins.interpodaffinity import InterPodAffinity
from scheduler.plugins.nodeaffinity import NodeAffinity
from scheduler.plugins.nodename import NodeName
from scheduler.plugins.nodeports import NodePorts
from scheduler.plugins.noderesourcesbalancedallocation import NodeResourcesBalancedAllocation
from scheduler.plugins.noderesourcesfit import NodeResourcesFit
from scheduler.plugins.nodeunschedulable import NodeUnschedulable
from scheduler.plugins.podtopologyspread import PodTopologySpread
from scheduler.plugins.schedulinggates import SchedulingGates
from scheduler.plugins.tainttoleration import TaintToleration

# name -> default weight (None: not a score plugin), in kube-scheduler's default plugin order
DEFAULT_PLUGINS: dict[str, int | None] = {
    "NodeUnschedulable": None,
    "NodeName": None,
    "TaintToleration": 3,
    "NodeAffinity": 2,
    "NodePorts": None,
    "NodeResourcesFit": 1,
    "PodTopologySpread": 2,
    "InterPodAffinity": 2,
    "DefaultPreemption": None,
    "NodeResourcesBalancedAllocation": 1,
    "ImageLocality": 1,
    "DefaultBinder": None,
    "SchedulingGates": None,
}


def default_registry() -> Registry:
    r = Registry()
    r.register("NodeUnschedulable", lambda a, h: NodeUnschedulable())
    r.register("NodeName", lambda a, h: NodeName())
    r.register("TaintToleration", lambda a, h: TaintToleration())
    r.register("NodeAffinity", lambda a, h: NodeAffinity())
    r.register("NodePorts", lambda a, h: NodePorts())
    r.register("NodeResourcesFit", lambda a, h: NodeResourcesFit(a))
    r.register("PodTopologySpread", lambda a, h: PodTopologySpread(a, h))
    r.register("InterPodAffinity", lambda a, h: InterPodAffinity(a, h))
    r.register("NodeResourcesBalancedAllocation", lambda a, h: NodeResourcesBalancedAllocation(a))
    r.register("ImageLocality", lambda a, h: ImageLocality())
    r.register("DefaultPreemption", lambda a, h: DefaultPreemption(h))
    r.register("DefaultBinder", lambda a, h: DefaultBinder(h))
    r.register("SchedulingGates", lambda a, h: SchedulingGates())
    return r
