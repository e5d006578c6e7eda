#!/bin/sh
# 6. README and docs sizes (bytes, lines)
cd "$(dirname "$0")/../.."
for f in README.md docs/*.md; do printf '%-20s %7s bytes %5s lines\n' "$f" "$(wc -c <"$f")" "$(wc -l <"$f")"; done
cat README.md docs/*.md | wc -c
