"""The field selectors each kind supports are kube's (pkg/registry/<group>/<kind>/strategy.go
ToSelectableFields), and every declared one has a value for every object."""

from __future__ import annotations

from apiserver.registry import SELECTABLE_FIELDS, fields_of
from tinykube.kinds import JOB, POD, SERVICE
from tinykube.v1 import job_pb2, pod_pb2, service_pb2


def test_pods_select_on_kubes_fields() -> None:
    pod = pod_pb2.Pod()
    pod.metadata.name, pod.metadata.namespace = "web", "default"
    pod.spec.serviceAccountName = "robot"
    pod.spec.hostNetwork = True
    pod.status.podIP = "10.0.0.7"
    pod.status.podIPs.add(ip="10.0.0.7")
    pod.status.podIPs.add(ip="fd00::7")
    values = fields_of(POD.kind)(pod)
    assert set(values) == set(SELECTABLE_FIELDS[POD.kind])
    assert values["spec.serviceAccountName"] == "robot"
    assert values["spec.hostNetwork"] == "true"
    assert values["status.podIP"] == "10.0.0.7"
    empty = fields_of(POD.kind)(pod_pb2.Pod())
    assert (empty["spec.hostNetwork"], empty["status.podIP"]) == ("false", "")


def test_jobs_select_on_their_successful_count() -> None:
    job = job_pb2.Job()
    job.metadata.name = "once"
    job.status.succeeded = 1
    values = fields_of(JOB.kind)(job)
    assert set(values) == set(SELECTABLE_FIELDS[JOB.kind])
    assert values["status.successful"] == "1"


def test_services_select_on_cluster_ip_and_type() -> None:
    svc = service_pb2.Service()
    svc.metadata.name = "web"
    svc.spec.clusterIP = "10.96.0.10"
    svc.spec.type = "NodePort"
    values = fields_of(SERVICE.kind)(svc)
    assert set(values) == set(SELECTABLE_FIELDS[SERVICE.kind])
    assert (values["spec.clusterIP"], values["spec.type"]) == ("10.96.0.10", "NodePort")
