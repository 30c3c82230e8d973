#!/usr/bin/env bash
# Local stand-ins for the official base images, for machines that cannot pull them (tests,
# CI): a Debian 12 base from debootstrap, then Python 3.11, PostgreSQL and Redis from
# Debian's packages. Each image is built once and kept: a second run only checks that they
# exist (FORCE=1 rebuilds). Prints the variables that point docker-compose.yml at them.
#
#   docker/local-images.sh            build what is missing, print PYTHON_IMAGE=... lines
#   eval "$(docker/local-images.sh)"  ... and export them
#   docker/local-images.sh python3.12 only the Python 3.12 stand-in (the GPU trainer image's
#                                     base), print PYTHON312_IMAGE=...
#
# The images answer to the same environment variables and paths as the official ones that
# the stack uses: POSTGRES_USER / POSTGRES_PASSWORD / POSTGRES_DB and PGDATA under
# /var/lib/postgresql/data, `pg_isready`; `redis-server ARGS` writing to /data, `redis-cli`;
# `python` and `pip` on PATH with a writable site (a venv stands in for /usr/local).
# Differences: Debian 12 carries PostgreSQL 15 (the stack's default is 16) and Redis 7.0.
set -euo pipefail
cd "$(dirname "$0")"

PREFIX=${LOCAL_IMAGE_PREFIX:-wsrl-local}
SUITE=bookworm
BASE=$PREFIX/debian:$SUITE
FORCE=${FORCE:-0}
export DOCKER_BUILDKIT=${DOCKER_BUILDKIT:-0}

log() { echo "local-images: $*" >&2; }

have() { [ "$FORCE" != 1 ] && docker image inspect "$1" >/dev/null 2>&1; }

build_base() {
  have "$BASE" && return
  command -v debootstrap >/dev/null || {
    log "installing debootstrap"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap >&2
  }
  local root
  root=$(mktemp -d /tmp/wsrl-debootstrap.XXXXXX)
  log "debootstrap --variant=minbase $SUITE (about a minute)"
  # The mirror is the host's own (debootstrap's default when none is named).
  debootstrap --variant=minbase "$SUITE" "$root" > "$root.log" 2>&1 \
    || { tail -20 "$root.log" >&2; exit 1; }
  rm -f "$root.log"
  rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
  tar -C "$root" -c . | docker import - "$BASE" >/dev/null
  rm -rf "$root"
}

# Certificate authorities the host trusts beyond Debian's (a TLS-intercepting egress
# proxy, say): the Python image trusts them too, or pip cannot reach the package index.
copy_host_cas() {
  rm -rf local/ca && mkdir -p local/ca
  if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
    cp /usr/local/share/ca-certificates/*.crt local/ca/
  fi
}

build() {  # build IMAGE DOCKERFILE
  have "$1" && return
  log "building $1"
  docker build -q --build-arg BASE_IMAGE="$BASE" -t "$1" -f "local/$2" local >&2
}

# Debian 12 packages no Python 3.12: stage one built on a Debian 12 host (PYTHON312, else
# pyenv's newest 3.12), without its tests and site-packages, for python312.Dockerfile.
stage_python312() {
  local python=${PYTHON312:-$(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.12*/bin/python3.12 2>/dev/null | sort -V | tail -1)}
  [ -x "$python" ] || { log "no Python 3.12 here: set PYTHON312=/path/to/python3.12"; exit 1; }
  local prefix
  prefix=$("$python" -c 'import sys; print(sys.base_prefix)')
  log "staging Python 3.12 from $prefix"
  rm -rf local/python312 && mkdir -p local/python312/bin local/python312/lib
  cp -a "$prefix/bin/python3.12" local/python312/bin/
  cp -a "$prefix/include" local/python312/
  cp -a "$prefix"/lib/libpython3.12* local/python312/lib/ 2>/dev/null || true
  tar -C "$prefix/lib" --exclude=python3.12/test --exclude='python3.12/site-packages/*' \
    --exclude=__pycache__ -c python3.12 | tar -C local/python312/lib -x
}

SECONDS=0
build_base
copy_host_cas
if [ "${1:-}" = python3.12 ]; then
  have "$PREFIX/python:3.12" || { stage_python312; build "$PREFIX/python:3.12" python312.Dockerfile; }
  rm -rf local/python312
  log "ready in ${SECONDS}s"
  echo "PYTHON312_IMAGE=$PREFIX/python:3.12"
  exit 0
fi
build "$PREFIX/python:3.11" python.Dockerfile
build "$PREFIX/postgres:15" postgres.Dockerfile
build "$PREFIX/redis:7" redis.Dockerfile
log "ready in ${SECONDS}s"

echo "PYTHON_IMAGE=$PREFIX/python:3.11"
echo "POSTGRES_IMAGE=$PREFIX/postgres:15"
echo "REDIS_IMAGE=$PREFIX/redis:7"
