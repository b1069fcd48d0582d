"""`python -m scheduler`: flags (with TINYKUBE_* environment fallbacks) -> Settings -> SchedulerApp.

Runs until SIGINT/SIGTERM (graceful stop, releasing the lease) or until leadership is lost
(exit status 1, as kube-scheduler does; a supervisor restarts it with a fresh cache).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from collections.abc import Sequence

from scheduler.app import SchedulerApp
from scheduler.config import ConfigError, load_config
from scheduler.settings import Settings
from tinykube import aio, memreport
from tinykube.flags import add_apiserver_flag, apiserver_flag
from tinykube.serving import configure_logging
from tinykube.tls import add_flags, security_from_args, start_checks

_D = Settings()


def _env(name: str, default: object) -> str:
    return os.environ.get(f"TINYKUBE_{name}", str(default))


def _bool(text: str) -> bool:
    if text.lower() in ("1", "true", "yes", "on"):
        return True
    if text.lower() in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def parse_args(argv: Sequence[str] | None = None) -> Settings:
    p = argparse.ArgumentParser(
        prog="python -m scheduler",
        description="tinykube scheduler: watches pending pods and binds them to nodes.",
    )
    add_apiserver_flag(p, "TINYKUBE_APISERVER")
    p.add_argument(
        "--bind-address",
        default=_env("BIND_ADDRESS", _D.bind_address),
        help="address to serve gRPC on (default 127.0.0.1)",
    )
    p.add_argument(
        "--port",
        type=int,
        default=int(_env("SCHEDULER_PORT", _D.port)),
        help="gRPC port: health, reflection, tinykube.v1.Scheduler (default 10259)",
    )
    p.add_argument(
        "--metrics-port",
        type=int,
        default=int(_env("METRICS_PORT", 0)),
        help="Prometheus /metrics port (0: off)",
    )
    p.add_argument(
        "--config",
        default=_env("SCHEDULER_CONFIG", ""),
        help="scheduler configuration YAML (profiles, plugins, weights)",
    )
    p.add_argument(
        "--leader-elect",
        type=_bool,
        default=_bool(_env("LEADER_ELECT", "true")),
        help="campaign for the lease before scheduling (default true)",
    )
    p.add_argument("--lease-namespace", default=_D.lease_namespace)
    p.add_argument("--lease-name", default=_D.lease_name)
    p.add_argument(
        "--identity",
        default=_env("IDENTITY", _D.identity),
        help="leader election identity (default hostname_pid)",
    )
    p.add_argument("--lease-duration", type=float, default=_D.lease_duration)
    p.add_argument("--renew-deadline", type=float, default=_D.renew_deadline)
    p.add_argument("--retry-period", type=float, default=_D.retry_period)
    p.add_argument(
        "--max-binds",
        type=int,
        default=_D.max_binds,
        help="binding cycles in flight at once (default 256; they share BindBatch RPCs)",
    )
    p.add_argument("--log-level", default=_env("LOG_LEVEL", "INFO"))
    add_flags(p)
    a = p.parse_args(argv)
    configure_logging(a.log_level)
    security = security_from_args(a)
    return Settings(
        apiserver=security.apiserver(apiserver_flag(a), _D.apiserver),
        security=security,
        bind_address=a.bind_address,
        port=a.port,
        metrics_port=a.metrics_port,
        config_file=a.config,
        leader_elect=a.leader_elect,
        lease_namespace=a.lease_namespace,
        lease_name=a.lease_name,
        identity=a.identity,
        lease_duration=a.lease_duration,
        renew_deadline=a.renew_deadline,
        retry_period=a.retry_period,
        max_binds=a.max_binds,
    )


async def amain(settings: Settings) -> int:
    start_checks(settings.security, "scheduler")
    try:
        config = load_config(settings.config_file)
    except (ConfigError, OSError) as exc:
        print(f"scheduler: invalid --config {settings.config_file}: {exc}", file=sys.stderr)
        return 2
    app = SchedulerApp(settings, config)
    await app.start()
    memreport.install()
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    stopper = asyncio.create_task(stop.wait())
    await asyncio.wait({stopper, app.done}, return_when=asyncio.FIRST_COMPLETED)
    code = 0
    if app.done.done() and not stopper.done():
        failure = app.done.exception() if not app.done.cancelled() else None
        logging.getLogger("scheduler").error("scheduling stopped: %r; exiting", failure)
        code = 1
    stopper.cancel()
    await app.stop()
    return code


def main(argv: Sequence[str] | None = None) -> int:
    return aio.run(amain(parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
