#!/usr/bin/env bash
# `snakemake --lint` on the default configuration, with one lint accepted: "Specify a conda environment or
# container for each rule". The rules run under the interpreter that runs Snakemake (the project's venv) and
# put the benchmark runs in containers through the engine layer (config: engine), not through Snakemake's
# conda:/container: directives; declaring an environment the jobs do not use would document nothing true.
# Any other lint fails. Runs in a scratch folder: linting parses the Snakefile and must write nothing.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
out="$scratch/lint.txt"
(cd "$scratch" && "$repo/.venv/bin/snakemake" -s "$repo/Snakefile" --lint) > "$out" 2>&1 || true
cat "$out"
other="$(grep -E '^ +\* ' "$out" | grep -vF '* Specify a conda environment or container for each rule.:' || true)"
if [ -n "$other" ] || ! grep -q '^Lints for rule\|Congratulations' "$out"; then
  echo "snakemake --lint: lints other than the accepted one (or no lint report at all):" >&2
  echo "$other" >&2
  exit 1
fi
echo "snakemake --lint: only the accepted conda/container lint"
