# The standalone cache server as a container image that takes the place of
# kcp's cache-server image: the binary is /cache-server, as in kcp's image,
# so kcp-operator's CacheServer (command /cache-server with kcp's arguments)
# runs it when only its image is changed. See README.md, "Using it as kcp's
# cache server".
#
#   docker build -t kcp-cache:dev .
#
# Multi-stage: a static binary (no C library, so it runs on the empty
# distroless base) built with the Go toolchain go.mod asks for.

ARG GO_VERSION=1.26

FROM --platform=$BUILDPLATFORM docker.io/library/golang:${GO_VERSION} AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY cache/ cache/
COPY examples/ examples/
ARG TARGETOS
ARG TARGETARCH
RUN CGO_ENABLED=0 GOOS=${TARGETOS} GOARCH=${TARGETARCH} \
    go build -trimpath -ldflags="-s -w" -o /out/cache-server ./examples/cache-server

# distroless/static: CA certificates and /etc/passwd, no shell; the nonroot
# variant runs as uid 65532, as kcp's image does. The server needs nothing
# writable but its etcd directory (--embedded-etcd-directory, an emptyDir
# under kcp-operator), so a read-only root file system is fine.
FROM gcr.io/distroless/static:nonroot
COPY --from=build /out/cache-server /cache-server
USER 65532:65532
WORKDIR /
ENTRYPOINT ["/cache-server"]
