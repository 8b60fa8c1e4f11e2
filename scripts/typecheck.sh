#!/usr/bin/env bash
# mypy on the package as it is installed. setup.py maps ingest/, storage/, analytics/,
# dashboard/ and migrations/ from the repository root into tpmledger; mypy knows no package
# mapping, so this lays the package out as symbolic links under build/typecheck/tpmledger
# (mypy_path in pyproject.toml) and runs mypy there.
#   bash scripts/typecheck.sh [mypy arguments]
set -euo pipefail
cd "$(dirname "$0")/.."
tree=build/typecheck/tpmledger
rm -rf "$tree" && mkdir -p "$tree"
for entry in tpmledger/*; do
    case "$(basename "$entry")" in __pycache__) continue ;; esac
    ln -s "../../../$entry" "$tree/$(basename "$entry")"
done
for part in ingest storage analytics dashboard migrations; do
    ln -s "../../../$part" "$tree/$part"
done
exec "${MYPY:-mypy}" "$@"
