"""The command blocks of README.md and docs/*.md, run against `tinykube up` as a reader runs them.

The commands are not copied here: tests/docblocks.py reads them from the pages. Each page's
commands run in order in one bash (so `RV=$(...)` or `export` carries over to later commands),
from a directory laid out like the checkout (`.tinykube/kubeconfig`, `.tinykube/pki/`,
`examples/`, `.venv/bin`), with `.venv/bin` on PATH and KUBECONFIG set as the README's tour sets
them. The cluster listens on free ports, so the default addresses the pages show (6443, 8080,
10259, 10257) are replaced by this cluster's. Each command's output is checked against what the
page shows (tests/docblocks.py says how), and a command must fail exactly when the page shows an
error. Pages run in README-then-docs order on the same cluster, each cleaning up after itself.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.docblocks import Page, Step, doc_pages, missing_line, parse_page
from tests.e2e.conftest import UpCluster, venv_bin

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

PAGES = [parse_page(path) for path in doc_pages()]
RUNNABLE = [page for page in PAGES if page.steps]
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def checkout(tinykube_up: UpCluster, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory that looks like the checkout after `make up`, for this module's cluster."""
    work = tmp_path_factory.mktemp("docs-checkout")
    (work / ".tinykube").mkdir()
    (work / ".tinykube" / "kubeconfig").symlink_to(tinykube_up.kubeconfig)
    (work / ".tinykube" / "pki").symlink_to(tinykube_up.pki_dir)
    (work / ".venv").symlink_to(venv_bin().parent)
    (work / "examples").symlink_to(ROOT / "examples")
    return work


def addresses(cluster: UpCluster) -> dict[str, str]:
    """The default addresses the pages show, and this cluster's for each."""
    found = {
        "https://127.0.0.1:8080": cluster.rest_url,
        "localhost:6443": cluster.api,
        "127.0.0.1:6443": cluster.api,
    }
    for name, port in (("scheduler", 10259), ("controller", 10257)):
        if name in cluster.endpoints:
            found[f"127.0.0.1:{port}"] = cluster.endpoints[name]
    return found


def run_steps(
    page: Page, steps: list[Step], cluster: UpCluster, work: Path
) -> list[tuple[int, list[str]]]:
    """Run the page's commands in one bash; (exit code, output) for each."""
    for name, text in page.files.items():
        (work / name).write_text(text)
    script: list[str] = []
    for n, step in enumerate(steps):
        command = step.command
        for shown, actual in addresses(cluster).items():
            command = command.replace(shown, actual)
        # The command on lines of its own: a trailing `# comment` must not swallow the braces.
        script += [
            f"echo '@@@BEGIN {n}'",
            "{",
            command,
            "} 2>&1 </dev/null",
            f'echo "@@@END {n} $?"',
        ]
    env = {
        **os.environ,
        "PATH": f"{venv_bin()}:{os.environ.get('PATH', '')}",
        "KUBECONFIG": str(work / ".tinykube" / "kubeconfig"),
    }
    env.pop("TINYKUBE_SERVER", None)
    done = subprocess.run(
        ["bash", "-c", "\n".join(script)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=work,
        env=env,
    )
    results: list[tuple[int, list[str]]] = []
    current: list[str] = []
    for line in done.stdout.splitlines():
        if line.startswith("@@@BEGIN "):
            current = []
        elif line.startswith("@@@END "):
            results.append((int(line.split()[2]), current))
        else:
            current.append(line)
    assert len(results) == len(steps), (
        f"{page.path.name}: the script died after {len(results)} of {len(steps)} commands:\n"
        f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    )
    return results


@pytest.mark.parametrize("page", RUNNABLE, ids=[p.path.name for p in RUNNABLE])
def test_page_commands(page: Page, tinykube_up: UpCluster, checkout: Path) -> None:
    steps = page.steps
    results = run_steps(page, steps, tinykube_up, checkout)
    where = page.path.relative_to(ROOT)
    for step, (code, output) in zip(steps, results, strict=True):
        shown = "\n".join(output)
        if step.expects_error:
            assert code != 0, (
                f"{where}:{step.line} expected an error from:\n$ {step.command}\n{shown}"
            )
        else:
            assert code == 0, f"{where}:{step.line} failed ({code}):\n$ {step.command}\n{shown}"
        missing = missing_line(step.expected, output)
        assert missing is None, (
            f"{where}:{step.line}: {missing!r} not in the output of:\n$ {step.command}\n{shown}"
        )
