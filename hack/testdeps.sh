#!/usr/bin/env bash
# testdeps.sh installs the servers that meshrelay's integration tests run
# (see internal/testenv): redis-server, redis-cli (which creates the Redis
# Cluster), etcd and chromium (the web UI's browser tests) from Debian
# packages, protoc for code generation, and
# bin/kube-apiserver built from the tools/kube module.
#
# It is idempotent and quick when everything is present: packages are
# installed only when their binary is missing, and kube-apiserver is built
# only when bin/kube-apiserver does not exist (delete it to rebuild, e.g.
# after changing tools/kube/go.mod). A cold kube-apiserver build takes
# several minutes.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# binary:package pairs.
deps=(
	redis-server:redis-server
	redis-cli:redis-tools
	etcd:etcd-server
	protoc:protobuf-compiler
	chromium:chromium
)

missing=()
for dep in "${deps[@]}"; do
	bin="${dep%%:*}"
	pkg="${dep#*:}"
	if ! command -v "$bin" >/dev/null 2>&1; then
		missing+=("$pkg")
	fi
done
# protoc needs the well-known types (google/protobuf/*.proto), which Debian
# ships in libprotobuf-dev, a recommendation that --no-install-recommends skips.
if [[ ! -f /usr/include/google/protobuf/timestamp.proto ]]; then
	missing+=(libprotobuf-dev)
fi

if ((${#missing[@]} > 0)); then
	if ! command -v apt-get >/dev/null 2>&1; then
		echo "testdeps: missing ${missing[*]}, and apt-get is not available: install them by hand" >&2
		exit 1
	fi
	sudo=()
	if [[ "$(id -u)" != 0 ]]; then
		sudo=(sudo)
	fi
	echo "testdeps: installing ${missing[*]}" >&2
	# Update the package lists once, only if the packages are unknown.
	if ! apt-cache show "${missing[@]}" >/dev/null 2>&1; then
		"${sudo[@]}" apt-get update
	fi
	DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y --no-install-recommends "${missing[@]}"
fi

apiserver="$root/bin/kube-apiserver"
if [[ ! -x "$apiserver" ]]; then
	echo "testdeps: building bin/kube-apiserver from tools/kube (takes several minutes on a cold cache)" >&2
	mkdir -p "$root/bin"
	(cd "$root/tools/kube" && go build -o "$apiserver.tmp" k8s.io/kubernetes/cmd/kube-apiserver)
	mv "$apiserver.tmp" "$apiserver"
fi
