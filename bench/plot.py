"""Draw one benchmark run as a PNG: throughput over time, latency CDFs, CPU per process.

`plot_run(result, path)` takes the JSON dict `bench/harness.py` writes; `python bench/plot.py
RUN.json` redraws a saved run. Uses matplotlib's non-interactive Agg backend.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # after matplotlib.use
from matplotlib import ticker


def plot_run(result: dict[str, Any], path: Path) -> None:
    fig, (ax_tp, ax_cdf, ax_cpu) = plt.subplots(1, 3, figsize=(17, 4.8))
    title = f"{result['test_case']}/{result['workload']} run {result.get('run', 1)}"
    fig.suptitle(f"tinykube {title} ({result['machine']['nproc']} cores)")

    tp = result["throughput"]
    samples = tp.get("samples", [])
    ax_tp.plot(range(1, len(samples) + 1), samples, marker=".", label="pods bound / s")
    ax_tp.axhline(tp.get("average", 0), color="grey", ls="--", label=f"average {tp['average']}")
    ax_tp.set_xlabel("second of the measurement")
    ax_tp.set_ylabel("pods/s")
    ax_tp.set_title("SchedulingThroughput")
    ax_tp.legend(loc="best", fontsize="small")

    for key, label in (("scheduling", "create → bound"), ("startup", "create → Running")):
        cdf = result["latency"].get(key, {}).get("cdf", [])
        if cdf:
            ax_cdf.plot(cdf, [i / (len(cdf) - 1) for i in range(len(cdf))], label=label)
    ax_cdf.set_xscale("log")
    ax_cdf.xaxis.set_major_formatter(ticker.FormatStrFormatter("%g"))
    ax_cdf.xaxis.set_minor_formatter(ticker.NullFormatter())
    ax_cdf.set_xlabel("seconds")
    ax_cdf.set_ylabel("fraction of pods")
    ax_cdf.set_title("latency CDF")
    ax_cdf.legend(loc="lower right", fontsize="small")

    timeline = result.get("cpu_timeline", {})
    for name, series in sorted(timeline.items()):
        if series and max(series) >= 5:
            ax_cpu.plot(range(1, len(series) + 1), series, label=name)
    ax_cpu.set_xlabel("second of the measurement")
    ax_cpu.set_ylabel("% of one core")
    ax_cpu.set_title("CPU per process")
    ax_cpu.legend(loc="best", fontsize="x-small")

    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        src = Path(arg)
        plot_run(json.loads(src.read_text()), src.with_suffix(".png"))
