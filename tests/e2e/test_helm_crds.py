"""Real helm 3 and helm 4 install a chart that ships a CustomResourceDefinition (issue 25).

The chart, tests/e2e/charts/widgets, keeps its CRD in crds/ (a structural schema, printer
columns, the status subresource) and has a Widget and a ConfigMap in templates/. `helm install`
creates what crds/ holds before the templates (helm 3 skips a CRD that exists), waits for it
to be Established and refreshes its discovery before it maps the Widget; `helm upgrade` and
`helm uninstall` never touch a CRD. So: an
install creates the CRD and both objects, `kubectl get widgets` shows the printer columns, an
upgrade changes the Widget, an uninstall removes the Widget and the ConfigMap but leaves the
CRD, and a second install reuses that CRD (helm 3 as it is; helm 4, which creates by
server-side apply, applies the chart's CRD over it).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import UpCluster
from tests.e2e.kubectl_output import ok
from tests.e2e.test_helm import Helm, helm_binary

CHART = Path(__file__).parent / "charts" / "widgets"
CRD = "widgets.helmtest.example.com"


def _get(cluster: UpCluster, *args: str) -> dict[str, Any]:
    doc = json.loads(ok(cluster.kubectl("get", *args, "-o", "json")))
    assert isinstance(doc, dict)
    return doc


def _next_version(tmp_path: Path) -> Path:
    """The chart at 0.2.0, whose CRD has one more printer column (which helm never applies)."""
    chart = tmp_path / "widgets"
    shutil.copytree(CHART, chart)
    meta = chart / "Chart.yaml"
    meta.write_text(meta.read_text().replace("version: 0.1.0", "version: 0.2.0"))
    crd = chart / "crds" / "widgets.yaml"
    text = crd.read_text()
    assert text.endswith("jsonPath: .status.phase\n")
    crd.write_text(text + "    - name: Note\n      type: string\n      jsonPath: .spec.note\n")
    return chart


def _rows(cluster: UpCluster, namespace: str) -> list[list[str]]:
    """`kubectl get widgets` as rows of cells (the header first)."""
    out = ok(cluster.kubectl("get", "widgets", "-n", namespace))
    return [line.split() for line in out.splitlines()]


@pytest.mark.parametrize("which", ["helm3", "helm4"])
def test_chart_with_a_crd(tinykube_up: UpCluster, which: str, tmp_path: Path) -> None:
    helm = Helm(helm_binary(which), tinykube_up, tmp_path)
    # Each helm starts without the CRD (the other one may have left it), so each creates it.
    ok(tinykube_up.kubectl("delete", "crd", CRD, "--ignore-not-found", "--wait", timeout=120))
    ns = f"crds-{which}"
    ok(tinykube_up.kubectl("create", "namespace", ns))

    helm("install", "shop", str(CHART), "-n", ns, "--wait", "--timeout", "120s")
    crd = _get(tinykube_up, "crd", CRD)
    conditions = {c["type"]: c["status"] for c in crd["status"]["conditions"]}
    assert conditions["Established"] == "True"
    # helm keeps the CRD out of the release: its manifest holds only the templates
    manifest = helm("get", "manifest", "shop", "-n", ns)
    assert "kind: Widget" in manifest and "CustomResourceDefinition" not in manifest

    widget = _get(tinykube_up, "widget", "shop-widget", "-n", ns)
    assert widget["spec"] == {"size": 3, "color": "red"}
    assert _get(tinykube_up, "cm", "shop-config", "-n", ns)["data"] == {
        "size": "3",
        "color": "red",
    }
    # The printer columns of the CRD; an unset status.phase is an empty cell.
    assert _rows(tinykube_up, ns) == [
        ["NAME", "SIZE", "COLOR", "PHASE"],
        ["shop-widget", "3", "red"],
    ]
    ok(
        tinykube_up.kubectl(
            "patch",
            "widget",
            "shop-widget",
            "-n",
            ns,
            "--subresource=status",
            "--type=merge",
            "-p",
            '{"status": {"phase": "Ready"}}',
        )
    )
    assert _rows(tinykube_up, ns)[1] == ["shop-widget", "3", "red", "Ready"]

    upgraded = _next_version(tmp_path)
    helm("upgrade", "shop", str(upgraded), "-n", ns, "--set", "size=5,color=blue", "--wait")
    widget = _get(tinykube_up, "widget", "shop-widget", "-n", ns)
    assert widget["spec"] == {"size": 5, "color": "blue"}
    assert widget["status"] == {"phase": "Ready"}  # a spec write keeps the status
    assert _get(tinykube_up, "cm", "shop-config", "-n", ns)["data"] == {
        "size": "5",
        "color": "blue",
    }
    assert _rows(tinykube_up, ns)[1] == ["shop-widget", "5", "blue", "Ready"]
    # helm 3 writes with a three-way merge patch (an Update), helm 4 with server-side apply
    managers = {
        m["manager"]: m["operation"]
        for m in _get(tinykube_up, "widget", "shop-widget", "-n", ns, "--show-managed-fields")[
            "metadata"
        ]["managedFields"]
    }
    assert managers["helm"] == ("Update" if which == "helm3" else "Apply"), managers

    # A field of the spec that another manager sets and the chart does not survive upgrades
    # (helm 4's apply owns only the fields it sets, not the whole spec).
    ok(
        tinykube_up.kubectl(
            "patch", "widget", "shop-widget", "-n", ns, "--type=merge",
            "-p", '{"spec": {"note": "by hand"}}',
        )
    )  # fmt: skip
    helm("upgrade", "shop", str(upgraded), "-n", ns, "--set", "size=6,color=blue", "--wait")
    widget = _get(tinykube_up, "widget", "shop-widget", "-n", ns)
    assert widget["spec"] == {"size": 6, "color": "blue", "note": "by hand"}
    assert widget["status"] == {"phase": "Ready"}

    # helm does not upgrade a CRD: the one it created is unchanged (no Note column)
    after = _get(tinykube_up, "crd", CRD)
    assert after["metadata"]["uid"] == crd["metadata"]["uid"]
    assert after["metadata"]["generation"] == crd["metadata"]["generation"]
    columns = after["spec"]["versions"][0]["additionalPrinterColumns"]
    assert [c["name"] for c in columns] == ["Size", "Color", "Phase"]
    assert _rows(tinykube_up, ns)[0] == ["NAME", "SIZE", "COLOR", "PHASE"]

    helm("uninstall", "shop", "-n", ns, "--wait", "--timeout", "120s")
    gone = tinykube_up.kubectl("get", "widget", "shop-widget", "-n", ns)
    assert gone.code != 0 and "NotFound" in gone.err, gone
    gone = tinykube_up.kubectl("get", "cm", "shop-config", "-n", ns)
    assert gone.code != 0 and "NotFound" in gone.err, gone
    assert ok(tinykube_up.kubectl("get", "widgets", "-n", ns, "-o", "name")) == ""
    kept = _get(tinykube_up, "crd", CRD)  # helm leaves the CRD in place
    assert kept["metadata"]["uid"] == crd["metadata"]["uid"]
    assert "deletionTimestamp" not in kept["metadata"]

    # A second install (of 0.2.0) reuses the CRD, with no "already exists" failure. helm 3
    # creates what crds/ holds and skips a CRD that exists, so its columns stay; helm 4 creates
    # by server-side apply (its default), which updates an existing CRD to the chart's, so the
    # Note column of 0.2.0 arrives (helm 4.1's installCRDs; upgrade still never touches crds/).
    helm("install", "again", str(upgraded), "-n", ns, "--set", "size=7", "--wait")
    reused = _get(tinykube_up, "crd", CRD, "--show-managed-fields")
    assert reused["metadata"]["uid"] == crd["metadata"]["uid"]
    assert _get(tinykube_up, "widget", "again-widget", "-n", ns)["spec"] == {
        "size": 7,
        "color": "red",
    }
    crd_managers = {(m["manager"], m["operation"]) for m in reused["metadata"]["managedFields"]}
    if which == "helm3":
        assert reused["metadata"]["generation"] == crd["metadata"]["generation"]
        assert ("helm", "Apply") not in crd_managers, crd_managers
        header = ["NAME", "SIZE", "COLOR", "PHASE"]
    else:
        assert reused["metadata"]["generation"] == crd["metadata"]["generation"] + 1
        assert ("helm", "Apply") in crd_managers, crd_managers
        header = ["NAME", "SIZE", "COLOR", "PHASE", "NOTE"]
    assert _rows(tinykube_up, ns) == [header, ["again-widget", "7", "red"]]
    helm("uninstall", "again", "-n", ns, "--wait", "--timeout", "120s")
    assert ok(tinykube_up.kubectl("get", "widgets,cm", "-n", ns, "-o", "name")).split() == [
        "configmap/kube-root-ca.crt"
    ]
    assert _get(tinykube_up, "crd", CRD)["metadata"]["uid"] == crd["metadata"]["uid"]
