# The node image of docker-compose.containerd.yml (tinykube-node:dev): tinykube:dev plus
# Debian's containerd, runc, CNI plugins, busybox-static (the pause and busybox images are
# built from it), iproute2 (pod routes), nftables (the proxies' nftables mode and the node's
# masquerading) and docker-registry (the compose registry service), installed with apt from
# Debian's archive, as the base image's packages are. Runs as root: containerd and the kubelet
# that drives it need it, as in kind's node image; the proxy-N containers run it too (nft).
# `make compose-images TINYKUBE_CONTAINERD=1` (compose/build-images.sh) builds it; a
# `docker compose ... up --build` with this file builds it too (from tinykube:dev).
ARG TINYKUBE_IMAGE=tinykube:dev
FROM ${TINYKUBE_IMAGE}
USER root
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      containerd runc containernetworking-plugins busybox-static iproute2 nftables \
      docker-registry \
 && rm -rf /var/lib/apt/lists/* \
 && install -d /var/lib/node /usr/local/lib/tinykube
COPY compose/node.py /usr/local/lib/tinykube/node.py
WORKDIR /var/lib/node
