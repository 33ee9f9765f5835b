# syntax=docker/dockerfile:1
#
# The plugins image: the Istio, Envoy and Cilium translator plugins in
# /opt/meshrelay/plugins, with the meshrelay binary as entrypoint. The
# meshrelay-server chart runs it as one init container per plugin:
#
#   meshrelay plugin install --plugin-dir=DIR /opt/meshrelay/plugins/meshrelay-plugin-NAME
#
# which installs the plugin into the server's plugin directory and records its
# sha256 in the lock file. An image of your own plugins follows the same
# layout. Build from the repository root:
#
#   docker build -f deploy/docker/plugins.Dockerfile \
#     --build-arg VERSION=$(git describe --tags --always) -t meshrelay-plugins:dev .

ARG GO_VERSION=1.26

FROM --platform=$BUILDPLATFORM golang:${GO_VERSION} AS build
ARG TARGETOS
ARG TARGETARCH
ARG VERSION=dev
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod \
    go mod download
COPY . .
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    set -eu; \
    for cmd in meshrelay meshrelay-plugin-istio meshrelay-plugin-envoy meshrelay-plugin-cilium meshrelay-plugin-gatewayapi; do \
      CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \
      go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/$cmd ./cmd/$cmd; \
    done; \
    mkdir -p /out/plugins; \
    mv /out/meshrelay-plugin-* /out/plugins/

FROM gcr.io/distroless/static-debian12:nonroot
ARG VERSION=dev
LABEL org.opencontainers.image.title="meshrelay-plugins" \
      org.opencontainers.image.description="meshrelay translator plugins: istio, envoy, cilium, gatewayapi" \
      org.opencontainers.image.source="https://github.com/meshrelay/meshrelay" \
      org.opencontainers.image.version="${VERSION}"
COPY --from=build /out/meshrelay /usr/local/bin/meshrelay
COPY --from=build /out/plugins/ /opt/meshrelay/plugins/
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/meshrelay"]
