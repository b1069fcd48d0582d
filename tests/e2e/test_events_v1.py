"""Events in both API versions with `tinykube up` and the real kubectl, as against Kubernetes.

`kubectl events` (which reads core/v1) lists what the controllers and kubelets report, and
`--for` selects one object's (its field selector names involvedObject.apiVersion); `kubectl get
events.v1.events.k8s.io -o yaml` shows the same objects in events.k8s.io/v1's names; an Event
created through events.k8s.io/v1 is read back through core/v1 and patched through the view;
a bad one is refused as kube refuses it; the Python client's EventsV1Api lists and watches.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.e2e.conftest import UpCluster
from tests.e2e.kubectl_output import ok
from tests.e2e.waiting import until

pytestmark = pytest.mark.e2e


def hand_made(name: str, **extra: Any) -> str:
    return json.dumps(
        {
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            "metadata": {"name": name},
            "eventTime": "2026-12-05T15:00:00.000001Z",
            "reportingController": "example.com/tester",
            "reportingInstance": "tester-1",
            "action": "Testing",
            "reason": "Tested",
            "regarding": {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "namespace": "default",
                "name": "ev-web",
            },
            "note": "made by hand",
            "type": "Normal",
            **extra,
        }
    )


@pytest.fixture(scope="module")
def deployed(tinykube_up: UpCluster) -> UpCluster:
    """A Deployment whose controllers, scheduler and kubelet have reported Events."""
    ok(
        tinykube_up.kubectl(
            "create", "deployment", "ev-web", "--image=busybox", "--", "sleep", "3600"
        )
    )

    def reported() -> bool:
        listed = ok(tinykube_up.kubectl("get", "events", "-o", "json"))
        reasons = {e["reason"] for e in json.loads(listed)["items"]}
        return {"ScalingReplicaSet", "SuccessfulCreate", "Scheduled", "Started"} <= reasons

    until(reported, "the Deployment's Events")
    return tinykube_up


def test_kubectl_events_lists_them(deployed: UpCluster) -> None:
    out = ok(deployed.kubectl("events"))
    lines = out.splitlines()
    assert lines[0].split() == ["LAST", "SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]
    assert any("ScalingReplicaSet" in x and "Deployment/ev-web" in x for x in lines)
    mine = ok(deployed.kubectl("events", "--for", "deployment/ev-web")).splitlines()
    assert len(mine) >= 2 and all("Deployment/ev-web" in x for x in mine[1:])


def test_the_events_k8s_io_view_of_the_same_objects(deployed: UpCluster) -> None:
    core = json.loads(ok(deployed.kubectl("get", "events", "-o", "json")))["items"]
    view = json.loads(ok(deployed.kubectl("get", "events.v1.events.k8s.io", "-o", "json")))
    assert view["kind"] == "List" or view["kind"] == "EventList"
    by_name = {e["metadata"]["name"]: e for e in view["items"]}
    assert set(by_name) >= {e["metadata"]["name"] for e in core}
    for e in core:
        v = by_name[e["metadata"]["name"]]
        assert v["apiVersion"] == "events.k8s.io/v1"
        assert v["note"] == e["message"]
        assert v["regarding"] == e["involvedObject"]
        assert v["reason"] == e["reason"]
        assert v.get("deprecatedCount") == e.get("count")
        assert v.get("deprecatedSource") == e.get("source")
        assert "message" not in v and "involvedObject" not in v
    text = ok(deployed.kubectl("get", "events.v1.events.k8s.io", "-o", "yaml"))
    assert "apiVersion: events.k8s.io/v1" in text and "regarding:" in text and "note:" in text


def test_create_through_the_view_and_read_through_core(deployed: UpCluster) -> None:
    created = deployed.kubectl("create", "-f", "-", stdin=hand_made("ev-hand.1"))
    assert (created.code, created.out) == (0, "event.events.k8s.io/ev-hand.1 created\n")
    core = json.loads(ok(deployed.kubectl("get", "events", "ev-hand.1", "-o", "json")))
    assert core["apiVersion"] == "v1"
    assert (core["message"], core["involvedObject"]["name"], core["reportingComponent"]) == (
        "made by hand",
        "ev-web",
        "example.com/tester",
    )
    assert (core["eventTime"], core["action"]) == ("2026-12-05T15:00:00.000001Z", "Testing")
    patch = {
        "note": "patched",
        "series": {"count": 2, "lastObservedTime": "2026-12-05T15:01:00.000000Z"},
    }
    ok(deployed.kubectl("patch", "events.v1.events.k8s.io", "ev-hand.1", "-p", json.dumps(patch)))
    view = json.loads(
        ok(deployed.kubectl("get", "events.v1.events.k8s.io", "ev-hand.1", "-o", "json"))
    )
    assert view["note"] == "patched"
    assert view["series"] == {"count": 2, "lastObservedTime": "2026-12-05T15:01:00.000000Z"}
    assert ok(deployed.kubectl("delete", "events.v1.events.k8s.io", "ev-hand.1")) == (
        'event.events.k8s.io "ev-hand.1" deleted from default namespace\n'
    )


def test_a_bad_events_v1_event_is_refused_as_kube_refuses_it(deployed: UpCluster) -> None:
    bad = json.dumps(
        {
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            "metadata": {"name": "ev-bad"},
            "type": "Odd",
            "deprecatedCount": 3,
        }
    )
    refused = deployed.kubectl("create", "-f", "-", stdin=bad)
    assert refused.code == 1
    assert refused.err == (
        'The Event "ev-bad" is invalid: \n'
        "* reportingController: Required value\n"
        "* reportingInstance: Required value\n"
        "* action: Required value\n"
        "* reason: Required value\n"
        "* eventTime: Required value\n"
        '* type: Invalid value: "": has invalid value: Odd\n'
        '* deprecatedCount: Invalid value: "": needs to be unset\n'
    )


def test_the_python_client_events_v1_api(deployed: UpCluster) -> None:
    """EventsV1Api lists and watches events.k8s.io/v1 Events. (The client insists on eventTime,
    which Events written through core/v1 by legacy recorders lack, here as in Kubernetes: the
    list selects the Events written through the view.)"""
    kubernetes = pytest.importorskip("kubernetes")
    ok(deployed.kubectl("create", "-f", "-", stdin=hand_made("ev-listed.1")))
    api_client = kubernetes.config.new_client_from_config(str(deployed.kubeconfig))
    try:
        api = kubernetes.client.EventsV1Api(api_client)
        mine = "reportingController=example.com/tester"
        listed = api.list_namespaced_event(
            "default", field_selector=f"{mine},regarding.kind=Deployment,regarding.name=ev-web"
        )
        [event] = [e for e in listed.items if e.metadata.name == "ev-listed.1"]
        assert (event.note, event.reporting_controller, event.action) == (
            "made by hand",
            "example.com/tester",
            "Testing",
        )
        assert event.event_time.microsecond == 1
        watch = kubernetes.watch.Watch()
        stream = watch.stream(
            api.list_namespaced_event,
            "default",
            resource_version=listed.metadata.resource_version,
            field_selector="metadata.name=ev-watched.1",
            timeout_seconds=30,
        )
        ok(deployed.kubectl("create", "-f", "-", stdin=hand_made("ev-watched.1")))
        for item in stream:
            assert item["type"] == "ADDED"
            obj = item["object"]
            assert (obj.metadata.name, obj.note) == ("ev-watched.1", "made by hand")
            assert obj.regarding.name == "ev-web"
            watch.stop()
            break
        else:
            pytest.fail("no watch event for ev-watched.1")
    finally:
        api_client.close()
