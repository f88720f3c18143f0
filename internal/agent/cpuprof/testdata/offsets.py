# Prints the addresses (CPython ids) the offset test checks, then sleeps
# inside a known 3-deep chain: <module> -> mid_ü -> sleeper
# (a non-ASCII name exercises the compact non-ASCII str layout).
import json
import sys
import threading
import time


def sleeper():
    f = sys._getframe()
    codes = [f.f_code, f.f_back.f_code, f.f_back.f_back.f_code]
    print(json.dumps({
        "tid": threading.get_native_id(),
        "codes": [id(c) for c in codes],
        "names": [c.co_qualname for c in codes],
        "files": [c.co_filename for c in codes],
        "lines": [c.co_firstlineno for c in codes],
    }), flush=True)
    time.sleep(1000)


def mid_ü():
    sleeper()


mid_ü()
