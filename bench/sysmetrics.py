"""What the benchmark harness reads about processes: /proc CPU and memory, Prometheus text, py-spy.

All functions are plain and synchronous (a /proc read or a local HTTP GET takes well under a
millisecond); the harness calls them from its sampling task once a second.
"""

from __future__ import annotations

import collections
import math
import os
import ssl
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class ProcSample:
    cpu_seconds: float  # user + system since the process started
    rss_bytes: int
    peak_rss_bytes: int  # VmHWM: the high-water mark of RSS over the process's life


def proc_sample(pid: int) -> ProcSample | None:
    """CPU seconds and RSS of one live process (None once it is gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces; utime and stime are fields 14 and 15.
    fields = stat.rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / TICKS
    rss = peak = 0
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1]) * 1024
        elif line.startswith("VmHWM:"):
            peak = int(line.split()[1]) * 1024
    return ProcSample(cpu, rss, peak)


def load_average() -> list[float]:
    """The 1, 5 and 15 minute load averages (what `uptime` prints)."""
    return [round(x, 2) for x in os.getloadavg()]


def scrape(
    url: str, timeout: float = 5.0, context: ssl.SSLContext | None = None
) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a Prometheus endpoint: (name, sorted labels) -> value. Empty on error.
    `context`: TLS for an https endpoint (etcd's asks for a client certificate)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout, context=context) as resp:
            text = resp.read().decode()
    except OSError:
        return {}
    out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = float(s.value)
    return out


def counter_rates(
    before: dict[tuple[str, tuple[tuple[str, str], ...]], float],
    after: dict[tuple[str, tuple[tuple[str, str], ...]], float],
    name: str,
    by: tuple[str, ...],
    seconds: float,
) -> dict[str, float]:
    """Per-second increase of counter `name` between two scrapes, summed by the labels `by`."""
    totals: dict[str, float] = collections.defaultdict(float)
    for (metric, labels), value in after.items():
        if metric != name:
            continue
        delta = value - before.get((metric, labels), 0.0)
        if delta <= 0:
            continue
        d = dict(labels)
        totals["/".join(d.get(k, "") for k in by)] += delta
    if seconds <= 0:
        return {}
    return {k: round(v / seconds, 1) for k, v in sorted(totals.items(), key=lambda kv: -kv[1])}


def histogram_means(
    before: dict[tuple[str, tuple[tuple[str, str], ...]], float],
    after: dict[tuple[str, tuple[tuple[str, str], ...]], float],
    name: str,
    by: tuple[str, ...],
    seconds: bool = True,
) -> dict[str, dict[str, float]]:
    """Count and mean of histogram `name` between two scrapes (Δ_sum / Δ_count), by labels.

    A histogram of seconds is reported in milliseconds ("mean_ms"); any other as "mean".
    """
    sums: dict[str, float] = collections.defaultdict(float)
    counts: dict[str, float] = collections.defaultdict(float)
    for (metric, labels), value in after.items():
        if metric not in (f"{name}_sum", f"{name}_count"):
            continue
        delta = value - before.get((metric, labels), 0.0)
        d = dict(labels)
        key = "/".join(d.get(k, "") for k in by)
        (sums if metric.endswith("_sum") else counts)[key] += delta
    scale, key = (1000.0, "mean_ms") if seconds else (1.0, "mean")
    return {
        k: {"count": int(c), key: round(scale * sums[k] / c, 2)}
        for k, c in sorted(counts.items(), key=lambda kv: -kv[1])
        if c > 0
    }


def histogram_quantiles(
    before: dict[tuple[str, tuple[tuple[str, str], ...]], float],
    after: dict[tuple[str, tuple[tuple[str, str], ...]], float],
    name: str,
    by: tuple[str, ...],
    quantiles: tuple[float, ...] = (0.5, 0.99),
) -> dict[str, dict[str, float]]:
    """Quantiles of histogram `name` between two scrapes, by labels, as Prometheus'
    histogram_quantile computes them: linear within the bucket the rank falls in (a rank in
    the +Inf bucket reports the highest finite bound). Seconds in, milliseconds out."""
    buckets: dict[str, dict[float, float]] = collections.defaultdict(
        lambda: collections.defaultdict(float)
    )
    for (metric, labels), value in after.items():
        if metric != f"{name}_bucket":
            continue
        d = dict(labels)
        key = "/".join(d.get(k, "") for k in by)
        buckets[key][float(d["le"])] += value - before.get((metric, labels), 0.0)
    out: dict[str, dict[str, float]] = {}
    for key, cumulative in buckets.items():
        bounds = sorted(cumulative)
        total = cumulative[bounds[-1]] if bounds else 0.0
        if total <= 0:
            continue
        row: dict[str, float] = {"count": int(total)}
        for q in quantiles:
            rank, lower, below = q * total, 0.0, 0.0
            value = bounds[-2] if len(bounds) > 1 else 0.0
            for bound in bounds:
                if cumulative[bound] >= rank:
                    if math.isinf(bound):
                        value = lower
                    else:
                        inside = cumulative[bound] - below
                        frac = (rank - below) / inside if inside > 0 else 1.0
                        value = lower + (bound - lower) * frac
                    break
                lower, below = bound, cumulative[bound]
            row[f"p{round(q * 100):d}_ms"] = round(1000 * value, 1)
        out[key] = row
    return dict(sorted(out.items(), key=lambda kv: -kv[1]["count"]))


def pyspy_top(raw_path: Path, top: int = 25) -> dict[str, object]:
    """Summarise a `py-spy record --format raw` file (collapsed stacks, `a;b;c COUNT` per line).

    Returns the share of samples where each function is on the stack (inclusive) and where it
    is the innermost frame (self), the largest first, plus the total sample count.
    """
    inclusive: collections.Counter[str] = collections.Counter()
    self_time: collections.Counter[str] = collections.Counter()
    total = 0
    try:
        lines = raw_path.read_text(errors="replace").splitlines()
    except OSError:
        return {"samples": 0, "inclusive": [], "self": []}
    for line in lines:
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [f for f in stack.split(";") if f]
        # The first frame is the thread ("process 123:..." / "thread (0x..)"); keep functions.
        frames = [f for f in frames if "(" in f and not f.startswith(("process ", "thread "))]
        if not frames:
            continue
        total += count
        for f in set(frames):
            inclusive[f] += count
        self_time[frames[-1]] += count

    def share(c: collections.Counter[str]) -> list[list[object]]:
        return [[f, round(100.0 * n / total, 1)] for f, n in c.most_common(top)] if total else []

    # Inclusive time of the event loop and the entry point is ~100% and says nothing; keep the
    # frames of our packages and of the libraries they call (grpc, protobuf, aetcd, numpy).
    own = collections.Counter(
        {
            f: n
            for f, n in inclusive.items()
            if any(p in f for p in INTERESTING_PATHS) and "__main__.py" not in f
        }
    )
    return {
        "samples": total,
        "inclusive": share(own),
        "self": share(self_time),
    }


INTERESTING_PATHS = (
    "(apiserver/",
    "(scheduler/",
    "(kubelet/",
    "(controller/",
    "(tinykube/",
    "(grpc/",
    "(google/",
    "(aetcd/",
    "(numpy/",
)
