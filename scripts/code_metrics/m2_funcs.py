#!/usr/bin/env python3
"""2. Function lengths by brace matching.
Heuristic: strip comments, string/char/raw-string literals and preprocessor lines
(keeping newlines); walk braces with a scope stack.  A '{' opened while every enclosing
scope is namespace/class/struct/union/enum/extern "C" (i.e. not inside a function body)
is a function body when its header (text since the last ';', '{' or '}') contains ')'
at the end (allowing const/override/noexcept/-> T/ctor init-lists) and has no '=' at
paren depth 0 and is not a control keyword.  Length = lines from the header's first
line to the closing '}' line, inclusive.  Lambdas/blocks inside a body are part of it.
Usage: m2_funcs.py [N] [path-prefix ...]   (files from `git ls-files`)"""
import re, subprocess, sys, os
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
def strip(src):
    out = []; i = 0; n = len(src)
    def blank(s): return re.sub(r'[^\n]', ' ', s)
    bol = True
    while i < n:
        c = src[i]
        if bol:
            m = re.match(r'[ \t]*#', src[i:i+200])
            if m:  # preprocessor line with continuations
                j = i
                while True:
                    k = src.find('\n', j)
                    if k == -1: k = n; break
                    if src[k-1] == '\\': j = k + 1; continue
                    break
                out.append(blank(src[i:k])); i = k; continue
        bol = False
        if src.startswith('//', i):
            k = src.find('\n', i); k = n if k == -1 else k
            out.append(blank(src[i:k])); i = k; continue
        if src.startswith('/*', i):
            k = src.find('*/', i + 2); k = n if k == -1 else k + 2
            out.append(blank(src[i:k])); i = k; continue
        m = re.match(r'(?:u8|u|U|L)?R"([^(\s]{0,16})\(', src[i:i+24])
        if m and (i == 0 or not (src[i-1].isalnum() or src[i-1] == '_')):
            end = ')' + m.group(1) + '"'
            k = src.find(end, i + m.end()); k = n if k == -1 else k + len(end)
            out.append('"' + blank(src[i+1:k-1]) + '"'); i = k; continue
        if c == '"' or (c == "'" and not (i > 0 and src[i-1].isalnum())):
            j = i + 1
            while j < n and src[j] != c:
                if src[j] == '\\': j += 1
                if j < n and src[j] == '\n' and c == "'": break
                j += 1
            out.append(c + blank(src[i+1:j]) + c); i = j + 1; continue
        if c == '\n': bol = True
        out.append(c); i += 1
    return ''.join(out)

CTRL = re.compile(r'^\s*(if|for|while|switch|catch|do|else|try|return)\b')
TYPEKW = re.compile(r'\b(namespace|class|struct|union|enum)\b')
def funcs(path):
    s = strip(open(os.path.join(ROOT, path), encoding='utf-8', errors='replace').read())
    stack = []  # (kind, startline, name)
    hdr_start = 0; res = []
    line = 1
    for i, c in enumerate(s):
        if c == '\n': line += 1
        if c in ';{}':
            at_ns = all(k == 'ns' for k, _, _ in stack)
            if c == '{':
                kind, name, start = 'other', None, line
                if at_ns:
                    h = s[hdr_start:i]
                    hs = h.lstrip(); start = line - h.count('\n') + (len(h) - len(hs) and h[:len(h)-len(hs)].count('\n'))
                    flat = ' '.join(hs.split())
                    # depth-0 text (parens collapsed)
                    d = 0; top = []
                    for ch in flat:
                        if ch == '(': d += 1; top.append('(') if d == 1 else None; continue
                        if ch == ')': d -= 1; top.append(')') if d == 0 else None; continue
                        if d == 0: top.append(ch)
                    top = ''.join(top)
                    tail = top[top.rfind('()') + 2:] if '()' in top else ''
                    noeq = re.sub(r'operator\s*\S*=|[=!<>]=', '', top)
                    if re.search(r'extern\s*"\s*"\s*$', flat) or (TYPEKW.search(top) and '()' not in top):
                        kind = 'ns'
                    elif '()' in top and '=' not in noeq and not CTRL.match(flat):
                        if re.search(r'\(\)[\w ]*:(?!:)', top) and re.match(r'^\s*[,:]\s*[\w:<>]+\s*$', tail):
                            kind = 'initbrace'   # brace-init member in a ctor init-list
                        else:
                            kind = 'fn'
                            names = [x for x in re.findall(r'(operator\s*[^\s(]+|[~\w]+)\s*\(', flat)
                                     if not re.match(r'__launch_bounds__|__attribute__|alignas|decltype|LLVM_', x)]
                            name = names[0] if names else flat[:40]
                stack.append((kind, start, name))
                if kind != 'initbrace': hdr_start = i + 1
                continue
            if c == '}':
                if stack:
                    kind, start, name = stack.pop()
                    if kind == 'fn': res.append((line - start + 1, path, start, name))
                    if kind == 'initbrace': continue
            if all(k == 'ns' for k, _, _ in stack): hdr_start = i + 1
    return res

if __name__ == '__main__':
    N = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    pre = sys.argv[2:] or ['compiler/', 'passes/', 'codegen/', 'runtime/']
    files = [f for f in subprocess.check_output(['git', 'ls-files'] + pre, cwd=ROOT, text=True).split()
             if re.search(r'\.(cpp|h|cu|cuh|c)$', f)]
    allf = [r for f in files for r in funcs(f)]
    allf.sort(reverse=True)
    for n, p, st, nm in allf[:N]: print(f'{n:6d}  {p}:{st}  {nm}')
    print(f'# {len(allf)} functions in {len(files)} files')
