#!/bin/sh
# As the official image: no config file means protected mode off (the container network
# is the boundary), the server runs as `redis` and writes into /data.
set -eu
if [ "${1:-}" = redis-server ]; then
  shift
  chown -R redis:redis /data
  exec setpriv --reuid=redis --regid=redis --init-groups redis-server --protected-mode no "$@"
fi
exec "$@"
