#!/usr/bin/env bash
# sgemm at a transformer step's shapes on each CBLAS library Debian has here
# (OpenBLAS and BLIS, pthread builds), at 1 and 2 threads: why the CPU step
# links OpenBLAS (docs/cpu.md). BLIS: apt-get install libblis4-pthread.
# Usage: bash bench/cpu_blas.sh
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
declare -A libs=(
  [OpenBLAS]=/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0
  [BLIS]=/usr/lib/x86_64-linux-gnu/blis-pthread/libblis.so.4
)
for name in OpenBLAS BLIS; do
  lib="${libs[$name]}"
  if [ ! -e "$lib" ]; then echo "$name: $lib not installed, skipped"; continue; fi
  gcc -O2 "$here/cpu_blas.c" "$lib" -o "$tmp/$name"
  for t in 1 2; do
    OPENBLAS_NUM_THREADS=$t BLIS_NUM_THREADS=$t "$tmp/$name" | sed "1d; s/^/$name $t /" >> "$tmp/rows"
  done
done
echo "| library | threads | M x N x K | B transposed | ms | GFLOP/s |"
echo "|---|---:|---|---:|---:|---:|"
sort -k3,3n -k4,4n -k5,5n -k6,6n -k1,1 -k2,2n "$tmp/rows" | \
  awk '{printf "| %s | %s | %s x %s x %s | %s | %s | %s |\n", $1, $2, $3, $4, $5, $6, $7, $8}'
