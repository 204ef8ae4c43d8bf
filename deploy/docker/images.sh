#!/bin/sh
# images.sh [TAG]: builds the Switchyard images (proxy, prober, admin, the
# all-in-one launcher, swctl and the fake provider) from static binaries built on the host, into
# FROM scratch images: no registry is reached. Prints each image's size.
# NATS_OFFLINE=1 also builds switchyard/nats (nats-server from source) for
# the compose fleet where the official nats image cannot be pulled.
set -eu
tag=${1:-dev}
root=$(cd "$(dirname "$0")/../.." && pwd)
ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
mkdir -p "$ctx/etc/ssl/certs" "$ctx/data"
printf 'root:x:0:0:root:/:/sbin/nologin\nswitchyard:x:65532:65532:switchyard:/:/sbin/nologin\n' > "$ctx/etc/passwd"
printf 'root:x:0:\nswitchyard:x:65532:\n' > "$ctx/etc/group"
cp /etc/ssl/certs/ca-certificates.crt "$ctx/etc/ssl/certs/"
# the build's version and commit (their -version), as the Makefile stamps them
version=$(cd "$root" && git describe --tags --always --dirty 2>/dev/null || echo "$tag")
commit=$(cd "$root" && git rev-parse HEAD 2>/dev/null || echo unknown)
ldflags="-s -w -X switchyard.dev/shared/buildinfo.version=$version -X switchyard.dev/shared/buildinfo.commit=$commit"
build() { # name package port [nohealth]
	( cd "$root" && CGO_ENABLED=0 go build -trimpath -ldflags="$ldflags" -o "$ctx/$1" "$2" )
	if [ "${4:-}" = nohealth ]; then
		# a command-line tool serves nothing to check: the Dockerfile without
		# its HEALTHCHECK (the instruction and its CMD line)
		sed '/^HEALTHCHECK/,+1d' "$root/deploy/docker/Dockerfile" > "$ctx/Dockerfile.$1"
	else
		cp "$root/deploy/docker/Dockerfile" "$ctx/Dockerfile.$1"
	fi
	docker build -q -f "$ctx/Dockerfile.$1" --build-arg BIN="$1" --build-arg PORT="$3" \
		-t "switchyard/$1:$tag" "$ctx" >/dev/null
	printf '%-24s %s\n' "switchyard/$1:$tag" "$(docker image inspect -f '{{.Size}}' "switchyard/$1:$tag" | awk '{printf "%.1f MB", $1/1e6}')"
}
build proxy ./services/proxy/cmd/proxy 8080
build prober ./services/prober/cmd/prober 8082
build admin ./services/admin/cmd/admin 8081
build switchyard ./tools/cmd/switchyard 8080
build swctl ./tools/cmd/swctl 8081 nohealth
build fakeprovider ./tools/cmd/fakeprovider 9101
if [ "${NATS_OFFLINE:-}" = 1 ]; then
	# the offline NATS image (no registry): nats-server built from source
	GOBIN="$ctx" CGO_ENABLED=0 go install -trimpath -ldflags='-s -w' github.com/nats-io/nats-server/v2@v2.15.2
	docker build -q -f "$root/deploy/docker/Dockerfile.nats" -t "switchyard/nats:$tag" "$ctx" >/dev/null
	printf '%-24s %s\n' "switchyard/nats:$tag" "$(docker image inspect -f '{{.Size}}' "switchyard/nats:$tag" | awk '{printf "%.1f MB", $1/1e6}')"
fi
