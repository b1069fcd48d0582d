"""What the README, docs/compose.md, the Dockerfile and examples/ tell a new user still holds.

Each check reads the files as a user would copy from them; none starts anything.
"""

from __future__ import annotations

import re
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from apiserver.registry import strategy_for
from tinykube import kinds
from tinykube.cli.main import main
from tinykube.manifest import load_manifests
from tinykube.quantity import parse_quantity

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
EXAMPLES = ROOT / "examples"


def readme_pods_yaml() -> str:
    """The `pods.yaml` the README's CLI section applies (the yaml block after "where")."""
    after = README.split("where `pods.yaml` is", 1)[1]
    match = re.search(r"```yaml\n(.*?)```", after, re.DOTALL)
    assert match is not None
    return match.group(1)


def selected_by(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def example_selectors() -> list[tuple[str, dict[str, str]]]:
    found = []
    for path in sorted(EXAMPLES.glob("*.yaml")):
        for item in load_manifests(path.read_text(), str(path)):
            obj: Any = item.obj
            if item.info.kind == "ReplicaSet":
                found.append(
                    (f"{path.name} {obj.metadata.name}", dict(obj.spec.selector.matchLabels))
                )
            elif item.info.kind == "Service":
                found.append((f"{path.name} {obj.metadata.name}", dict(obj.spec.selector)))
    return found


def test_the_readme_pods_are_not_adopted_by_the_examples_controllers() -> None:
    pods = [o.obj for o in load_manifests(readme_pods_yaml()) if o.info.kind == "Pod"]
    assert pods
    for pod in pods:
        labels = dict(pod.metadata.labels)  # type: ignore[attr-defined]
        clashes = [name for name, sel in example_selectors() if selected_by(sel, labels)]
        assert clashes == [], f"README pod {labels} is selected by {clashes}"


def test_too_big_asks_for_more_cpu_than_any_machine_has() -> None:
    (item,) = load_manifests((EXAMPLES / "too-big.yaml").read_text())
    pod: Any = item.obj
    cpu = sum(
        (parse_quantity(c.resources.requests["cpu"]) for c in pod.spec.containers), Fraction()
    )
    assert cpu >= 1000


def test_compose_docs_list_every_grpc_service() -> None:
    text = (ROOT / "docs" / "compose.md").read_text()
    listed = text.split(" localhost:6443 list\n", 1)[1].split("$ ", 1)[0]
    services = {k.stub.__name__.removesuffix("Stub") for k in kinds.ALL_KINDS}
    assert {f"tinykube.v1.{s}" for s in services} <= set(listed.split())


def test_the_image_exposes_every_port_the_compose_file_serves() -> None:
    exposed = set()
    for line in (ROOT / "Dockerfile").read_text().splitlines():
        if line.startswith("EXPOSE "):
            exposed |= set(line.split()[1:])
    # apiserver gRPC and REST, kubelet, controller manager, scheduler, proxy health
    assert {"6443", "8080", "10250", "10257", "10259", "10256"} <= exposed


def test_the_readme_shows_each_node_its_own_address() -> None:
    cli = README.split("## The `tinykube` CLI", 1)[1].split("where `pods.yaml` is", 1)[0]
    assert "127.0.0.1   node-" not in cli
    assert "node-1/127.0.1.1" in cli


def help_text(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main([*argv, "--help"])
    assert exit_info.value.code == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("command", ["get", "delete"])
def test_get_and_delete_help_names_every_resource(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    text = " ".join(help_text(capsys, command).split())
    for info in kinds.ALL_KINDS:
        assert info.plural in text


def test_up_help_offers_no_client_flags(capsys: pytest.CaptureFixture[str]) -> None:
    text = help_text(capsys, "up")
    for flag in ("--server", "--namespace", "--all-namespaces", "-A"):
        assert flag not in text
    assert "--data-dir" in text


def test_make_install_says_what_it_does_and_shows_pips_progress() -> None:
    """A first `make up` installs for a minute or two: every step is announced and the long
    pip install is not --quiet. Read from the Makefile's recipe, not run."""
    text = (ROOT / "Makefile").read_text()
    recipe = text.split("$(STAMP): pyproject.toml\n", 1)[1].split("\n\n", 1)[0]
    installs = [line for line in recipe.splitlines() if "pip install" in line and "-e " in line]
    assert len(installs) == 1
    assert "--quiet" not in installs[0]
    announced = [line for line in recipe.splitlines() if line.lstrip("\t@").startswith("echo")]
    assert len(announced) >= 3  # pip upgrade, the install, done


@pytest.mark.parametrize("name", ["anti-affinity", "topology-spread", "gated-pod"])
def test_the_scheduling_examples_are_valid_as_the_apiserver_checks_them(name: str) -> None:
    from datetime import UTC, datetime

    (item,) = load_manifests((EXAMPLES / f"{name}.yaml").read_text())
    strategy_for(item.info).prepare_for_create(item.obj, datetime.now(UTC))
    item.obj.metadata.namespace = "default"  # type: ignore[attr-defined]
    assert strategy_for(item.info).validate_create(item.obj) == []


def test_the_pdb_example_covers_the_replicaset_example() -> None:
    (rs,) = load_manifests((EXAMPLES / "replicaset.yaml").read_text())
    (pdb,) = load_manifests((EXAMPLES / "pdb.yaml").read_text())
    assert pdb.info.kind == "PodDisruptionBudget"
    budget: Any = pdb.obj
    template: Any = rs.obj
    assert selected_by(
        dict(budget.spec.selector.matchLabels), dict(template.spec.template.metadata.labels)
    )
    budget.metadata.namespace = "default"  # what the apiserver fills in
    assert strategy_for(pdb.info).validate_create(budget) == []
