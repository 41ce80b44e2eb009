"""launch.py - the start of one process to its first line on stdout, timed
from inside one process: bench/first-answer/run.sh's clock.

Usage: launch.py OUT LOG CMD [ARG...]

Starts CMD with stderr to LOG, reads its stdout's first line into OUT and
prints the milliseconds from just before the process was spawned to that
line (CLOCK_MONOTONIC), then drains stdout and waits for CMD. Taking both
readings here, with no fork between them and the process, keeps the
harness's own work out of the figure: a shell that forks date(1) for the
second reading would count the time the machine spends on CMD's teardown
(and the node daemon's, as CMD lets go of its references) against CMD.
Exit status: 0, or 1 when CMD printed no line or exited non-zero.
"""
import subprocess
import sys
import time


def main():
    if len(sys.argv) < 4:
        sys.stderr.write("usage: launch.py OUT LOG CMD [ARG...]\n")
        return 2
    out, log, cmd = sys.argv[1], sys.argv[2], sys.argv[3:]
    with open(log, "wb") as err:
        t0 = time.monotonic_ns()
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err)
        line = p.stdout.readline()
        t1 = time.monotonic_ns()
        p.stdout.read()
        rc = p.wait()
    with open(out, "wb") as f:
        f.write(line)
    if rc != 0 or not line:
        sys.stderr.write("launch.py: %s: exit status %d, %s\n"
                         % (cmd[0], rc, "a line" if line else "no line"))
        return 1
    print("%.1f" % ((t1 - t0) / 1e6))
    return 0


if __name__ == "__main__":
    sys.exit(main())
