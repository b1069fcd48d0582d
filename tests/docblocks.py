"""The command blocks of README.md and docs/*.md, as the docs test runs them (pure: no processes).

A page's fenced blocks are read in order. In a `console` block each `$ ` line is a command (a
trailing backslash continues it) and the lines under it are its output; in an `sh`, `bash` or
`shell` block each line that is not blank or a comment is a command whose output is not shown.
A `yaml file=NAME` block is a file the reader saves before running the commands. Any other block
(output, YAML, plain text) is not run.

A block preceded by a quote paragraph starting with NOT_RUN is not run; the quote says why and
names the tests that cover it. Such a quote in a page's introduction (before its first `##`
section) that is not directly followed by a block covers every block on the page.

Output is compared line by line after masking what changes between runs (ages, uids,
resourceVersions, timestamps, generated name suffixes, which node a pod runs on): every line a
page shows must appear in the command's output, in order; `...` stands for lines left out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOT_RUN = "> **Not run by the docs test:**"
COMMAND_LANGS = frozenset({"console", "sh", "bash", "shell"})
# Output lines that mean the command is expected to fail.
ERROR_PREFIXES = ("ERROR:", "Error from server", "error:", "command terminated with exit code")

_FENCE = re.compile(r"^(\s*)```(.*)$")
_VOLATILE_JSON = re.compile(
    r'"(uid|resource_version|resourceVersion|generation|creation_timestamp|creationTimestamp|'
    r"deletion_timestamp|deletionTimestamp|deletion_grace_period_seconds|last_transition_time|"
    r'lastTransitionTime|time_added|timeAdded|start_time|startTime)": "[^"]*"'
)
_MASKS = [
    (re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"), "<uuid>"),
    (re.compile(r"sha256:[0-9a-f]{64}"), "sha256:<digest>"),
    (re.compile(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(\.\d+)?Z?"), "<time>"),
    (re.compile(r"\w{3}, \d\d \w{3} \d{4} \d\d:\d\d:\d\d [+-]\d{4}"), "<time>"),
    (re.compile(r"(?<![\w./-])\d+[smhd](\d+[smh])?(?![\w./-])"), "<age>"),
    # generated names: a ReplicaSet's pod-template-hash, a pod's random suffix
    (re.compile(r"\b([a-z][a-z0-9-]*?)-[a-z0-9]{9,10}-[a-z0-9]{5}\b"), r"\1-<hash>-<x>"),
    (re.compile(r"\b([a-z][a-z0-9-]*?)-[a-z0-9]{5}\b"), r"\1-<x>"),
    # which node the scheduler chose
    (re.compile(r"\bnode-\d+\b"), "node-<n>"),
    (re.compile(r"\b127\.0\.1\.\d+\b"), "127.0.1.<n>"),
]


@dataclass
class Step:
    """One command and the output the page shows for it."""

    command: str
    expected: list[str] = field(default_factory=list)
    line: int = 0

    @property
    def expects_error(self) -> bool:
        return any(line.strip().startswith(ERROR_PREFIXES) for line in self.expected)


@dataclass
class Block:
    lang: str
    info: str
    body: list[str]
    line: int  # of the opening fence, 1-based
    not_run: str | None  # the marker's text when the block is not run

    @property
    def file_name(self) -> str | None:
        match = re.search(r"\bfile=(\S+)", self.info)
        return match.group(1) if match else None


@dataclass
class Page:
    path: Path
    blocks: list[Block]
    not_run: str | None  # the page-wide marker, if any

    @property
    def steps(self) -> list[Step]:
        return [s for b in self.runnable for s in block_steps(b)]

    @property
    def runnable(self) -> list[Block]:
        if self.not_run is not None:
            return []
        return [b for b in self.blocks if b.lang in COMMAND_LANGS and b.not_run is None]

    @property
    def files(self) -> dict[str, str]:
        return {
            name: "\n".join(b.body) + "\n" for b in self.blocks if (name := b.file_name) is not None
        }

    @property
    def markers(self) -> list[str]:
        found = [b.not_run for b in self.blocks if b.not_run is not None]
        return ([self.not_run] if self.not_run else []) + found


def doc_pages() -> list[Path]:
    """README.md first, then docs/*.md in name order."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _marker_before(lines: list[str], index: int) -> str | None:
    """The NOT_RUN quote paragraph that ends just above line `index` (blank lines between)."""
    i = index - 1
    while i >= 0 and not lines[i].strip():
        i -= 1
    end = i
    while i >= 0 and lines[i].strip().startswith(">"):
        i -= 1
    quote = [line.strip() for line in lines[i + 1 : end + 1]]
    if quote and quote[0].startswith(NOT_RUN):
        return " ".join(q.lstrip("> ").strip() for q in quote)
    return None


def parse_page(path: Path) -> Page:
    lines = path.read_text().splitlines()
    blocks: list[Block] = []
    page_marker: str | None = None
    first_section = next((n for n, line in enumerate(lines) if line.startswith("## ")), len(lines))
    for n, line in enumerate(lines[:first_section]):
        if line.strip().startswith(NOT_RUN):
            rest = lines[n:first_section]
            j = next((k for k, text in enumerate(rest) if not text.strip().startswith(">")), 0)
            following = next((text for text in rest[j:] if text.strip()), "")
            if not following.lstrip().startswith("```"):
                page_marker = _marker_before(lines, n + j)
    i = 0
    while i < len(lines):
        match = _FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        indent, info = match.group(1), match.group(2).strip()
        start = i
        body: list[str] = []
        i += 1
        while i < len(lines) and lines[i].strip() != "```":
            body.append(lines[i][len(indent) :] if lines[i].startswith(indent) else lines[i])
            i += 1
        lang = info.split()[0] if info else ""
        blocks.append(Block(lang, info, body, start + 1, _marker_before(lines, start)))
        i += 1
    return Page(path, blocks, page_marker)


def block_steps(block: Block) -> list[Step]:
    steps: list[Step] = []
    if block.lang != "console":
        for n, line in enumerate(block.body):
            if line.strip() and not line.lstrip().startswith("#"):
                steps.append(Step(line, [], block.line + 1 + n))
        return steps
    i = 0
    while i < len(block.body):
        line = block.body[i]
        if not line.startswith("$ "):
            if steps:
                steps[-1].expected.append(line)
            i += 1
            continue
        number = block.line + 1 + i
        command = line[2:]
        while command.endswith("\\") and i + 1 < len(block.body):
            i += 1
            command = command[:-1] + block.body[i]
        steps.append(Step(command, [], number))
        i += 1
    return steps


def normalise(line: str) -> str:
    line = _VOLATILE_JSON.sub(lambda m: f'"{m.group(1)}": "*"', line.strip())
    for pattern, replacement in _MASKS:
        line = pattern.sub(replacement, line)
    return " ".join(line.split())


def missing_line(expected: list[str], actual: list[str]) -> str | None:
    """The first expected line not found (in order) in `actual`, or None if all are there."""
    remaining = iter(normalise(a) for a in actual)
    for line in expected:
        want = normalise(line)
        if not want or want == "...":
            continue
        if not any(got == want for got in remaining):
            return line
    return None


def named_tests(marker: str) -> list[str]:
    """The test files (and CI scripts) a NOT_RUN marker names."""
    return re.findall(r"(tests/[\w/]+\.py|\.ci/run)", marker)
