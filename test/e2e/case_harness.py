"""The case harness the runtime checks share (check_runtime.py,
check_device_runtime.py): named cases that pass, fail on a `require`, or
fail on an unexpected exception (reported with its traceback), a results
list for the summary, and a scratch folder per case.
"""
import os
import shutil
import time
import traceback

RESULTS = []  # (name, ok, detail)
WORKDIR = None  # set by the script before the first case


class CaseFailure(Exception):
    pass


def require(cond, msg):
    if not cond:
        raise CaseFailure(msg)


def case(name):
    """Run fn() as case `name`: it returns a detail string or raises."""
    def deco(fn):
        def wrapped(*a, **kw):
            t0 = time.time()
            try:
                detail = fn(*a, **kw) or ""
                ok = True
            except CaseFailure as e:
                ok, detail = False, str(e)
            except Exception:  # a bug in the check itself, or a crash
                ok, detail = False, traceback.format_exc().strip().replace("\n", "\n      ")
            detail = "%s%s(%.1fs)" % (detail, " " if detail else "", time.time() - t0)
            RESULTS.append((name, ok, detail))
            print("%s %-30s %s" % ("PASS" if ok else "FAIL", name, detail), flush=True)
            return ok
        return wrapped
    return deco


def summary():
    """Prints `N passed, M failed`; returns the exit code."""
    passed = sum(1 for _, ok, _ in RESULTS if ok)
    failed = len(RESULTS) - passed
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


def work(*parts):
    return os.path.join(WORKDIR, *parts)


def fresh(*parts):
    d = work(*parts)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    return d


def read_bytes(path):
    with open(path, "rb") as f:
        return f.read()
