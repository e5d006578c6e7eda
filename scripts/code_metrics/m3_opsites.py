#!/usr/bin/env python3
"""3. Op-kind switch sites: isa< / isa_and_nonnull< / dyn_cast< / dyn_cast_or_null< /
cast< / Case< whose template arguments name a tcc (or tcck) op class.
Op classes: `def Tcc_XxxOp` in compiler/Dialect/TccOps.td -> tcc::XxxOp,
`def Tcck_XxxOp` in compiler/Kernel/TcckOps.td -> tcck::XxxOp (no cppClassName used).
Comments and string literals are stripped first (m2_funcs.strip).  A name in both
dialects (e.g. MatMulOp, YieldOp) counts for the dialect of its qualifier; unqualified,
for the dialect of the file's `using namespace`/enclosing namespace (reported as ambiguous
if none).  Usage: m3_opsites.py [-v]"""
import re, subprocess, sys, os, collections
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__))); from m2_funcs import strip
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
def ops(td, pre):
    return set(re.findall(r'^def\s+' + pre + r'_(\w+Op)\b', open(os.path.join(ROOT, td)).read(), re.M))
TCC, TCCK = ops('compiler/Dialect/TccOps.td', 'Tcc'), ops('compiler/Kernel/TcckOps.td', 'Tcck')
PAT = re.compile(r'\b(isa|isa_and_nonnull|isa_and_present|dyn_cast|dyn_cast_or_null|dyn_cast_if_present|cast|cast_or_null|Case)\s*<([^<>;]*(?:<[^<>;]*>[^<>;]*)*)>')
def default_ns(text):
    k = bool(re.search(r'using\s+namespace\s+(::)?(mlir::)?tcck\s*;|namespace\s+(mlir::)?tcck\s*\{', text))
    c = bool(re.search(r'using\s+namespace\s+(::)?(mlir::)?tcc\s*;|namespace\s+(mlir::)?tcc\s*\{', text))
    return 'both' if k and c else 'tcck' if k else 'tcc' if c else None
def scan(path):
    raw = open(os.path.join(ROOT, path), encoding='utf-8', errors='replace').read()
    s = strip(raw); dns = default_ns(s); out = []
    for m in PAT.finditer(s):
        line = s.count('\n', 0, m.start()) + 1
        names = re.findall(r'((?:[\w]+::)*)(\w+Op)\b', m.group(2))
        tcc = tcck = amb = 0
        for q, n in names:
            if 'tcck::' in q: tcck += n in TCCK; continue
            if 'tcc::' in q: tcc += n in TCC; continue
            if q: continue  # other dialect (func::, arith::, ...)
            if n in TCC and n in TCCK:
                if dns == 'tcc': tcc += 1
                elif dns == 'tcck': tcck += 1
                else: amb += 1
            else:
                tcc += n in TCC; tcck += n in TCCK
        if tcc or tcck or amb:
            out.append((path, line, m.group(1), tcc, tcck, amb, ' '.join(m.group(0).split())[:110], m.group(2)))
    return out
if __name__ == '__main__':
    files = [f for f in subprocess.check_output(['git', 'ls-files', 'compiler', 'passes', 'codegen'], cwd=ROOT, text=True).split()
             if re.search(r'\.(cpp|h|cu|cuh|c)$', f)]
    sites = [x for f in files for x in scan(f)]
    print(f'# tcc op classes: {len(TCC)}, tcck op classes: {len(TCCK)}, in both: {sorted(TCC & TCCK)}')
    for label, sel in [('tcc', lambda x: x[3]), ('tcck', lambda x: x[4]), ('ambiguous', lambda x: x[5])]:
        ss = [x for x in sites if sel(x)]
        per = collections.Counter(x[0].split('/')[0] for x in ss)
        kinds = collections.Counter(x[2] for x in ss)
        print(f'{label:9s}: sites(matches)={len(ss)} lines={len({(x[0], x[1]) for x in ss})} names={sum(sel(x) for x in ss)} '
              f'per-dir={dict(per)} per-form={dict(kinds)}')
    if '-v' in sys.argv:
        for x in sites: print(f'{x[0]}:{x[1]}  tcc={x[3]} tcck={x[4]} amb={x[5]}  {x[6]}')
