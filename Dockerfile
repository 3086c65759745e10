# The standalone cache server as a container image that takes the place of
# kcp's cache-server image: the binary is /cache-server, as in kcp's image,
# so kcp-operator's CacheServer (command /cache-server with kcp's arguments)
# runs it when only its image is changed (docs/kcp.md).
#
# It builds offline: no base image is pulled and nothing is compiled inside
# a container. The build context is a directory holding rootfs/ with the
# static binary built on the host, /etc/passwd and /etc/group lines for uid
# 65532 (the user kcp's image runs as) and a CA bundle; hack/ci/image.sh
# prepares it, builds, and starts the image as kcp-operator does:
#
#   hack/ci/image.sh                 # build, start, probe, stop (what CI runs)
#   hack/ci/image.sh build           # build only: localhost/kcp-cache:dev
#
# BASE may name a registry image instead of the empty one, e.g.
# --build-arg BASE=gcr.io/distroless/static:nonroot (rootfs/ is then copied
# over it). The server needs nothing writable but its etcd directory
# (--embedded-etcd-directory, an emptyDir under kcp-operator), so it runs on
# a read-only root file system.

ARG BASE=scratch
FROM ${BASE}
COPY rootfs/ /
USER 65532:65532
WORKDIR /
ENTRYPOINT ["/cache-server"]
