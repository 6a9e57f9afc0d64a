#!/usr/bin/env bash
# Fetches the web console's JavaScript chart library, uPlot, from the npm registry, checks the
# package's SHA-256, and copies its browser build, stylesheet and licence into
# oahu/service/console/static/vendor/uplot/. The copied files are committed and ship inside the
# Python package: the console works offline, and neither users nor CI need npm. Run this only
# to change the version (then update VERSION and SHA256 below and commit the new files).
set -euo pipefail
VERSION=1.6.32
SHA256=4b8a8191e425658e3ea8c8c1314b0fc679c861ee3a1af2b20c7b16ba50b5133d
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dest="$repo/oahu/service/console/static/vendor/uplot"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm pack --silent "uplot@$VERSION" >/dev/null)
echo "$SHA256  $work/uplot-$VERSION.tgz" | sha256sum --check --quiet
tar -xzf "$work/uplot-$VERSION.tgz" -C "$work"
mkdir -p "$dest"
cp "$work/package/dist/uPlot.iife.min.js" "$work/package/dist/uPlot.min.css" \
   "$work/package/LICENSE" "$dest/"
printf 'uPlot %s (MIT), from the npm registry: npm pack uplot@%s, sha256 %s\n' \
  "$VERSION" "$VERSION" "$SHA256" > "$dest/VERSION"
echo "console-assets: uPlot $VERSION in $dest" >&2
