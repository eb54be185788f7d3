"""Runs a command and writes the CPU seconds (user + system) of its whole process tree to a
file: every process it started and waited for, the DataLoader's workers and hotpin's own
threads included. Less moved by the machine's other work than wall time, so a cost of a few
percent shows across a few runs (#40 item 1). Its exit status is the command's.
Usage: python3 cpu_time.py OUT_FILE COMMAND [ARGS...]"""
import resource, subprocess, sys

status = subprocess.call(sys.argv[2:])
used = resource.getrusage(resource.RUSAGE_CHILDREN)
with open(sys.argv[1], "w") as f:
    f.write(f"{used.ru_utime + used.ru_stime:.4f}\n")
sys.exit(status if status >= 0 else 128 - status)
