#!/usr/bin/env bash
# Run the import-linter contracts of pyproject.toml ([tool.importlinter]).
# `cudaforge` is a namespace package whose editable install maps folders through an import hook
# that import-linter cannot walk, so the contracts are checked on a temporary tree that links
# cudaforge/engine, cudaforge/tui and cudaforge/profiles to the checkout's folders.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
mkdir "$root/cudaforge"
for part in engine tui profiles; do ln -s "$PWD/$part" "$root/cudaforge/$part"; done
PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}" .venv/bin/lint-imports --no-cache "$@"
