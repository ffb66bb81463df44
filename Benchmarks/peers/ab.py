#!/usr/bin/env python3
"""Two (or more) builds of haul against each other on one URL list, interleaved: is a change faster?

Usage:
    Benchmarks/peers/ab.py LIST RUNS {state,nostate} HAUL_A HAUL_B [HAUL_C ...]

Runs `HAUL get -i LIST -d DIR -j 16 -q` with each binary in turn (A B, then B A, ...: each round starts one binary
further on, as a binary's place in the round moves its time), RUNS rounds, each in a fresh
output folder under /tmp/haul-ab/<time> (and, with `state`, a fresh state database), wrapped in GNU time; prints
the median wall time, CPU seconds (user + system), user CPU and peak RSS per binary. User CPU is the steadiest of
these on a shared machine.

Outputs are kept, not deleted between runs: creating thousands of files right after deleting thousands is slower
on ext4 for minutes, which would favour whichever binary runs first. Delete /tmp/haul-ab when done (and wait a few
minutes before measuring small files again), or set AB_DELETE=1 to delete each output at once (for large files).

Before each run, as much memory as the run writes (the sum of the list's files, read from the first run's output,
at least 256 MiB) is touched and freed, as compare.py does: see its docstring for why.

LIST is a file of URLs (for example ROOT/lists/small.txt from compare.py, with its nginx running). Needs GNU time.
Not part of `swift test`.
"""

import os
import shutil
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare import prefault  # noqa: E402


def main() -> None:
    if len(sys.argv) < 6 or sys.argv[3] not in ("state", "nostate"):
        sys.exit(__doc__)
    url_list, runs, mode, binaries = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]
    base = f"/tmp/haul-ab/{time.time_ns()}"
    os.makedirs(base)
    samples: dict[int, list[tuple[float, float, float, float]]] = {i: [] for i in range(len(binaries))}
    written = 256 << 20
    for run in range(runs):
        shift = run % len(binaries)
        order = list(enumerate(binaries))[shift:] + list(enumerate(binaries))[:shift]
        for index, binary in order:
            out = f"{base}/out{run}-{index}"
            args = [binary, "get", "-i", url_list, "-d", out, "-j", "16", "-q"]
            args += ["--state", f"{out}.sqlite"] if mode == "state" else ["--no-state"]
            prefault(written)
            done = subprocess.run(["/usr/bin/time", "-f", "%e %U %S %M"] + args, capture_output=True, text=True)
            if done.returncode != 0:
                sys.exit(f"{binary} failed ({done.returncode}):\n{done.stderr}")
            wall, user, system, rss = (float(x) for x in done.stderr.strip().splitlines()[-1].split())
            samples[index].append((wall, user + system, user, rss / 1024))
            if run == 0 and index == 0:  # the first run of all sizes the rest
                size = sum(entry.stat().st_size for entry in os.scandir(out) if entry.is_file())
                written = max(written, size * 5 // 4)
            if os.environ.get("AB_DELETE"):
                shutil.rmtree(out, ignore_errors=True)
    for index, binary in enumerate(binaries):
        wall, cpu, user, rss = (statistics.median(s[k] for s in samples[index]) for k in range(4))
        print(f"{binary}: wall {wall:.3f} s  cpu {cpu:.3f} s (user {user:.3f})  rss {rss:.1f} MiB")


if __name__ == "__main__":
    main()
