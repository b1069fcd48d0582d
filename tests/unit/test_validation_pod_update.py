"""Kubernetes' ValidatePodUpdate: which pod spec changes are allowed, and kube's messages for
those that are not (the table follows pkg/apis/core/validation's TestValidatePodUpdate cases)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from apiserver.registry import strategy_for
from apiserver.registry.godiff import pod_spec_diff
from apiserver.registry.pod import validate_pod_update
from apiserver.validation import no_template_deadline, validate_pod_spec
from tinykube.kinds import POD
from tinykube.v1 import pod_pb2

FORBIDDEN = (
    "spec: Forbidden: pod updates may not change fields other than `spec.containers[*].image`,"
    "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only "
    "additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be "
    "set to 1 if it was previously negative)\n"
)


def make_pod() -> pod_pb2.Pod:
    pod = pod_pb2.Pod()
    pod.metadata.name, pod.metadata.namespace = "web", "default"
    pod.spec.restartPolicy = "Always"
    pod.spec.dnsPolicy = "ClusterFirst"
    pod.spec.serviceAccountName = "default"
    pod.spec.nodeName = "node-1"
    pod.spec.terminationGracePeriodSeconds = 30
    pod.spec.initContainers.add(name="init", image="busybox:1.36", command=["true"])
    pod.spec.containers.add(name="web", image="nginx:1.26", command=["sleep", "3600"])
    pod.spec.tolerations.add(
        key="node.kubernetes.io/not-ready",
        operator="Exists",
        effect="NoExecute",
        tolerationSeconds=300,
    )
    return pod


TOLERATION_CHANGED = (
    "spec.tolerations: Forbidden: existing toleration can not be modified except its "
    "tolerationSeconds"
)

Edit = Callable[[pod_pb2.PodSpec], None]


def image(name: str) -> Edit:
    def edit(spec: pod_pb2.PodSpec) -> None:
        spec.containers[0].image = name

    return edit


def init_image(spec: pod_pb2.PodSpec) -> None:
    spec.initContainers[0].image = "busybox:1.37"


def deadline(value: int | None) -> Edit:
    def edit(spec: pod_pb2.PodSpec) -> None:
        if value is None:
            spec.ClearField("activeDeadlineSeconds")
        else:
            spec.activeDeadlineSeconds = value

    return edit


def grace(value: int) -> Edit:
    def edit(spec: pod_pb2.PodSpec) -> None:
        spec.terminationGracePeriodSeconds = value

    return edit


def add_toleration(spec: pod_pb2.PodSpec) -> None:
    spec.tolerations.add(key="dedicated", operator="Equal", value="web", effect="NoSchedule")


def shorten_toleration(spec: pod_pb2.PodSpec) -> None:
    spec.tolerations[0].tolerationSeconds = 10


def change_toleration(spec: pod_pb2.PodSpec) -> None:
    spec.tolerations[0].effect = "NoSchedule"


def remove_toleration(spec: pod_pb2.PodSpec) -> None:
    del spec.tolerations[:]


def add_container(spec: pod_pb2.PodSpec) -> None:
    spec.containers.add(name="extra", image="nginx")


def remove_init_container(spec: pod_pb2.PodSpec) -> None:
    del spec.initContainers[:]


def change_command(spec: pod_pb2.PodSpec) -> None:
    spec.containers[0].command[1] = "60"


def rename_container(spec: pod_pb2.PodSpec) -> None:
    spec.containers[0].name = "api"


def restart_never(spec: pod_pb2.PodSpec) -> None:
    spec.restartPolicy = "Never"


def with_deadline(value: int) -> Edit:
    return deadline(value)


def with_grace(value: int) -> Edit:
    return grace(value)


def nothing(spec: pod_pb2.PodSpec) -> None:
    return None


CASES: list[tuple[str, Edit, Edit, list[str]]] = [
    # (case, the stored pod's change from make_pod, the update, the errors)
    ("container image", nothing, image("nginx:1.27"), []),
    ("init container image", nothing, init_image, []),
    ("image unchanged", nothing, image("nginx:1.26"), []),
    (
        "image with spaces",
        nothing,
        image(" nginx:1.27"),
        [
            'spec.containers[0].image: Invalid value: " nginx:1.27": must not have leading or '
            "trailing whitespace"
        ],
    ),
    ("deadline set", nothing, deadline(60), []),
    ("deadline lowered", with_deadline(60), deadline(30), []),
    ("deadline kept", with_deadline(60), deadline(60), []),
    (
        "deadline raised",
        with_deadline(60),
        deadline(61),
        [
            "spec.activeDeadlineSeconds: Invalid value: 61: must be less than or equal to "
            "previous value"
        ],
    ),
    (
        "deadline unset",
        with_deadline(60),
        deadline(None),
        [
            'spec.activeDeadlineSeconds: Invalid value: "null": must not update from a positive '
            "integer to nil value"
        ],
    ),
    (
        "deadline negative",
        nothing,
        deadline(-1),
        [
            "spec.activeDeadlineSeconds: Invalid value: -1: must be between 0 and 2147483647, "
            "inclusive"
        ],
    ),
    ("toleration added", nothing, add_toleration, []),
    ("tolerationSeconds changed", nothing, shorten_toleration, []),
    (
        "toleration changed",
        nothing,
        change_toleration,
        [TOLERATION_CHANGED],
    ),
    (
        "toleration removed",
        nothing,
        remove_toleration,
        [TOLERATION_CHANGED],
    ),
    ("grace to 1 from negative", with_grace(-1), grace(1), []),
    ("grace to 2 from negative", with_grace(-1), grace(2), [FORBIDDEN]),
    ("grace changed", nothing, grace(10), [FORBIDDEN]),
    (
        "container added",
        nothing,
        add_container,
        ["spec.containers: Forbidden: pod updates may not add or remove containers"],
    ),
    (
        "init container removed",
        nothing,
        remove_init_container,
        ["spec.initContainers: Forbidden: pod updates may not add or remove containers"],
    ),
    ("command changed", nothing, change_command, [FORBIDDEN]),
    ("container renamed", nothing, rename_container, [FORBIDDEN]),
    ("restartPolicy changed", nothing, restart_never, [FORBIDDEN]),
]


@pytest.mark.parametrize(
    ("stored", "edit", "expected"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_pod_update_rules(stored: Edit, edit: Edit, expected: list[str]) -> None:
    old = make_pod()
    stored(old.spec)
    new = pod_pb2.Pod()
    new.CopyFrom(old)
    edit(new.spec)
    got = [str(e) for e in validate_pod_update(new, old)]
    # The Forbidden message ends with the diff; the table names its first line.
    assert [g if not g.startswith(FORBIDDEN) else FORBIDDEN for g in got] == expected


def test_forbidden_message_shows_the_spec_diff() -> None:
    old = make_pod()
    new = pod_pb2.Pod()
    new.CopyFrom(old)
    new.spec.containers[0].image = "nginx:1.27"  # allowed: the diff shows the old image
    change_command(new.spec)
    (error,) = [str(e) for e in validate_pod_update(new, old)]
    assert error == FORBIDDEN + (
        "  core.PodSpec{\n"
        "  \tVolumes: nil,\n"
        '  \tInitContainers: {{Name: "init", Image: "busybox:1.36", Command: {"true"}}},\n'
        "  \tContainers: []core.Container{\n"
        "  \t\t{\n"
        '  \t\t\tName: "web",\n'
        '  \t\t\tImage: "nginx:1.26",\n'
        '- \t\t\tCommand: {"sleep", "3600"},\n'
        '+ \t\t\tCommand: {"sleep", "60"},\n'
        "  \t\t\tArgs: nil,\n"
        '  \t\t\tWorkingDir: "",\n'
        "  \t\t\t... // 16 identical fields\n"
        "  \t\t},\n"
        "  \t},\n"
        '  \tRestartPolicy: "Always",\n'
        "  \tTerminationGracePeriodSeconds: &30,\n"
        "  \t... // 22 identical fields\n"
        "  }"
    )


def test_diff_elides_unchanged_fields_beyond_the_context() -> None:
    old = make_pod().spec
    new = pod_pb2.PodSpec()
    new.CopyFrom(old)
    new.serviceAccountName = "robot"
    lines = pod_spec_diff(old, new).splitlines()
    assert lines[0] == "  core.PodSpec{"
    assert lines[1].startswith("  \t... // ") and lines[1].endswith(" identical fields")
    assert '- \tServiceAccountName: "default",' in lines
    assert '+ \tServiceAccountName: "robot",' in lines
    assert lines[-1] == "  }"


def test_validate_update_reports_an_empty_image_once() -> None:
    """An empty image is the spec's own Required value; the update rule does not repeat it
    (kube's aggregate drops the duplicate)."""
    old = make_pod()
    new = pod_pb2.Pod()
    new.CopyFrom(old)
    new.spec.containers[0].image = ""
    errors = [str(e) for e in strategy_for(POD).validate_update(new, old)]
    assert errors.count("spec.containers[0].image: Required value") == 1


def test_created_pod_deadline_must_be_positive() -> None:
    spec = make_pod().spec
    spec.activeDeadlineSeconds = 0
    assert [str(e) for e in validate_pod_spec("spec", spec)] == [
        "spec.activeDeadlineSeconds: Invalid value: 0: must be between 1 and 2147483647, inclusive"
    ]


@pytest.mark.parametrize("owner", ["ReplicaSet", "DaemonSet"])
def test_controllers_keeping_pods_running_refuse_a_template_deadline(owner: str) -> None:
    spec = make_pod().spec
    assert no_template_deadline(spec, owner) == []
    spec.activeDeadlineSeconds = 60
    assert [str(e) for e in no_template_deadline(spec, owner)] == [
        "spec.template.spec.activeDeadlineSeconds: Forbidden: activeDeadlineSeconds in "
        f"{owner} is not Supported"
    ]


def test_a_raised_deadline_stops_the_checks_as_in_kube() -> None:
    old = make_pod()
    old.spec.activeDeadlineSeconds = 60
    new = pod_pb2.Pod()
    new.CopyFrom(old)
    new.spec.activeDeadlineSeconds = 120
    change_command(new.spec)  # not reported: kube returns at the deadline's error
    assert [str(e) for e in validate_pod_update(new, old)] == [
        "spec.activeDeadlineSeconds: Invalid value: 120: must be less than or equal to "
        "previous value"
    ]
    new.spec.ClearField("activeDeadlineSeconds")  # unset: reported, and the checks go on
    errors = [str(e) for e in validate_pod_update(new, old)]
    assert errors[0] == (
        'spec.activeDeadlineSeconds: Invalid value: "null": must not update from a positive '
        "integer to nil value"
    )
    assert errors[1].startswith(FORBIDDEN)
