"""seccompProfile, appArmorProfile and fsGroupChangePolicy: Kubernetes' validation messages
(validateSeccompProfileField, ValidateAppArmorProfileField, validateFSGroupChangePolicy)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.test_validation_lifecycle import errors_of, pod_with


@pytest.mark.parametrize(
    "profile",
    [
        {"type": "RuntimeDefault"},
        {"type": "Unconfined"},
        {"type": "Localhost", "localhostProfile": "profiles/audit.json"},
    ],
)
def test_valid_profiles_pass_at_both_levels(profile: dict[str, Any]) -> None:
    pod = pod_with(
        {"securityContext": {"seccompProfile": profile, "appArmorProfile": profile}},
        spec={"securityContext": {"seccompProfile": profile, "appArmorProfile": profile}},
    )
    assert errors_of(pod) == []


def test_seccomp_errors_are_kubes() -> None:
    pod = pod_with(
        {"securityContext": {"seccompProfile": {"type": "Localhost"}}},
        spec={"securityContext": {"seccompProfile": {"type": "Default"}}},
    )
    assert errors_of(pod) == [
        'spec.securityContext.seccompProfile.type: Unsupported value: "Default": supported '
        'values: "Localhost", "RuntimeDefault", "Unconfined"',
        "spec.containers[0].securityContext.seccompProfile.localhostProfile: Required value: "
        "must be set when seccomp type is Localhost",
    ]
    pod = pod_with(
        {"securityContext": {"seccompProfile": {}}},
        init=True,
        spec={
            "securityContext": {
                "seccompProfile": {"type": "Localhost", "localhostProfile": "/etc/../x.json"}
            }
        },
    )
    assert errors_of(pod) == [
        'spec.securityContext.seccompProfile.localhostProfile: Invalid value: "/etc/../x.json": '
        "must be a relative path",
        'spec.securityContext.seccompProfile.localhostProfile: Invalid value: "/etc/../x.json": '
        "must not contain '..'",
        "spec.initContainers[0].securityContext.seccompProfile.type: Required value: type is "
        "required when seccompProfile is set",
    ]
    pod = pod_with(
        {"securityContext": {"seccompProfile": {"type": "Unconfined", "localhostProfile": "a"}}}
    )
    assert errors_of(pod) == [
        "spec.containers[0].securityContext.seccompProfile.localhostProfile: Invalid value: "
        'core.SeccompProfile{Type:"Unconfined", LocalhostProfile:"a"}: can only be set when '
        "seccomp type is Localhost"
    ]


def test_apparmor_errors_are_kubes() -> None:
    pod = pod_with(
        {"securityContext": {"appArmorProfile": {"type": "Localhost", "localhostProfile": " p"}}},
        spec={"securityContext": {"appArmorProfile": {"type": "Enforce"}}},
    )
    assert errors_of(pod) == [
        'spec.securityContext.appArmorProfile.type: Unsupported value: "Enforce": supported '
        'values: "Localhost", "RuntimeDefault", "Unconfined"',
        'spec.containers[0].securityContext.appArmorProfile.localhostProfile: Invalid value: " p"'
        ": must not be padded with whitespace",
    ]
    pod = pod_with(
        {
            "securityContext": {
                "appArmorProfile": {"type": "RuntimeDefault", "localhostProfile": "p"}
            }
        },
        spec={"securityContext": {"appArmorProfile": {"type": "Localhost"}}},
    )
    assert errors_of(pod) == [
        "spec.securityContext.appArmorProfile.localhostProfile: Required value: must be set "
        "when AppArmor type is Localhost",
        'spec.containers[0].securityContext.appArmorProfile.localhostProfile: Invalid value: "p"'
        ": can only be set when AppArmor type is Localhost",
    ]
    pod = pod_with({"securityContext": {"appArmorProfile": {}}})
    assert errors_of(pod) == [
        "spec.containers[0].securityContext.appArmorProfile.type: Required value: type is "
        "required when appArmorProfile is set"
    ]


def test_fs_group_change_policy() -> None:
    for policy in ("Always", "OnRootMismatch"):
        ok = pod_with(
            {}, spec={"securityContext": {"fsGroup": 2000, "fsGroupChangePolicy": policy}}
        )
        assert errors_of(ok) == []
    pod = pod_with({}, spec={"securityContext": {"fsGroupChangePolicy": "Never"}})
    assert errors_of(pod) == [
        'spec.securityContext.fsGroupChangePolicy: Unsupported value: "Never": supported '
        'values: "Always", "OnRootMismatch"'
    ]
