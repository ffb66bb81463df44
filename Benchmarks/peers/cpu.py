#!/usr/bin/env python3
"""Where commands spend their CPU, on the clock: `perf record -e cpu-clock` samples, by shared object (the program,
SQLite, libc, the kernel), interleaved as in commands.py.

Usage:
    Benchmarks/peers/cpu.py ROUNDS [--serve ROOT] [--out DIR] [--top N] NAME=COMMAND [NAME=COMMAND ...]

Each COMMAND is one program and its arguments (split as the shell would, not run through it), run under `perf record
-e cpu-clock -F 20000` (a sample every 50 µs of CPU in any of its threads, in user space or in the kernel on its
behalf) in a fresh folder that replaces `{dir}`; `{list:CORPUS}` and `{port}` with --serve, as in commands.py. Prints
each command's CPU milliseconds (the median of its rounds) in all and per shared object, and with --top N the N
functions whose samples grew or shrank most against the first command's (means over the rounds).

Callgrind (instructions.py) runs a program about 50 times slower, and what depends on the clock changes with it: the
store's writer groups a run's publishing records into about 16 transactions when it runs at full speed, about 190
under callgrind, and holds fewer rows back. On the clock these samples are what the program does; they count the
kernel too. The virtual machines here have no hardware counters, so `cpu-clock` it is (a timer): about 3,500 samples
for 2,000 small files, steady within a few percent over ten rounds.

For example, a build with its store against itself without (nginx from compare.py serving ROOT/www):

    Benchmarks/peers/cpu.py 10 --serve /tmp/haul-bench --top 20 \\
        "none=$PWD/.build/release/haul get -i {list:small} -d {dir}/o -j 16 -q --no-state" \\
        "store=$PWD/.build/release/haul get -i {list:small} -d {dir}/o -j 16 -q --state {dir}/s.sqlite"

Needs perf. Not part of `swift test`.
"""

import argparse
import collections
import os
import shlex
import shutil
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from commands import named_commands, run_in_fresh_folder, serving  # noqa: E402

SAMPLE_MS = 0.05  # 20,000 samples a second of CPU


def main() -> None:
    parser = argparse.ArgumentParser(usage=__doc__)
    parser.add_argument("rounds", type=int)
    parser.add_argument("commands", nargs="+", help="NAME=COMMAND, with {dir} for the output folder")
    parser.add_argument("--out", default="/dev/shm/haul-cpu")
    parser.add_argument("--serve", metavar="ROOT", help="serve compare.py's corpora under ROOT/www for the run")
    parser.add_argument("--top", type=int, default=0)
    options = parser.parse_args()
    with serving(options.serve) as nginx:
        run(options, nginx)


def run(options, nginx) -> None:
    named = named_commands(options.commands, options.serve, nginx)
    commands = [(name, shlex.split(command)) for name, command in named]
    profiles = options.out + "-profiles"
    os.makedirs(profiles, exist_ok=True)
    totals: dict[str, list[float]] = {name: [] for name, _ in commands}
    objects: dict[str, collections.Counter] = {name: collections.Counter() for name, _ in commands}
    functions: dict[str, collections.Counter] = {name: collections.Counter() for name, _ in commands}
    for round_number in range(options.rounds):
        shift = round_number % len(commands)
        for name, words in commands[shift:] + commands[:shift]:
            profile = os.path.join(profiles, f"{name}.data")
            perf = ["perf", "record", "-q", "-e", "cpu-clock", "-F", "20000", "-o", profile]
            status = run_in_fresh_folder(perf, words, options.out)
            if status != 0:
                sys.exit(f"{name} failed under perf ({status})")
            by_object = samples(profile, "dso")
            totals[name].append(sum(by_object.values()) * SAMPLE_MS)
            objects[name].update(by_object)
            if options.top:
                functions[name].update(samples(profile, "sym"))
    shutil.rmtree(options.out, ignore_errors=True)
    shutil.rmtree(profiles, ignore_errors=True)
    rounds = options.rounds
    print(f"{'command':<16} {'CPU ms':>8}  per shared object, ms (means of {rounds} rounds; CPU ms is the median)")
    for name, _ in commands:
        parts = ", ".join(
            f"{shorten(obj)} {count / rounds * SAMPLE_MS:.1f}" for obj, count in objects[name].most_common(5)
        )
        print(f"{name:<16} {statistics.median(totals[name]):8.1f}  {parts}")
    if options.top:
        first = commands[0][0]
        for name, _ in commands[1:]:
            base, other = functions[first], functions[name]
            changed = sorted(set(base) | set(other), key=lambda f: -abs(other[f] - base[f]))
            print(f"\nfunctions, {name} against {first} (ms of CPU, means of {rounds} rounds)")
            for function in changed[: options.top]:
                print(f"{(other[function] - base[function]) / rounds * SAMPLE_MS:+8.2f}  {function[:110]}")


def samples(profile: str, key: str) -> collections.Counter:
    """A profile's samples by `key` (dso or sym)."""
    report = subprocess.run(
        ["perf", "report", "-q", "-i", profile, "--sort", key, "--stdio", "-F", f"sample,{key}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    counts: collections.Counter = collections.Counter()
    for line in report.splitlines():
        fields = line.split(None, 1)
        if len(fields) == 2 and fields[0].isdigit():
            counts[fields[1].strip()] += int(fields[0])
    return counts


def shorten(shared_object: str) -> str:
    """A shared object's name without its version suffix (libsqlite3.so.0.8.6: libsqlite3)."""
    return shared_object.split(".so")[0]


if __name__ == "__main__":
    main()
