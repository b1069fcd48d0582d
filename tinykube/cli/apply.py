"""`tinykube apply -f FILE|-`: create each object in a manifest, or update it if it exists.

There is no server-side apply and no last-applied annotation, so an existing object is updated
with a merge: the manifest's fields replace the live object's, maps merge key by key, lists of
named items (containers, env, ports...) merge by name, other lists are replaced, and fields the
manifest leaves out keep their live values (so defaults and `spec.nodeName` set by the
scheduler survive). Status is never applied (the apiserver owns it). The update carries the
live resourceVersion; if someone else wrote in between (Conflict), the object is re-read and the
merge retried a few times. Prints `pod/web created`, `pod/web configured` or `pod/web unchanged`.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import Message

from tinykube import errors
from tinykube.cli.common import CLIError, Context
from tinykube.manifest import ManifestObject, load_manifests, to_dict

CONFLICT_RETRIES = 3

# Server-owned metadata: kept from the live object whatever the manifest says.
_SERVER_METADATA = (
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
)


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "apply",
        help="create or update objects from a YAML/JSON manifest",
        description="Create objects from a manifest, or update them if they exist.",
    )
    add_file_flag(parser, required=True)
    parser.set_defaults(func=run)


def add_file_flag(parser: argparse.ArgumentParser, *, required: bool) -> None:
    parser.add_argument(
        "-f",
        "--filename",
        action="append",
        required=required,
        default=None,
        metavar="FILE",
        help="manifest file, or - for stdin (repeatable)",
    )


def read_manifests(files: list[str], ctx: Context) -> list[ManifestObject]:
    """Every object of every file, with its namespace resolved against -n."""
    objects: list[ManifestObject] = []
    for name in files:
        if name == "-":
            text, source = sys.stdin.read(), "STDIN"
        else:
            try:
                with open(name, encoding="utf-8") as fh:
                    text, source = fh.read(), name
            except FileNotFoundError as exc:
                raise CLIError(f'the path "{name}" does not exist') from exc
        objects.extend(load_manifests(text, source))
    for item in objects:
        meta = item.obj.metadata  # type: ignore[attr-defined]
        if not item.info.namespaced:
            meta.namespace = ""
        elif not meta.namespace:
            meta.namespace = ctx.namespace
        elif ctx.namespace_explicit and meta.namespace != ctx.namespace:
            raise CLIError(
                f'the namespace from the provided object "{meta.namespace}" does not match '
                f"the namespace \"{ctx.namespace}\". You must pass '--namespace={meta.namespace}' "
                "to perform this operation."
            )
    return objects


def _named_list(value: Any) -> bool:
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(v, dict) and "name" in v for v in value)
    )


def merge(live: Any, desired: Any) -> Any:
    """`desired` laid over `live` (see the module docstring for the rules)."""
    if isinstance(live, dict) and isinstance(desired, dict):
        merged = dict(live)
        for key, value in desired.items():
            merged[key] = merge(live[key], value) if key in live else value
        return merged
    if _named_list(live) and _named_list(desired):
        by_name = {item["name"]: item for item in live}
        return [merge(by_name[d["name"]], d) if d["name"] in by_name else d for d in desired]
    return desired


def merged_object(live: Message, desired: Message) -> Message:
    """The object an update should send: the manifest merged over the live object."""
    live_dict = to_dict(live, zero_fields=False)
    want = to_dict(desired, zero_fields=False)
    want.pop("status", None)
    for field in _SERVER_METADATA:
        want.get("metadata", {}).pop(field, None)
    result = type(live)()
    json_format.ParseDict(merge(live_dict, want), result)
    return result


async def apply_object(resource: Any, item: ManifestObject) -> str:
    """Create or update one object; returns "created", "configured" or "unchanged"."""
    obj: Any = item.obj
    name, namespace = obj.metadata.name, obj.metadata.namespace
    if not name:
        raise CLIError(f"error in document {item.index}: metadata.name is required for apply")
    refused: errors.AlreadyExistsError | None = None
    for attempt in range(CONFLICT_RETRIES + 1):
        try:
            live = await resource.get(name, namespace)
        except errors.NotFoundError:
            if refused is not None:
                # Still absent: the create clashed with something else (a Service's requested
                # clusterIP or nodePort is taken), not with a concurrent create of this name.
                raise refused from None
            try:
                await resource.create(obj)
                return "created"
            except errors.AlreadyExistsError as exc:
                refused = exc
                continue  # created concurrently: update it instead
        update = merged_object(live, obj)
        if update == live:
            return "unchanged"
        try:
            await resource.update(update)
            return "configured"
        except errors.ConflictError:
            if attempt == CONFLICT_RETRIES:
                raise
    raise errors.ConflictError(f"{item.info.plural} {name!r} kept changing; try again")


async def run(args: argparse.Namespace, ctx: Context) -> int:
    objects = read_manifests(args.filename, ctx)
    if not objects:
        raise CLIError("no objects passed to apply")
    async with ctx.client() as client:
        for item in objects:
            outcome = await apply_object(client.resource(item.info), item)
            ctx.print(f"{item.info.kind.lower()}/{item.name} {outcome}")
    return 0
