#!/bin/sh
# Rebuild static/vendor/codemirror/ from the pinned packages in package-lock.json.
# Needs node and npm; works in a scratch folder so no node_modules lands in the repository.
# Usage: tools/codemirror/build.sh [scratch folder, default: a new temporary one]
set -eu
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
out="$repo/static/vendor/codemirror"
scratch=${1:-$(mktemp -d)}
mkdir -p "$scratch"
cp "$here/package.json" "$here/package-lock.json" "$here/entry.js" "$here/csp-styles.js" "$scratch/"
cd "$scratch"
npm ci --no-audit --no-fund
npx esbuild entry.js --bundle --format=esm --minify --legal-comments=none --target=es2020 \
  --outfile=dist/codemirror.js --metafile=dist/meta.json
mkdir -p "$out"
cp dist/codemirror.js "$out/codemirror.js"
# Every bundled package's licence, one after the other (all are MIT).
node "$here/licenses.mjs" "$scratch" > "$out/LICENSE"
echo "wrote $out/codemirror.js and $out/LICENSE"
