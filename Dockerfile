# One image for every tinykube component; docker-compose.yml picks the command.
# Build stage: the project and its runtime dependencies (no dev extras) in a virtualenv.
# Final stage: that virtualenv on a clean base, run as a non-root user.
#
# BASE_IMAGE: any Debian-like image with python3 (3.11+) and its venv module. The default
# comes from Docker Hub; `make compose-images` builds one from Debian's packages instead
# (mmdebstrap + docker import, docs/compose.md) and passes it here, so no registry but PyPI
# and Debian's is needed. Only `python3` is used: Debian's python3 has no `python` command.
ARG BASE_IMAGE=python:3.12-slim-bookworm

FROM ${BASE_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python3 -m venv /opt/tinykube && /opt/tinykube/bin/pip install --upgrade pip
WORKDIR /src
# Dependencies first, in their own layer: editing the source does not reinstall grpcio & co.
COPY pyproject.toml README.md ./
RUN python3 -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]))' > requirements.txt \
 && /opt/tinykube/bin/pip install -r requirements.txt
COPY tinykube ./tinykube
COPY apiserver ./apiserver
COPY scheduler ./scheduler
COPY controller ./controller
COPY kubelet ./kubelet
RUN /opt/tinykube/bin/pip install --no-deps . \
 && /opt/tinykube/bin/python -m apiserver --help >/dev/null \
 && /opt/tinykube/bin/tinykube --help >/dev/null

FROM ${BASE_IMAGE}
# The user's home is where the `certs` service mounts the `certs` volume, and each directory
# under it the mount point of one component's certificate volume (docker-compose.yml and
# docker-compose.ha.yml: certs-etcd, certs-apiserver, ...). Docker gives a new, empty named
# volume the owner of the image's directory it is mounted on, so each must exist here, owned
# by tinykube, for the one-shot `certs` service (running as tinykube) to write into it.
RUN groupadd --system --gid 10001 tinykube \
 && useradd --system --uid 10001 --gid tinykube --home-dir /var/lib/tinykube --create-home tinykube \
 && cd /var/lib/tinykube \
 && install -d -o tinykube -g tinykube -m 0755 \
      etcd etcd-1 etcd-2 apiserver scheduler controller-manager dns node-1 node-2 node-3
COPY --from=build /opt/tinykube /opt/tinykube
ENV PATH=/opt/tinykube/bin:$PATH PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
USER tinykube
# Kubelets keep their state and their pods' logs under ./kubelet-data/<node>.
WORKDIR /var/lib/tinykube
# apiserver gRPC and REST (--rest-port), kubelet, controller manager, scheduler, proxy health.
EXPOSE 6443 8080 10250 10257 10259 10256
# The apiserver by default; every service in docker-compose.yml sets its own command.
CMD ["python", "-m", "apiserver", "--etcd-servers", "etcd:2379", "--bind-address", "0.0.0.0:6443"]
