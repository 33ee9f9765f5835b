# syntax=docker/dockerfile:1
#
# The meshrelay image: one static binary that runs both `meshrelay server` and
# `meshrelay agent`. Build from the repository root:
#
#   docker build -f deploy/docker/meshrelay.Dockerfile \
#     --build-arg VERSION=$(git describe --tags --always) -t meshrelay:dev .

ARG GO_VERSION=1.26

FROM --platform=$BUILDPLATFORM golang:${GO_VERSION} AS build
ARG TARGETOS
ARG TARGETARCH
ARG VERSION=dev
WORKDIR /src
# Dependencies first, so that a source change reuses the module layer.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod \
    go mod download
COPY . .
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" \
      -o /out/meshrelay ./cmd/meshrelay

# distroless/static: no shell, no package manager, CA certificates and
# tzdata only; the :nonroot tag runs as UID/GID 65532.
FROM gcr.io/distroless/static-debian12:nonroot
ARG VERSION=dev
LABEL org.opencontainers.image.title="meshrelay" \
      org.opencontainers.image.description="meshrelay management server and relay agent" \
      org.opencontainers.image.source="https://github.com/meshrelay/meshrelay" \
      org.opencontainers.image.version="${VERSION}"
COPY --from=build /out/meshrelay /usr/local/bin/meshrelay
USER 65532:65532
# 9900 relay gRPC and 9091 metrics/health (server); 9977 xDS and 9988
# metrics/health (agent).
EXPOSE 9900 9091 9977 9988
ENTRYPOINT ["/usr/local/bin/meshrelay"]
