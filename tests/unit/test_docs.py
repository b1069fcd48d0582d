"""What the README, docs/, the Dockerfile and examples/ tell a new user still holds.

Each check reads the files as a user would copy from them; none starts anything. The pages'
commands are run by tests/e2e/test_docs_commands.py; here only how they are read is checked.
"""

from __future__ import annotations

import re
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from apiserver.registry import strategy_for
from tests.docblocks import (
    NOT_RUN,
    Block,
    block_steps,
    doc_pages,
    missing_line,
    named_tests,
    normalise,
    parse_page,
)
from tinykube import kinds
from tinykube.cli.main import main
from tinykube.manifest import load_manifests
from tinykube.quantity import parse_quantity

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
CLI_PAGE = (ROOT / "docs" / "cli.md").read_text()
EXAMPLES = ROOT / "examples"


def readme_pods_yaml() -> str:
    """The `pods.yaml` docs/cli.md has the reader save and apply."""
    return parse_page(ROOT / "docs" / "cli.md").files["pods.yaml"]


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


def test_the_cli_page_shows_each_node_its_own_address() -> None:
    cli = CLI_PAGE.split("## Client commands", 1)[1]
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


# -- the pages' command blocks (run by tests/e2e/test_docs_commands.py) ---------------------------


def test_every_marked_block_names_existing_tests_that_cover_it() -> None:
    for path in doc_pages():
        for marker in parse_page(path).markers:
            named = named_tests(marker)
            assert named, f"{path.name}: {marker!r} names no test"
            for name in named:
                assert (ROOT / name).exists(), f"{path.name}: {marker!r} names a missing {name}"


def test_the_marks_are_where_the_test_needs_them() -> None:
    compose = parse_page(ROOT / "docs" / "compose.md")
    assert compose.not_run is not None and compose.steps == []  # a page-wide mark
    cri = parse_page(ROOT / "docs" / "cri.md")
    assert all(b.not_run for b in cri.blocks if b.lang == "sh")
    readme = parse_page(ROOT / "README.md")
    (make,) = [b for b in readme.blocks if any("make up" in line for line in b.body)]
    assert make.not_run is not None and make.lang == "sh"
    assert not any("make " in s.command for s in readme.steps)
    assert any(s.command.startswith("kubectl apply") for s in readme.steps)


def github_anchors(text: str) -> set[str]:
    """The anchors GitHub gives a page's headings: lower case, punctuation dropped, - for spaces."""
    anchors = set()
    for heading in re.findall(r"^#+ (.+)$", text, re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        anchors.add(slug)
    return anchors


def test_every_docs_page_is_in_the_readme_index_and_every_link_resolves() -> None:
    for page in sorted((ROOT / "docs").glob("*.md")):
        assert f"(docs/{page.name})" in README, f"README's index lacks docs/{page.name}"
    for path in doc_pages():
        text = path.read_text()
        for target, anchor in re.findall(r"\]\(([^)#\s]*)(?:#([^)\s]*))?\)", text):
            if "://" in target or not (target or anchor):
                continue
            linked = path.parent / target if target else path
            assert linked.exists(), f"{path.name} links to a missing {target}"
            if anchor and linked.suffix == ".md":
                assert anchor in github_anchors(linked.read_text()), (
                    f"{path.name} links to #{anchor}, which {linked.name} has no heading for"
                )


def test_the_grpcurl_walkthrough_is_read_as_commands_with_their_output() -> None:
    steps = parse_page(ROOT / "docs" / "grpcurl.md").steps
    commands = [s.command for s in steps]
    assert any("tinykube.v1.Pods/Bind" in c for c in commands)
    assert any("tinykube.v1.Pods/Watch" in c and "$RV" in c for c in commands)
    assert sum(s.expects_error for s in steps) >= 3  # watch end, AlreadyExists, Aborted
    assert all(c.startswith(("grpcurl ", "RV=", "LEASE_RV=")) for c in commands)


def test_console_and_sh_blocks_become_steps() -> None:
    console = Block(
        "console",
        "console",
        ["$ echo a \\", "  b   # note", "a b", "$ false", "error: no"],
        1,
        None,
    )
    first, second = block_steps(console)
    assert (first.command, first.expected, first.expects_error) == (
        "echo a   b   # note",
        ["a b"],
        False,
    )
    assert (second.command, second.expects_error) == ("false", True)
    sh = Block("sh", "sh", ["# a comment", "", "make up   # runs"], 1, None)
    assert [s.command for s in block_steps(sh)] == ["make up   # runs"]


def test_a_mark_skips_the_block_under_it(tmp_path: Path) -> None:
    page = tmp_path / "p.md"
    page.write_text(
        f"# P\n\nintro\n\n## S\n\n{NOT_RUN} needs root. Covered by `tests/x.py`.\n\n"
        "```sh\nrm -rf /\n```\n\n```sh\ntrue\n```\n"
    )
    parsed = parse_page(page)
    assert [s.command for s in parsed.steps] == ["true"]
    assert parsed.not_run is None and named_tests(parsed.markers[0]) == ["tests/x.py"]
    page.write_text(f"# P\n\n{NOT_RUN} needs Docker (`tests/y.py`).\n\nText.\n\n```sh\ntrue\n```\n")
    assert parse_page(page).steps == []


def test_output_matching_masks_volatile_values_and_keeps_order() -> None:
    shown = ['  "uid": "aaa",', "...", '"name": "web"', '"phase": "Pending"']
    actual = ["{", '"uid": "bbb",', '"x": 1', '"name": "web"', '"phase": "Pending"', "}"]
    assert missing_line(shown, actual) is None
    assert missing_line(list(reversed(shown)), actual) == '"name": "web"'
    assert missing_line(['"name": "db"'], actual) == '"name": "db"'


@pytest.mark.parametrize(
    ("shown", "actual"),
    [
        (
            "web-4ldr9   1/1   Running   0   5s    127.0.1.2   node-2",
            "web-x7k2p 1/1 Running 0 3m56s 127.0.1.1 node-1",
        ),
        (
            "Start Time:  Sat, 05 Dec 2026 18:43:33 +0000",
            "Start Time: Mon, 07 Dec 2026 01:02:03 +0000",
        ),
        ("2026-12-05T18:41:31.675952038Z from envFrom", "2026-12-06T01:00:00.1Z from envFrom"),
        ("UID   c34b9f01-5eaf-4d6b-a534-cedb8e71b94b", "UID 0475de72-ee2b-4981-95c8-b2c9be185d2c"),
        ("hello-5d4f8c7b9-abcde", "hello-6c9d7f8b45-zz9zz"),
    ],
)
def test_what_changes_between_runs_is_masked(shown: str, actual: str) -> None:
    assert normalise(shown) == normalise(actual)


@pytest.mark.parametrize(
    ("shown", "actual"),
    [
        ("replicaset.apps/web scaled", "replicaset.apps/web configured"),
        ("web   5   5   5   13s", "web 5 5 4 13s"),
        ("memory limit 64Mi", "memory limit 32Mi"),
    ],
)
def test_what_matters_is_not_masked(shown: str, actual: str) -> None:
    assert normalise(shown) != normalise(actual)
