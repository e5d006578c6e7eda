#!/usr/bin/env python3
"""4. Hand-written enumerations of elementwise op classes.
Elementwise set = defs of Tcc_BroadcastOp / Tcc_UnaryOp + ops listing TccElementwise
(TccOps.td).  Reports every isa</dyn_cast</Case< site (m3) naming >= 3 elementwise classes,
every function whose TypeSwitch .Case<> arms name >= 5 elementwise classes, and
string-literal lists with >= 3 elementwise mnemonics ("tcc.add"/"add"/...)."""
import re, os, sys, subprocess, collections
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from m3_opsites import scan, ROOT
from m2_funcs import funcs
td = open(os.path.join(ROOT, 'compiler/Dialect/TccOps.td')).read()
EW = {}
for m in re.finditer(r'^def\s+Tcc_(\w+Op)\s*:\s*(Tcc_BroadcastOp|Tcc_UnaryOp|Tcc_Op)<"(\w+)"([^{;]*)', td, re.M):
    if m.group(2) != 'Tcc_Op' or 'TccElementwise' in m.group(4): EW[m.group(1)] = m.group(3)
print(f'# elementwise op classes in ODS: {len(EW)}')
files = [f for f in subprocess.check_output(['git', 'ls-files', 'compiler', 'passes', 'codegen'], cwd=ROOT, text=True).split()
         if re.search(r'\.(cpp|h|cu|cuh|c)$', f)]
print('## single sites naming >=3 elementwise classes')
for f in files:
    for x in scan(f):
        n = set(re.findall(r'(\w+Op)\b', x[7])) & set(EW); tot = len(set(re.findall(r'(\w+Op)\b', x[7])))
        if len(n) >= 3: print(f'{f}:{x[1]}  {x[2]}<> names {len(n)} elementwise classes (of {tot} op classes)')
print('## functions whose Case<> arms name >=5 elementwise classes')
for f in files:
    sites = [x for x in scan(f) if x[2] == 'Case']
    if not sites: continue
    for n, p, st, nm in funcs(f):
        ss = [x for x in sites if st <= x[1] < st + n]
        names = set(w for x in ss for w in re.findall(r'(\w+Op)\b', x[7])) & set(EW)
        if len(names) >= 5: print(f'{f}:{st} {nm}: {len(ss)} Case arms, {len(names)} elementwise classes')
print('## string lists of >=3 elementwise mnemonics on one line')
mn = set(EW.values())
for f in files:
    for i, l in enumerate(open(os.path.join(ROOT, f)), 1):
        lits = re.findall(r'"(?:tcc\.)?(\w+)"', l)
        if sum(x in mn for x in lits) >= 3: print(f'{f}:{i}  {l.strip()[:100]}')
print('## any function/top-level chunk naming >=5 distinct elementwise classes (any form, e.g. X::getOperationName())')
from m2_funcs import strip
for f in files:
    s = strip(open(os.path.join(ROOT, f), encoding='utf-8', errors='replace').read()).split('\n')
    fs = funcs(f); covered = set()
    for n, p, st, nm in fs:
        body = '\n'.join(s[st-1:st-1+n]); covered.update(range(st, st + n))
        names = set(re.findall(r'\b(\w+Op)\b', body)) & set(EW)
        if len(names) >= 5: print(f'{f}:{st} {nm} ({n} lines): {len(names)} elementwise classes')
    rest = '\n'.join(l for i, l in enumerate(s, 1) if i not in covered)
    names = set(re.findall(r'\b(\w+Op)\b', rest)) & set(EW)
    if len(names) >= 5: print(f'{f}: outside functions: {len(names)} elementwise classes')
