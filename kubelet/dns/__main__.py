"""`python -m kubelet.dns --dns-address 10.96.0.10:53`: the cluster DNS (see app.py)."""

from __future__ import annotations

import logging

from kubelet.dns.app import ClusterDns
from kubelet.dns.settings import Settings
from tinykube import aio
from tinykube.serving import configure_logging, run_until_signalled
from tinykube.tls import start_checks


async def _main(settings: Settings) -> None:
    start_checks(settings.security, "kubelet.dns")
    server = ClusterDns(settings)
    port = await server.start()
    logging.getLogger("kubelet.dns").info("cluster DNS serving health on port %d", port)
    await run_until_signalled(server.stop)


def main(argv: list[str] | None = None) -> None:
    configure_logging(logging.INFO)
    aio.run(_main(Settings.from_args(argv)))


if __name__ == "__main__":
    main()
