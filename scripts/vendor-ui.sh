#!/usr/bin/env bash
# vendor-ui.sh re-creates internal/ui/static/vendor/: the third-party files
# the embedded UI serves (the flame-graph component and the one d3 module
# its API needs to mount it). The UI never fetches anything at build or run
# time; this script is only for upgrading the pinned versions, and it is
# how the committed files were obtained:
#
#   1. `npm pack NAME@VERSION` from the npm registry, in a temp dir;
#   2. the tarball's sha512 integrity is checked against the pin below
#      (the registry's dist.integrity at the time of vendoring);
#   3. the built dist file(s) and the package's LICENSE are copied unchanged
#      into static/vendor/NAME-VERSION/;
#   4. static/vendor/SHA256SUMS is rewritten; TestSysomVendoredAssets
#      (internal/ui/sysom_vendor_test.go) checks the embedded files against it.
#
# After an upgrade: update the pins, the <script>/<link> paths in
# static/index.html and static/js/flame.js, and static/vendor/README.md.
#
# Usage: scripts/vendor-ui.sh    (needs npm, sha512sum/openssl, tar)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
dest=$root/internal/ui/static/vendor
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# name version integrity files-from-the-package...
pins=(
  "d3-flame-graph 4.1.3 sha512-NijuhJZhaTMwobVgwGQ67x9PovqMMHXBbs0FMHEGJvsWZGuL4M7OsB03v8mHdyVyHhnQYGsYnb5w021e9+R+RQ== dist/d3-flamegraph.min.js dist/d3-flamegraph.css LICENSE"
  "d3-selection 3.0.0 sha512-fmTRWbNMmsmWq6xJV8D19U/gw/bwrHfNXxrIN+HfZgnzqTHp9jOmKMhsTUjXOJnZOdZY9Q28y4yebKzqDKlxlQ== dist/d3-selection.min.js LICENSE"
)

for pin in "${pins[@]}"; do
  read -r name version integrity files <<<"$pin"
  read -r -a files <<<"$files"
  (cd "$tmp" && npm pack --silent "$name@$version" >/dev/null)
  tgz=$tmp/$name-$version.tgz
  got="sha512-$(openssl dgst -sha512 -binary "$tgz" | base64 -w0)"
  if [[ $got != "$integrity" ]]; then
    echo "vendor-ui: $name@$version integrity $got, want $integrity" >&2
    exit 1
  fi
  mkdir -p "$tmp/$name"
  tar -xzf "$tgz" -C "$tmp/$name"
  out=$dest/$name-$version
  rm -rf "$out"
  mkdir -p "$out"
  for f in "${files[@]}"; do
    cp "$tmp/$name/package/$f" "$out/$(basename "$f")"
  done
  echo "vendored $name@$version -> ${out#"$root"/}"
done

# d3-flame-graph's dist bundles d3 modules (ISC, Copyright Mike Bostock):
# their license is the same text as d3-selection's LICENSE, which sits
# beside it in static/vendor/ (a second identical copy would share its ETag,
# which TestHandlerETag forbids); static/vendor/README.md says so.

(cd "$dest" && find . -type f ! -name SHA256SUMS ! -name README.md | sed 's|^\./||' | LC_ALL=C sort | xargs sha256sum >SHA256SUMS)
echo "wrote ${dest#"$root"/}/SHA256SUMS"
