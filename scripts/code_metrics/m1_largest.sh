#!/bin/sh
# 1. Largest tracked source files (git ls-files => excludes build/ and generated .inc)
cd "$(dirname "$0")/../.."
git ls-files compiler passes codegen runtime test | grep -E '\.(cpp|h|cu|cuh|c|td)$' \
  | xargs wc -l | grep -v ' total$' | sort -rn | head -${1:-10}
