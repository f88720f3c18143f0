# chain.py — the CPython call chain <module> → a → b → c → d of the §5.2
# frame-accuracy evaluation (SysOM-AI). Each function works a while before
# calling the next, so samples land at every depth.
import os


def d(n):
    x = 0
    for i in range(n):
        x += i
    return x


def c(n):
    x = 0
    for i in range(n // 2):
        x += i
    return x + d(n * 2)


def b(n):
    x = 0
    for i in range(n // 2):
        x += i
    return x + c(n)


def a(n):
    x = 0
    for i in range(n // 4):
        x += i
    return x + b(n)


print("ready", os.getpid(), flush=True)
while True:
    a(20000)
