"""kube's AppArmor helpers (kubelet/security.py) and volume ownership (kubelet/volumes.py
set_volume_ownership, kube's SetVolumeOwnership with fsGroupChangePolicy)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from kubelet.security import apparmor_enabled, apparmor_profile, apparmor_required
from kubelet.volumes import set_volume_ownership
from tinykube.v1 import pod_pb2


def test_apparmor_profile_container_wins_over_pod() -> None:
    pod = pod_pb2.Pod()
    c = pod.spec.containers.add(name="c")
    assert apparmor_profile(pod, c) is None and not apparmor_required(pod, c)
    pod.spec.securityContext.appArmorProfile.type = "RuntimeDefault"
    assert apparmor_profile(pod, c) == ("RuntimeDefault", "")
    assert apparmor_required(pod, c)
    c.securityContext.appArmorProfile.type = "Unconfined"
    assert not apparmor_required(pod, c)
    c.securityContext.appArmorProfile.type = "Localhost"
    c.securityContext.appArmorProfile.localhostProfile = "k8s-deny-write"
    assert apparmor_profile(pod, c) == ("Localhost", "k8s-deny-write")


def test_apparmor_enabled_reads_the_module_parameter(tmp_path: Path) -> None:
    flag = tmp_path / "enabled"
    assert not apparmor_enabled(flag)
    flag.write_text("Y\n")
    assert apparmor_enabled(flag)
    flag.write_text("N\n")
    assert not apparmor_enabled(flag)


def _tree(tmp_path: Path) -> Path:
    vol = tmp_path / "vol"
    (vol / "sub").mkdir(parents=True)
    (vol / "sub" / "f").write_text("x")
    (vol / "sub" / "f").chmod(0o600)
    vol.chmod(0o700)
    (vol / "link").symlink_to("sub/f")
    return vol


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another group needs root")
def test_set_volume_ownership_as_kube(tmp_path: Path) -> None:
    vol = _tree(tmp_path)
    assert set_volume_ownership(vol, 4321, None, read_only=False)
    for path in (vol, vol / "sub", vol / "sub" / "f"):
        assert path.stat().st_gid == 4321
    assert os.lstat(vol / "link").st_gid == 4321
    assert stat.S_IMODE((vol / "sub" / "f").stat().st_mode) == 0o660
    assert stat.S_IMODE(vol.stat().st_mode) == 0o770 | stat.S_ISGID
    # read-only volumes: group read only
    ro = tmp_path / "ro"
    ro.mkdir(mode=0o700)
    (ro / "f").write_text("x")
    (ro / "f").chmod(0o400)
    set_volume_ownership(ro, 4321, "Always", read_only=True)
    assert stat.S_IMODE((ro / "f").stat().st_mode) == 0o440


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another group needs root")
def test_on_root_mismatch_skips_a_volume_whose_root_matches(tmp_path: Path) -> None:
    vol = _tree(tmp_path)
    assert set_volume_ownership(vol, 4321, "OnRootMismatch", read_only=False)
    # a file whose group changed since is left alone: the root still matches
    os.chown(vol / "sub" / "f", -1, 0)
    assert not set_volume_ownership(vol, 4321, "OnRootMismatch", read_only=False)
    assert (vol / "sub" / "f").stat().st_gid == 0
    # Always (and no policy) change the whole tree every time
    assert set_volume_ownership(vol, 4321, "Always", read_only=False)
    assert (vol / "sub" / "f").stat().st_gid == 4321
    # the root's mode lacking setgid, or another group, means a change
    vol.chmod(0o770)
    os.chown(vol / "sub" / "f", -1, 0)
    assert set_volume_ownership(vol, 4321, "OnRootMismatch", read_only=False)
    assert (vol / "sub" / "f").stat().st_gid == 4321
    assert set_volume_ownership(vol, 999, "OnRootMismatch", read_only=False)
