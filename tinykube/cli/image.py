"""`tinykube image build DIR -t REF`: a small image for the containerd runtime, made on this
machine without Docker.

The image has busybox-static (Debian's busybox-static: /bin/sh, httpd, ...) and DIR's files at
`--workdir` (default /app, as a Dockerfile's `COPY . /app`), and runs `--command` with /bin/sh
(default: DIR's `start.sh` if there is one, else a shell that sleeps). `--push` sends it to the
registry REF names (`127.0.0.1:5000/web:1`: the one `tinykube up --runtime containerd` starts;
plain HTTP, a registry on this machine); `--output FILE` writes an OCI archive instead, which
`ctr -n k8s.io images import FILE` loads. Synchronous.
"""

from __future__ import annotations

import argparse
import urllib.error
from pathlib import Path

from tinykube.cli.common import CLIError, Context
from tinykube.containerd import BUSYBOX, oci_blobs, oci_image, push_image


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "image",
        help="build a small busybox-based image from a directory and push it to a registry",
        description="Build an OCI image (busybox-static plus a directory) without Docker.",
        global_flags=False,
    )
    verbs = parser.add_subparsers(dest="verb", required=True)
    build = verbs.add_parser("build", help="build an image from DIR")
    build.add_argument("dir", help="the build context: its files go to --workdir")
    build.add_argument(
        "-t", "--tag", required=True, help="the image reference: REGISTRY/NAME:TAG with --push"
    )
    build.add_argument("--workdir", default="/app", help="where DIR's files go (default /app)")
    build.add_argument(
        "--command",
        default=None,
        help="what the container runs, with /bin/sh -c (default: ./start.sh if DIR has one, "
        "else sleep forever)",
    )
    build.add_argument("--push", action="store_true", help="push it to the registry in --tag")
    build.add_argument("--output", default=None, help="write an OCI archive to this file")
    parser.set_defaults(func=run)


def split_reference(reference: str) -> tuple[str, str, str]:
    """REGISTRY/NAME:TAG -> (registry, name, tag); the registry part must name a host."""
    host, sep, rest = reference.partition("/")
    if not sep or not ("." in host or ":" in host or host == "localhost"):
        raise CLIError(
            f"--tag {reference!r}: --push needs a registry host, e.g. 127.0.0.1:5000/web:1"
        )
    name, _, tag = rest.rpartition(":") if ":" in rest else (rest, "", "latest")
    if not name or not tag:
        raise CLIError(f"--tag {reference!r}: expected REGISTRY/NAME:TAG")
    return host, name, tag


def run(args: argparse.Namespace, ctx: Context) -> int:
    context = Path(args.dir)
    if not context.is_dir():
        raise CLIError(f"{args.dir}: not a directory")
    if not Path(BUSYBOX).exists():
        raise CLIError(f"{BUSYBOX} is missing: apt-get install busybox-static")
    if not args.push and not args.output:
        raise CLIError("nothing to do: give --push, --output FILE, or both")
    command = args.command
    if command is None:
        start = context / "start.sh"
        command = "exec sh ./start.sh" if start.is_file() else "exec sleep 2147483647"
    entrypoint = ["/bin/sh", "-c", command]
    image = oci_blobs(entrypoint, context=context, workdir=args.workdir)
    if args.output:
        Path(args.output).write_bytes(oci_image(args.tag, entrypoint, image=image))
        ctx.print(f"wrote {args.output} ({args.tag}); load it with: ctr -n k8s.io images import")
    if args.push:
        registry, name, tag = split_reference(args.tag)
        try:
            digest = push_image(registry, name, tag, entrypoint, image=image)
        except (urllib.error.URLError, OSError) as exc:
            raise CLIError(f"push to {registry}: {exc}") from exc
        ctx.print(f"pushed {args.tag} ({registry}/{name}@{digest})")
    return 0
