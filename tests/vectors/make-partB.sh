#!/bin/sh
# Regenerates tests/vectors/{linear,discord,sendgrid,mailgun,meta}.json with
# the providers' SDKs at pinned versions, installed into a temporary
# directory (nothing is added to the repository but the JSON).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
npm init -y >/dev/null
npm install --no-audit --no-fund --silent \
  @linear/sdk@98.0.0 \
  discord-interactions@4.4.0 \
  @sendgrid/eventwebhook@8.0.0
NODE_PATH="$work/node_modules" node "$here/make-partB.mjs"
