"""The apiserver's part of a memory report (tinykube/memreport.py): its watch caches, counted.

For each kind: the current objects and what each keeps (serialized bytes, the decoded message,
labels and field values, encodings made for watchers), the event window (its events, the old
object versions only it keeps alive, the encodings made for watchers), the index by field value
and the watchers' queues. A decoded message lives in the protobuf runtime's memory, outside
Python's allocator, so its size is measured by decoding a sample of the kind's objects again and
reading glibc's bytes in use before and after.

Runs on the event loop when a report is asked for; it reads the caches and changes nothing.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

from apiserver.watchcache import CachedObject, WatchCache
from tinykube.memreport import malloc_info

SAMPLE = 200


def decoded_bytes(cache: WatchCache, sample: list[CachedObject]) -> float:
    """Bytes one decoded message of the kind takes, on average over `sample` (0 if unknown)."""
    if not sample:
        return 0.0
    before = malloc_info().get("in_use", 0)
    keep = [cache.codec.message.FromString(o.data) for o in sample]
    after = malloc_info().get("in_use", 0)
    size = (after - before) / len(keep)
    del keep
    return max(size, 0.0)


def _objects(objs: list[CachedObject]) -> dict[str, Any]:
    """What `objs` keep: bytes, entries, labels and field values (every shared object or string
    counted once), and how many hold a decoded message now."""
    seen: set[int] = set()

    def once(x: object) -> int:
        if id(x) in seen:
            return 0
        seen.add(id(x))
        return sys.getsizeof(x)

    out = {"count": len(objs), "data": 0, "entry": 0, "labels": 0, "fields": 0, "decoded_now": 0}
    for o in objs:
        out["data"] += sys.getsizeof(o.data)
        out["entry"] += sys.getsizeof(o)
        for part in ("labels", "fields"):
            value: Mapping[str, str] = getattr(o, part)
            size = once(value)
            if size:
                inner = getattr(value, "_values", None)  # a FieldValues' tuple
                if inner is not None:
                    size += once(inner)
                size += sum(once(k) + once(v) for k, v in value.items())
            out[part] += size
        if getattr(o, "_obj", None) is not None:
            out["decoded_now"] += 1
    return out


def cache_report(cache: WatchCache) -> dict[str, Any]:
    state = list(cache.state.values())
    in_state = {id(o) for o in state}
    old: dict[int, CachedObject] = {}
    encodings = 0
    for ev in cache.window:
        for o in (ev.cur, ev.prev):
            if o is not None and id(o) not in in_state:
                old[id(o)] = o
        encodings += sum(
            sys.getsizeof(b)
            for b in (
                ev._main,
                ev._added,
                ev._deleted_prev,
                ev._main_json,
                getattr(ev, "_added_json", None),
                ev._deleted_prev_json,
            )
            if b is not None
        )
    step = max(1, len(state) // SAMPLE)
    sample = state[::step][:SAMPLE]
    per_decoded = decoded_bytes(cache, sample)
    watchers = cache.watchers()
    return {
        "state": {**_objects(state), "decoded_estimate": round(per_decoded * len(state))},
        "decoded_per_object": round(per_decoded),
        "window": {
            "events": len(cache.window),
            "counted_bytes": cache.window_used,
            "event_objects": sys.getsizeof(cache.window) + len(cache.window) * 120,
            "encodings": encodings,
            "old_versions": {
                **_objects(list(old.values())),
                "decoded_estimate": round(per_decoded * len(old)),
            },
        },
        "index_buckets": len(cache._by_value),
        "watchers": {
            "count": len(watchers),
            "queued_events": sum(len(w._queue) for w in watchers),
            "queued_bytes": sum(w._queued_bytes for w in watchers),
        },
    }


def watch_cache_report(caches: Mapping[str, WatchCache]) -> dict[str, Any]:
    """Every kind's `cache_report` that holds anything, biggest first."""
    kinds = {
        kind: cache_report(cache) for kind, cache in caches.items() if cache.state or cache.window
    }
    return dict(
        sorted(
            kinds.items(),
            key=lambda kv: -(kv[1]["state"]["data"] + kv[1]["window"]["counted_bytes"]),
        )
    )
