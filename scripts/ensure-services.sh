#!/usr/bin/env bash
# Make sure PostgreSQL and Redis answer on loopback; install or start them when they do not.
# Used by `make test` (and `make run` for Redis-less setups it is not needed: see README).
set -euo pipefail
SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"

apt_install() {
  $SUDO apt-get update -qq >/dev/null 2>&1 || true
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "$@" >/dev/null
}

pg_up() { pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; }
redis_up() { redis-cli -h 127.0.0.1 -p 6379 ping 2>/dev/null | grep -q PONG; }

if ! command -v redis-server >/dev/null; then echo "installing redis-server"; apt_install redis-server redis-tools; fi
if ! redis_up; then
  echo "starting redis-server on 127.0.0.1:6379"
  mkdir -p /var/lib/redis /var/log/redis
  redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
    --dir /var/lib/redis --logfile /var/log/redis/ci.log
  for _ in $(seq 50); do redis_up && break; sleep 0.1; done
fi

if ! command -v pg_ctlcluster >/dev/null; then echo "installing postgresql"; apt_install postgresql postgresql-client; fi
if ! pg_up; then
  echo "starting postgresql"
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | sort -V | tail -n1)" main start
  for _ in $(seq 100); do pg_up && break; sleep 0.1; done
fi
redis_up || { echo "ensure-services: Redis is not answering on 127.0.0.1:6379" >&2; exit 1; }
pg_up || { echo "ensure-services: PostgreSQL is not answering on 127.0.0.1:5432" >&2; exit 1; }
