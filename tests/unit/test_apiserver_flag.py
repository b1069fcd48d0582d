"""`--apiserver` of every component that dials the apiserver: one address, several
comma-separated or repeated (failed over between by the client), else $TINYKUBE_APISERVER, else
the kubeconfig's, else 127.0.0.1:6443."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from controller.settings import Settings as ControllerSettings
from kubelet.proxy.settings import Settings as ProxySettings
from kubelet.settings import Settings as KubeletSettings
from scheduler.__main__ import parse_args as scheduler_args
from tinykube.kubeconfig import write_kubeconfig

PARSERS: dict[str, Callable[[Sequence[str]], Any]] = {
    "scheduler": scheduler_args,
    "controller": ControllerSettings.from_args,
    "kubelet": lambda argv: KubeletSettings.from_args(["--node-name", "n1", *argv]),
    "proxy": lambda argv: ProxySettings.from_args(["--node-name", "n1", *argv]),
}


@pytest.mark.parametrize("component", sorted(PARSERS))
@pytest.mark.parametrize(
    ("flags", "env", "kubeconfig", "expected"),
    [
        ([], "", "", "127.0.0.1:6443"),
        (["--apiserver", "10.0.0.1:6443"], "", "", "10.0.0.1:6443"),
        (["--apiserver", "a:1,b:2"], "", "", "a:1,b:2"),
        (["--apiserver", "a:1", "--apiserver", "b:2,c:3,a:1"], "", "", "a:1,b:2,c:3"),
        ([], "e:1,e:2", "", "e:1,e:2"),
        (["--apiserver", "a:1"], "e:1", "", "a:1"),
        ([], "", "k:1,k:2", "k:1,k:2"),
        (["--apiserver", "a:1"], "", "k:1,k:2", "a:1"),
    ],
)
def test_the_apiserver_addresses(
    component: str,
    flags: list[str],
    env: str,
    kubeconfig: str,
    expected: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TINYKUBE_APISERVER", env)
    argv = [*flags, "--insecure"]
    if kubeconfig:
        write_kubeconfig(tmp_path / "k", "https://h:6443", grpc_server=kubeconfig)
        argv += ["--kubeconfig", str(tmp_path / "k")]
    assert PARSERS[component](argv).apiserver == expected
