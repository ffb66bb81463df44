#!/usr/bin/env python3
"""Commands against each other in instructions executed, not in time: changes of 1-3 % that wall time cannot show.

Usage:
    Benchmarks/peers/instructions.py [--serve ROOT] [--out DIR] [--runs N] [--top N] NAME=COMMAND [NAME=COMMAND ...]

Each COMMAND runs under Valgrind's callgrind (`valgrind --tool=callgrind`), RUNS times (default 3), in a fresh folder
(DIR, default /dev/shm/haul-instructions) that replaces `{dir}`, as in commands.py; `{list:CORPUS}` and `{port}`
with --serve too. A COMMAND is one program and its arguments (split as the shell would, but not run through it: no
pipes). The program is copied without its debug information first (Valgrind 3.19 cannot read the DWARF 5 that Swift
writes; the symbols stay). Prints each command's instructions in user space (the median of its runs; the kernel's work
is not counted), its spread, and its ratio against the first command; with --top N, the N functions whose own
instructions grew or shrank most against the first command's.

Instruction counts are steady where time is not: the same build gives the same count within about 1 % (threads
interleave differently: how many transactions the store's writer groups, how long a lock spins), whatever else the
machine is doing. They do not count the kernel, cache misses or waiting, so a change is then checked in time too
(commands.py). Callgrind runs a program about 50 times slower: 2,000 small files take about 30 s a run.

For example, a build against the one before it, on 2,000 small files with the store (nginx from compare.py serving
ROOT/www):

    Benchmarks/peers/instructions.py --serve /tmp/haul-bench --top 15 \\
        "before=/tmp/haul-before get -i {list:small} -d {dir}/o -j 16 -q --state {dir}/s.sqlite" \\
        "after=$PWD/.build/release/haul get -i {list:small} -d {dir}/o -j 16 -q --state {dir}/s.sqlite"

Not part of `swift test`.
"""

import argparse
import collections
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from commands import named_commands, run_in_fresh_folder, serving  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(usage=__doc__)
    parser.add_argument("commands", nargs="+", help="NAME=COMMAND, with {dir} for the output folder")
    parser.add_argument("--out", default="/dev/shm/haul-instructions")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--top", type=int, default=0, help="functions that changed most against the first command")
    parser.add_argument("--serve", metavar="ROOT", help="serve compare.py's corpora under ROOT/www for the run")
    options = parser.parse_args()
    if not shutil.which("valgrind") or not shutil.which("callgrind_annotate"):
        sys.exit("needs valgrind (apt-get install valgrind)")
    scratch = tempfile.mkdtemp(prefix="haul-instructions-")
    try:
        with serving(options.serve) as nginx:
            run(options, nginx, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        shutil.rmtree(options.out, ignore_errors=True)


def run(options, nginx, scratch: str) -> None:
    commands = []
    for index, (name, command) in enumerate(named_commands(options.commands, options.serve, nginx)):
        words = shlex.split(command)
        program = shutil.which(words[0]) or sys.exit(f"{name}: no program {words[0]}")
        # Valgrind 3.19 gives up on DWARF 5; the symbols, which the report needs, stay.
        copy = os.path.join(scratch, f"{index}-{os.path.basename(program)}")
        subprocess.run(["objcopy", "--strip-debug", program, copy], check=True)
        commands.append((name, [copy] + words[1:]))
    counts: dict[str, list[int]] = {name: [] for name, _ in commands}
    profiles: dict[str, str] = {}
    for run in range(options.runs):
        for name, words in commands:
            profile = os.path.join(scratch, f"{name}-{run}.callgrind")
            callgrind = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={profile}"]
            status = run_in_fresh_folder(callgrind, words, options.out)
            if status != 0:
                sys.exit(f"{name} failed under callgrind ({status})")
            counts[name].append(total(profile))
            profiles.setdefault(name, profile)
    first = commands[0][0]
    print(f"{'command':<24} {'instructions':>16} {'spread':>8} {'/ ' + first:>12}  ({options.runs} runs, medians)")
    for name, _ in commands:
        median = statistics.median(counts[name])
        spread = (max(counts[name]) - min(counts[name])) / median
        ratio = median / statistics.median(counts[first])
        print(f"{name:<24} {median:16,.0f} {spread:8.2%} {ratio:12.4f}")
    if options.top:
        base = functions(profiles[first])
        for name, _ in commands[1:]:
            other = functions(profiles[name])
            changed = sorted(set(base) | set(other), key=lambda f: -abs(other.get(f, 0) - base.get(f, 0)))
            print(f"\nfunctions, {name} against {first} (own instructions, one run each)")
            for function in changed[: options.top]:
                print(f"{other.get(function, 0) - base.get(function, 0):+14,d}  {function[:110]}")


def total(profile: str) -> int:
    """The instructions a callgrind profile counted in all."""
    with open(profile) as file:
        for line in file:
            if line.startswith("summary:") or line.startswith("totals:"):
                return int(line.split()[1])
    sys.exit(f"no totals in {profile}")


def functions(profile: str) -> dict[str, int]:
    """Each function's own instructions in a profile, by name."""
    report = subprocess.run(
        ["callgrind_annotate", "--threshold=100", profile], capture_output=True, text=True, check=True
    ).stdout
    costs: dict[str, int] = collections.Counter()
    for line in report.splitlines():
        match = re.match(r"\s*([\d,]+) \([^)]*\)\s+(.*)", line)
        if match and "PROGRAM TOTALS" not in line:
            costs[re.sub(r" \[.*", "", match.group(2))] += int(match.group(1).replace(",", ""))
    return costs


if __name__ == "__main__":
    main()
