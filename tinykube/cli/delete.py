"""`tinykube delete RESOURCE NAME...`, `delete RESOURCE/NAME...` and `tinykube delete -f FILE`.

Prints `pod "web" deleted` per object, as kubectl does; an object that is not there does not
stop the others: each is reported on stderr after them (`Error from server (NotFound): ...`)
and the exit code is 1. A bound pod is deleted gracefully (the
apiserver sets deletionTimestamp and the kubelet removes it once its containers stopped);
`--wait` polls until the object is really gone, `--grace-period 0` asks for immediate removal.
Unlike kubectl, the default is not to wait: in a cluster without kubelets a bound pod would wait
forever.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

from tinykube import errors
from tinykube.cli.apply import add_file_flag, read_manifests
from tinykube.cli.common import RESOURCES, SHORT_NAMES, CLIError, Context, describe_error
from tinykube.cli.get import split_type_name
from tinykube.kinds import KindInfo

WAIT_POLL = 0.2


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "delete",
        help="delete objects by kind and name, or those in a manifest",
        description="Delete objects: `delete pod web` or `delete -f web.yaml`.",
    )
    parser.add_argument(
        "resource", nargs="?", help=f"one of {RESOURCES} (short: {SHORT_NAMES}), or TYPE/NAME"
    )
    parser.add_argument("names", nargs="*", metavar="NAME")
    add_file_flag(parser, required=False)
    parser.add_argument(
        "--grace-period",
        type=int,
        default=None,
        help="seconds a pod gets to stop (0: remove at once; default: the pod's own)",
    )
    parser.add_argument(
        "--cascade",
        choices=("background", "foreground", "orphan"),
        default="background",
        help="what happens to the objects' dependents, as kubectl's --cascade (default "
        "background: they are deleted after the object; orphan: they stay)",
    )
    parser.add_argument(
        "--ignore-not-found", action="store_true", help="treat a missing object as deleted"
    )
    parser.add_argument(
        "--wait", action="store_true", help="wait until the objects are really gone"
    )
    parser.add_argument(
        "--timeout", type=float, default=60.0, help="seconds --wait waits (default 60)"
    )
    parser.set_defaults(func=run)


async def run(args: argparse.Namespace, ctx: Context) -> int:
    targets: list[tuple[KindInfo, str, str]] = []
    if args.filename:
        if args.resource:
            raise CLIError("give either -f FILE or RESOURCE NAME..., not both")
        for item in read_manifests(args.filename, ctx):
            targets.append((item.info, item.namespace, item.name))
    else:
        if not args.resource:
            raise CLIError("you must provide one or more resources by argument or filename")
        info, args.names = split_type_name(args.resource, args.names, "delete")
        if not args.names:
            raise CLIError(f"resource(s) were provided, but no name was specified ({info.plural})")
        targets = [(info, ctx.namespace_for(info), name) for name in args.names]

    async with ctx.client() as client:
        deleted: list[tuple[Any, KindInfo, str, str, str]] = []
        missing: list[errors.NotFoundError] = []
        for info, namespace, name in targets:
            resource = client.resource(info)
            try:
                obj = await resource.delete(
                    name,
                    namespace,
                    grace_period_seconds=args.grace_period,
                    propagation_policy=args.cascade.capitalize(),
                )
            except errors.NotFoundError as exc:
                # As kubectl: a missing object does not stop the others; each is reported
                # after them, and the exit code says not everything was there.
                if not args.ignore_not_found:
                    missing.append(exc)
                continue
            ctx.print(f'{info.kind.lower()} "{name}" deleted')
            deleted.append((resource, info, namespace, name, obj.metadata.uid))
        if args.wait:
            deadline = time.monotonic() + args.timeout
            for resource, info, namespace, name, uid in deleted:
                await wait_gone(resource, info, namespace, name, uid, deadline)
    for error in missing:
        ctx.eprint(describe_error(error, ctx.server))
    return 1 if missing else 0


async def wait_gone(
    resource: Any, info: KindInfo, namespace: str, name: str, uid: str, deadline: float
) -> None:
    """Poll until the object (this uid; a re-created namesake does not count) is gone."""
    while True:
        try:
            obj = await resource.get(name, namespace)
        except errors.NotFoundError:
            return
        if uid and obj.metadata.uid != uid:
            return
        if time.monotonic() > deadline:
            raise errors.DeadlineExceededError(
                f'timed out waiting for the deletion of {info.plural} "{name}"'
            )
        await asyncio.sleep(WAIT_POLL)
