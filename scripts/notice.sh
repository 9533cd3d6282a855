#!/usr/bin/env bash
# scripts/notice.sh prints NOTICE: this project's copyright and licence,
# and the NOTICE file of every module the programs (cmd/api, cmd/worker)
# link, verbatim, as the Apache License 2.0 (section 4(d)) asks of a work
# that redistributes them. `make notice` writes it; e2e's TestLicenceAndNotice fails
# when NOTICE is not what this prints.
set -euo pipefail
cd "$(dirname "$0")/.."
cat <<'HEAD'
ratelimit
Copyright 2026 The unkeyed/ratelimit Authors

This product is licensed under the Apache License, Version 2.0 (see
LICENSE). The programs it builds (api, worker) include the software
below, whose NOTICE files follow, each as its module ships it.
HEAD
GOOS=linux GOARCH=amd64 go list -deps -f '{{with .Module}}{{if .Version}}{{.Path}}@{{.Version}} {{.Dir}}{{end}}{{end}}' ./cmd/api ./cmd/worker |
	sort -u | while read -r mod dir; do
		for f in NOTICE NOTICE.txt NOTICE.md; do
			if [ -f "$dir/$f" ]; then
				printf '\n---- %s (%s)\n\n' "$mod" "$f"
				cat "$dir/$f"
			fi
		done
	done
