#!/usr/bin/env bash
# Start what the tests need on this machine: PostgreSQL (if it is down) and Debian's chromium
# (if it is missing). Safe to run repeatedly; prints what it did.
set -u
if command -v pg_isready >/dev/null 2>&1 && ! pg_isready -h 127.0.0.1 -p 5432 -q; then
  echo "ensure-services: starting PostgreSQL"
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main start || true
  for _ in $(seq 1 30); do pg_isready -h 127.0.0.1 -p 5432 -q && break; sleep 1; done
fi
# Debian packages the tests drive: chromium (browser tests), docker-compose (compose file check).
missing=""
[ -x /usr/bin/chromium ] || missing="$missing chromium"
command -v docker-compose >/dev/null 2>&1 || missing="$missing docker-compose"
if [ -n "$missing" ]; then
  echo "ensure-services: installing from Debian:$missing"
  if [ "$(id -u)" = 0 ]; then
    (DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing || \
      (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing)) >/dev/null 2>&1 \
      || echo "ensure-services: could not install$missing; the tests that need them will fail" >&2
  else
    echo "ensure-services: run 'sudo apt-get install$missing' for the tests that need them" >&2
  fi
fi
exit 0
