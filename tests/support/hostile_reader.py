#!/usr/bin/python3
"""A collection holder that was granted read-only access tries every way it has to write.

    hostile_reader.py FD SIZE

FD is the read-only fd it inherited, SIZE the buffer's size. Each route is tried once and
reported as one JSON object on stdout: route -> "refused: <errno name>" or "WROTE". The
byte it writes is 0xEE at offset 0, so the parent sees any route that got through.
"""
import ctypes
import errno
import fcntl
import json
import mmap
import os
import sys

fd, size = int(sys.argv[1]), int(sys.argv[2])
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
MAP_FAILED = ctypes.c_void_p(-1).value
out = {}


def refused(e):
    return "refused: " + errno.errorcode.get(e, str(e))


def attempt(route, f):
    try:
        f()
        out[route] = "WROTE"
    except OSError as e:
        out[route] = refused(e.errno)


def reopen():
    w = os.open("/proc/self/fd/%d" % fd, os.O_RDWR)
    os.pwrite(w, b"\xee", 0)


def mmap_writable():
    m = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    m[0] = 0xEE


def mprotect():
    addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
    if addr in (None, MAP_FAILED):
        raise OSError(ctypes.get_errno(), "mmap")
    if libc.mprotect(addr, size, mmap.PROT_READ | mmap.PROT_WRITE) != 0:
        raise OSError(ctypes.get_errno(), "mprotect")
    ctypes.c_uint8.from_address(addr).value = 0xEE


def write():
    os.pwrite(fd, b"\xee", 0)


def fcntl_then_write():
    # The access mode is fixed at open: F_SETFL ignores O_RDWR.
    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_RDWR)
    os.pwrite(fd, b"\xee", 0)


for name, f in [("reopen", reopen), ("mmap", mmap_writable), ("mprotect", mprotect), ("write", write), ("fcntl", fcntl_then_write)]:
    attempt(name, f)
print(json.dumps(out))
