#!/usr/bin/env python3
"""Any commands against each other, interleaved, each writing into a fresh folder: which is faster, and by how much?

Usage:
    Benchmarks/peers/commands.py ROUNDS [--out DIR] [--prefault MIB] [--sync] [--delete] NAME=COMMAND [...]

Each COMMAND runs through the shell with `{dir}` replaced by an empty output folder (DIR, default /dev/shm/haul-commands,
made afresh before every run) and that folder as its working directory. Each round starts one command further on, so
that with as many rounds as commands every command runs once in every place. Before each run, PREFAULT MiB (default
256) of memory are touched and freed, as compare.py does (see its docstring: on this kind of virtual machine the run
that first touches memory pays for it). Prints, per command, the median wall time of the whole process (start-up
included), user and system CPU and context switches (`getrusage` of the children); then, with four rounds or more, each
command's wall time divided by the first command's in the same round (median, quartiles and a 95 % confidence interval
for the median): the steadier figure on this shared machine, so put the reference (a build without the change, or
`--no-state`) first. The interval narrows with the rounds (the store's share of 2,000 small files, tmpfs: quartiles
1.13-1.21, and 150 rounds, 75 seconds, put its median within about 1.5 points).

On tmpfs (the default folder) file creation costs the same for every tool, so the tools' own differences show; on ext4,
pass --out on that disk, and mind that deleting thousands of files slows the next thousands' creation for minutes
(outputs on a disk other than tmpfs are moved aside, not deleted, and left for you to delete; with --delete they are
deleted before the next run, as suits a few large files, whose pages in the cache would otherwise be reclaimed during
later runs).

For example, the floors under `haul get` against haul and the peers (nginx from compare.py serving ROOT/www):

    Benchmarks/peers/commands.py 12 \\
        "nio-files=$PWD/.build/release/haul-http-floor nio-files LIST {dir}" \\
        "http-files=$PWD/.build/release/haul-http-floor http-files LIST {dir}" \\
        "haul=$PWD/.build/release/haul get -i LIST -d {dir} -j 16 -q --state {dir}/state.sqlite" \\
        "wget2=wget2 -q --max-threads=16 -i LIST -P {dir}"

(Absolute paths: each command runs in its output folder.) With --serve ROOT, the corpora compare.py generated under
ROOT/www are served by a private nginx on a free loopback port for the run (stopped at the end), `{list:CORPUS}`
in a command is the path of a URL list for that corpus on that port (ROOT/lists/CORPUS.txt, written anew), and
`{port}` is the port (for a single file's URL):

    Benchmarks/peers/commands.py 12 --serve /tmp/haul-bench \\
        "haul=$PWD/.build/release/haul get -i {list:small} -d {dir} -j 16 -q --no-state" \\
        "curl=sed 's/.*/url = \\"&\\"/' {list:small} | curl --no-progress-meter --fail --parallel --parallel-max 16 --remote-name-all -K -"

Not part of `swift test`.
"""

import argparse
import contextlib
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare import CORPORA, Nginx, free_port, paired_ratios, prefault, write_list  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(usage=__doc__)
    parser.add_argument("rounds", type=int)
    parser.add_argument("commands", nargs="+", help="NAME=COMMAND, with {dir} for the output folder")
    parser.add_argument("--out", default="/dev/shm/haul-commands")
    parser.add_argument("--prefault", type=int, default=256, help="MiB touched and freed before each run")
    parser.add_argument("--serve", metavar="ROOT", help="serve compare.py's corpora under ROOT/www for the run")
    parser.add_argument(
        "--delete",
        action="store_true",
        help="delete the last run's output on any disk, before the next run (for a few large files: their pages in "
        "the cache, not file creation, are what a later run would pay for)",
    )
    parser.add_argument(
        "--sync",
        action="store_true",
        help="write the page cache's dirty data back before each run, outside its time (as compare.py does)",
    )
    options = parser.parse_args()
    with serving(options.serve) as nginx:
        run(options, nginx)


