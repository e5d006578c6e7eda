#!/bin/sh
# 5. Layering: #include "dir/..." arrows between pipeline stages (tracked files only).
# order: compiler(0) -> passes(1) -> codegen(2) -> runtime(3)
cd "$(dirname "$0")/../.."
git grep -nE '^\s*#\s*include\s*"(compiler|passes|codegen|runtime)/' -- compiler passes codegen runtime \
| awk -F: '{
  split($1, a, "/"); src=a[1];
  match($0, /"[^"]*"/); hdr=substr($0, RSTART+1, RLENGTH-2); split(hdr, b, "/"); dst=b[1];
  rank["compiler"]=0; rank["passes"]=1; rank["codegen"]=2; rank["runtime"]=3;
  if (src==dst) next;
  if (src=="runtime") cls="RUNTIME->COMPILER-SIDE";
  else if (src=="codegen" && dst=="runtime") cls="codegen->runtime (step ABI?)";
  else if (rank[src] < rank[dst]) cls="BACK-UP";
  else cls="forward";
  print cls "\t" $1 " -> " hdr
}' | sort | uniq
