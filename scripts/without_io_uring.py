#!/usr/bin/env python3
"""Runs a command in which the kernel refuses io_uring: a seccomp filter makes io_uring_setup
fail with EPERM, as a container's seccomp profile or kernel.io_uring_disabled does. Shows what
a stage and the io_uring disk tests do on such a machine (docs/building.md, "CI fails instead of
skipping").

    python3 scripts/without_io_uring.py -- env CI=true build/release/tests/disk_tests \
        --gtest_filter='*DiskEngine*'

The filter is inherited by every child and cannot be lifted. io_uring_setup is syscall 425 on
x86-64 and arm64, the architectures kvbm builds for.
"""

import ctypes
import os
import struct
import sys

IO_URING_SETUP = 425
PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2
SECCOMP_RET_ERRNO, SECCOMP_RET_ALLOW, EPERM = 0x00050000, 0x7FFF0000, 1
BPF_LD_W_ABS, BPF_JEQ_K, BPF_RET_K = 0x20, 0x15, 0x06


def deny_io_uring_setup():
    program = [
        (BPF_LD_W_ABS, 0, 0, 0),  # A = seccomp_data.nr
        (BPF_JEQ_K, 0, 1, IO_URING_SETUP),  # io_uring_setup: next, else skip one
        (BPF_RET_K, 0, 0, SECCOMP_RET_ERRNO | EPERM),
        (BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW),
    ]
    raw = b"".join(struct.pack("HBBI", *insn) for insn in program)
    filters = ctypes.create_string_buffer(raw)

    class Fprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    prog = Fprog(len(program), ctypes.cast(filters, ctypes.c_void_p))
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 or \
            libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0) != 0:
        sys.exit(f"without_io_uring: seccomp filter refused: {os.strerror(ctypes.get_errno())}")


def main(argv):
    if len(argv) < 3 or argv[1] != "--":
        print(__doc__.strip(), file=sys.stderr)
        return 2
    deny_io_uring_setup()
    print("[without_io_uring] io_uring_setup fails with EPERM", file=sys.stderr)
    os.execvp(argv[2], argv[2:])


if __name__ == "__main__":
    sys.exit(main(sys.argv))