def run(options, nginx) -> None:
    commands = named_commands(options.commands, options.serve, nginx)
    on_tmpfs = options.out.startswith("/dev/shm/")
    samples: dict[str, list[tuple[float, float, float, float]]] = {name: [] for name, _ in commands}
    for run in range(options.rounds):
        shift = run % len(commands)
        for name, command in commands[shift:] + commands[:shift]:
            if os.path.exists(options.out):
                if on_tmpfs or options.delete:
                    shutil.rmtree(options.out)
                else:
                    os.rename(options.out, f"{options.out}.old.{time.time_ns()}")
            os.makedirs(options.out)
            if options.sync:
                # The last run's gigabytes still being written back would slow this one.
                subprocess.call(["sync"])
            prefault(options.prefault << 20)
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            started = time.perf_counter()
            done = subprocess.run(command.replace("{dir}", options.out), shell=True, cwd=options.out)
            wall = time.perf_counter() - started
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            if done.returncode != 0:
                sys.exit(f"{name} failed ({done.returncode})")
            switches = (after.ru_nvcsw - before.ru_nvcsw) + (after.ru_nivcsw - before.ru_nivcsw)
            samples[name].append(
                (wall, after.ru_utime - before.ru_utime, after.ru_stime - before.ru_stime, float(switches))
            )
    if on_tmpfs or options.delete:
        shutil.rmtree(options.out, ignore_errors=True)
    print(f"{'command':<24} {'wall ms':>9} {'user ms':>9} {'sys ms':>9} {'switches':>9}  ({options.rounds} rounds, medians)")
    for name, _ in commands:
        wall, user, system, switches = (statistics.median(s[k] for s in samples[name]) for k in range(4))
        print(f"{name:<24} {wall * 1000:9.1f} {user * 1000:9.1f} {system * 1000:9.1f} {switches:9.0f}")
    print_ratios(commands, samples)


@contextlib.contextmanager
def serving(root: str | None):
    """A private nginx serving compare.py's corpora under ROOT/www on a free port while the block runs, stopped at
    its end (`None`, and nothing started, without ROOT)."""
    nginx = Nginx(root, free_port()) if root else None
    try:
        yield nginx
    finally:
        if nginx:
            nginx.stop()


def run_in_fresh_folder(tool: list[str], words: list[str], out: str) -> int:
    """Runs `tool` followed by `words` (with `{dir}` replaced by `out`) in `out`, emptied and made anew, its output
    discarded: the exit status."""
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    done = subprocess.run(
        tool + [word.replace("{dir}", out) for word in words],
        cwd=out,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return done.returncode


def named_commands(items: list[str], root: str, nginx) -> list[tuple[str, str]]:
    """NAME=COMMAND items as (name, command) pairs; with `nginx` serving ROOT, their lists and port filled in
    (``with_lists``)."""
    commands = []
    for item in items:
        name, separator, command = item.partition("=")
        if not separator or not name or not command:
            sys.exit(f"not NAME=COMMAND: {item}")
        if nginx:
            command = with_lists(command, root, nginx.port)
        commands.append((name, command))
    return commands


def with_lists(command: str, root: str, port: int) -> str:
    """`command` with each `{list:CORPUS}` replaced by the path of a URL list for that corpus of ROOT/www on `port`
    (ROOT/lists/CORPUS.txt, written anew), and each `{port}` by the port (for one file's URL, such as
    http://127.0.0.1:{port}/small/f000000.bin)."""
    command = command.replace("{port}", str(port))
    for corpus, (count, _) in CORPORA.items():
        if f"{{list:{corpus}}}" in command:
            if not os.path.exists(os.path.join(root, "www", corpus, ".complete")):
                sys.exit(f"no {corpus} corpus under {root}/www: run compare.py once first")
            command = command.replace(f"{{list:{corpus}}}", write_list(root, corpus, count, port))
    return command


def print_ratios(commands, samples) -> None:
    """Each command's wall time divided by the first command's in the same round: the median, the quartiles and the
    median's 95 % confidence interval of those ratios. A slow stretch of the machine moves every command of its round
    alike, so these hold still where the medians of the times do not (the same build's 12-round medians ranged from
    159 to 180 ms in one afternoon here)."""
    first = commands[0][0]
    rounds = len(samples[first])
    if len(commands) < 2 or rounds < 4:
        return
    print(f"{'wall time / ' + first:<24} {'median':>9} {'q1':>9} {'q3':>9}  {'95 % interval of the median':>27}"
          "  (per round)")
    for name, _ in commands[1:]:
        median, q1, q3, low, high = paired_ratios([s[0] for s in samples[name]], [s[0] for s in samples[first]])
        print(f"{name:<24} {median:9.3f} {q1:9.3f} {q3:9.3f}  {low:13.3f} to {high:.3f}")


if __name__ == "__main__":
    main()
