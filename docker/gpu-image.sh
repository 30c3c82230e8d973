#!/usr/bin/env bash
# `make gpu-image`: the GPU trainer image (docker/Dockerfile.trainer) built on a machine
# that reaches no container registry, then checked there: Debian 12 from debootstrap with a
# Python 3.12 staged from this host (docker/local-images.sh python3.12), the GPU stack from
# the lock's wheels (CUDA libraries included), flash-attn left out unless FLASH_ATTN_WHEEL
# names its wheel. Checks: `pip check`, every package at the lock's version
# (`kit.py verify`), and `wsrl doctor` naming the missing GPU. Needs Docker (root).
#
#   docker/gpu-image.sh                    build and check webshop-rl:trainer
#   GPU_IMAGE=name:tag docker/gpu-image.sh another tag
set -euo pipefail
cd "$(dirname "$0")/.."
IMAGE=${GPU_IMAGE:-webshop-rl:trainer}
FLASH_ATTN_WHEEL=${FLASH_ATTN_WHEEL:-}
log() { echo "gpu-image: $*" >&2; }
fail() { log "FAILED: $*"; exit 1; }

docker info >/dev/null 2>&1 || fail "no Docker engine (make compose-test installs and starts one)"
SECONDS=0
eval "$(bash docker/local-images.sh python3.12)"
log "building $IMAGE on $PYTHON312_IMAGE, flash-attn: ${FLASH_ATTN_WHEEL:-left out (sdpa)}"
DOCKER_BUILDKIT=${DOCKER_BUILDKIT:-0} docker build -q -f docker/Dockerfile.trainer \
  --build-arg BASE_IMAGE="$PYTHON312_IMAGE" --build-arg FLASH_ATTN_WHEEL="$FLASH_ATTN_WHEEL" \
  -t "$IMAGE" . >/dev/null
log "built in ${SECONDS}s: $(docker image ls "$IMAGE" --format '{{.Size}}')"

without=$([ -n "$FLASH_ATTN_WHEEL" ] || echo "--without flash-attn")
docker run --rm "$IMAGE" sh -c "pip check && python3 docker/gpu/kit.py verify $without" \
  || fail "the image's packages are not as locked"
# No GPU here: the doctor must say so, in its first check, and fail.
set +e
doctor=$(docker run --rm "$IMAGE" wsrl doctor --backend verl --config fast 2>&1)
rc=$?
set -e
echo "$doctor" | grep -E "FAIL|ok  " | head -5 >&2
[ "$rc" -ne 0 ] || fail "wsrl doctor passed without a GPU"
echo "$doctor" | grep -q "no CUDA device visible" || fail "wsrl doctor did not name the missing GPU"
if [ -z "$FLASH_ATTN_WHEEL" ] && echo "$doctor" | grep -q "FAIL import flash_attn"; then
  fail "without flash-attn the trainer must fall back to sdpa, not fail on its import"
fi
log "checked: pip check clean, the lock's versions, wsrl doctor names the missing GPU"
log "PASSED in ${SECONDS}s"
