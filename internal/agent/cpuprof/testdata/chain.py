# A known Python call chain for the unwinder tests: <module> -> level1 ->
# level2 -> level3 -> level4, which spins in bytecode.
import sys


def level4(n):
    x = 0
    while True:
        x = (x + n) % 1000003


def level3(n):
    return level4(n + 1)


def level2(n):
    return level3(n + 1)


def level1(n):
    return level2(n + 1)


print("ready", flush=True)
level1(int(sys.argv[1]) if len(sys.argv) > 1 else 1)
