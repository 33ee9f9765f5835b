#!/usr/bin/env bash
# helm.sh installs bin/helm, the Helm release that deploy/deploy_test.go uses
# to lint and render the charts in deploy/charts.
#
# Helm is built from source with the Go toolchain (go install), so it needs
# nothing but the Go module proxy. It is idempotent: when bin/helm already
# reports the pinned version nothing is done; delete bin/helm, or change
# HELM_VERSION, to rebuild. A cold build takes a few minutes.
set -euo pipefail

# HELM_VERSION is the pinned Helm release.
HELM_VERSION="v3.22.0"
# HELM_KUBE_VERSION is the Kubernetes version helm lint and helm template
# assume without a cluster. Helm's own build derives it from the
# k8s.io/client-go it is built with (v0.37.x for v3.22.0, hence 1.37);
# without it helm would assume 1.20.
HELM_KUBE_MAJOR="1"
HELM_KUBE_MINOR="37"

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
helm="$root/bin/helm"

if [[ -x "$helm" ]] && "$helm" version --template '{{.Version}}' 2>/dev/null | grep -qx "$HELM_VERSION"; then
	exit 0
fi

echo "helm: building bin/helm $HELM_VERSION (takes a few minutes on a cold cache)" >&2
mkdir -p "$root/bin"
# Build into a temporary GOBIN so that an interrupted build never leaves a
# half-written bin/helm behind. GOFLAGS is cleared: flags meant for the
# repository's own module (such as -mod=vendor) do not apply to helm's.
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
# The version variables are stamped the way Helm's own Makefile does.
ldflags=(
	-s -w
	"-X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
	"-X helm.sh/helm/v3/internal/version.metadata="
	"-X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=$HELM_KUBE_MAJOR"
	"-X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=$HELM_KUBE_MINOR"
	"-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=$HELM_KUBE_MAJOR"
	"-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=$HELM_KUBE_MINOR"
)
(cd "$tmp" && GOFLAGS= GOSUMDB=off GOBIN="$tmp" CGO_ENABLED=0 \
	go install -ldflags "${ldflags[*]}" "helm.sh/helm/v3/cmd/helm@$HELM_VERSION")
mv "$tmp/helm" "$helm"
"$helm" version --short
