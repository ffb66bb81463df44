#!/usr/bin/env python3
"""Haul against curl, wget2 and aria2c on the same corpora, served by a private nginx on loopback.

Usage:
    Benchmarks/peers/compare.py [--corpora small,medium,large,list100k] [--runs 5] [-j 16]
                                [--root /tmp/haul-bench] [--haul .build/release/haul] [--large-mib 1024]
                                [--only TOOL,...] [--store-rounds 40]

What it does:
  * generates the corpora once under ROOT/www (random, incompressible bytes):
      small 2000 x 16 KiB, medium 200 x 1 MiB, large 2 x LARGE_MIB MiB, list100k 100,000 x 64 bytes
    and a URL list per corpus under ROOT/lists;
  * starts nginx on a free 127.0.0.1 port (pid file, logs and temp paths in ROOT), stops it by PID at the end;
  * for each corpus, runs every tool once per round, in interleaved order (haul curl wget2 aria2c haul curl ...),
    RUNS rounds, each round starting one tool further on so that no tool always runs in the same place; before
    each run the previous output of many files is moved aside (deleted at the end: creating thousands of files right
    after deleting thousands is slower on ext4), and the output of a few files is deleted as soon as its run ends
    (so that no run pays for reclaiming the page cache other runs filled); the corpus is read once so nginx serves
    it from the page cache; each run is wrapped in GNU time for CPU seconds and peak RSS;
  * right before each run, touches and frees as much memory as the run will write (1.25 x the corpus, at least
    256 MiB), so that no tool pays for the virtual machine's first touch of memory (below);
  * checks every output file byte for byte after the last round;
  * prints one Markdown table per corpus: median wall time, files/s, MB/s, CPU s, peak RSS, and each tool's time
    divided by Haul's (> 1: Haul is faster); with 4 rounds or more, Haul's time divided by its time without the
    store in the same round (median, quartiles, and a 95 % confidence interval for the median), the steadier measure
    of what persistence costs;
  * on the small corpus, STORE_ROUNDS more rounds of Haul with and without its store alone (which goes first
    alternating), run as the others, for that ratio again: the target is under 1.10, and six rounds leave the
    median's 95 % interval as wide as their whole range (1.17 to 1.30 in one run), where 40 narrow it to the 14th to
    27th of the sorted ratios.

Haul runs with its defaults (state database on, a fresh one per run, so nothing is skipped; progress on), plus
`haul (no state)` with --no-state to show what persistence costs. On the large corpus, `curl -> /dev/null` (one
file, one stream) gives the physical limit. On list100k only Haul runs: its peak RSS and the time from start to the
first request (read from its --json events) are the targets there.

Why the memory is touched first: on this kind of virtual machine, memory the guest has not touched lately is slow to
touch again (most likely the host takes freed pages back: the guest has a virtio balloon), and a run that writes
200 MB into the page cache pays for it. With every tool, the medium corpus written to tmpfs took 0.12-0.16 s in the
first two rounds and 0.26-0.63 s in the next four; after 8 GiB had been touched and freed, 0.11-0.20 s in 23 of 24
runs. Which tool ran into fresh memory decided more than the tools did.

Needs: nginx, curl, wget2, aria2c, GNU time (/usr/bin/time), python3. Not part of `swift test`.
"""

import argparse
import filecmp
import json
import math
import os
import shutil
import socket
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PROJECT = os.path.abspath(os.path.join(HERE, "..", ".."))

CORPORA = {
    "small": (2000, 16 * 1024),
    "medium": (200, 1024 * 1024),
    "large": (2, None),  # size from --large-mib
    "list100k": (100_000, 64),
}


def paired_ratios(numerators, denominators):
    """Each round's ratio of two commands' wall times (numerators[r] / denominators[r]): the median, the quartiles,
    and a 95 % confidence interval for the median (below). A slow stretch of the machine moves every command of its
    round alike, so these hold still where the ratio of the medians does not (the store's share of a small-file run
    was 7 % and 13 % in two full runs of the same day)."""
    ratios = [n / d for n, d in zip(numerators, denominators)]
    if len(ratios) < 4:
        return None
    q1, _, q3 = statistics.quantiles(ratios, n=4)
    low, high = median_interval(ratios)
    return statistics.median(ratios), q1, q3, low, high


def median_interval(values, confidence=0.95):
    """A confidence interval for the median that assumes nothing of the distribution: the k-th smallest and the k-th
    largest value, with k the largest count such that fewer than k of n values fall below the median with probability
    at most (1 - confidence) / 2 (a binomial tail with p = 1/2). Six rounds give the whole range (no interval narrower
    than that exists at 95 %); 40 rounds, the 14th to the 27th value. Whether a target such as "under 1.10" is met
    is whether the interval's upper end is under it."""
    ordered = sorted(values)
    n = len(ordered)
    tail, k = 0.0, 0
    while k < n:
        tail += math.comb(n, k) / 2**n
        if tail > (1 - confidence) / 2:
            break
        k += 1
    k = max(k, 1)
    return ordered[k - 1], ordered[n - k]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def generate(root, corpus, count, size):
    folder = os.path.join(root, "www", corpus)
    marker = os.path.join(folder, ".complete")
    if os.path.exists(marker) and open(marker).read() == f"{count} {size}":
        return
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    print(f"generating {corpus}: {count} x {size} bytes", file=sys.stderr)
    for index in range(count):
        with open(os.path.join(folder, f"f{index:06d}.bin"), "wb") as f:
            left = size
            while left > 0:
                block = min(left, 8 << 20)
                f.write(os.urandom(block))
                left -= block
    with open(marker, "w") as f:
        f.write(f"{count} {size}")


def write_list(root, corpus, count, port):
    os.makedirs(os.path.join(root, "lists"), exist_ok=True)
    path = os.path.join(root, "lists", f"{corpus}.txt")
    with open(path, "w") as f:
        for index in range(count):
            f.write(f"http://127.0.0.1:{port}/{corpus}/f{index:06d}.bin\n")
    return path


class Nginx:
    def __init__(self, root, port):
        self.root, self.port = root, port
        conf = os.path.join(root, "nginx.conf")
        user = "user root;" if os.getuid() == 0 else ""
        with open(conf, "w") as f:
            f.write(f"""{user}
worker_processes 2;
pid {root}/nginx.pid;
error_log {root}/error.log;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    sendfile on;
    tcp_nopush on;
    keepalive_requests 100000;
    client_body_temp_path {root}/tmp;
    proxy_temp_path {root}/tmp;
    fastcgi_temp_path {root}/tmp;
    uwsgi_temp_path {root}/tmp;
    scgi_temp_path {root}/tmp;
    server {{
        listen 127.0.0.1:{port};
        root {root}/www;
    }}
}}
""")
        os.makedirs(os.path.join(root, "tmp"), exist_ok=True)
        self.process = subprocess.Popen(
            ["nginx", "-p", root, "-e", os.path.join(root, "error.log"), "-c", conf, "-g", "daemon off;"]
        )
        deadline = time.time() + 10
        while time.time() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                return
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise SystemExit("nginx did not start")

    def stop(self):
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()


def tools(haul, jobs, large):
    aria = "--allow-overwrite=true --auto-file-renaming=false --file-allocation=none --console-log-level=warn " \
           "--summary-interval=0"
    result = [
        ("haul", f"{haul} get -i {{list}} -d {{dir}} -j {jobs} -q --state {{state}}"),
        ("haul (no state)", f"{haul} get -i {{list}} -d {{dir}} -j {jobs} -q --no-state"),
        ("curl", f"sed 's/.*/url = \"&\"/' {{list}} | curl --no-progress-meter --fail --parallel "
                 f"--parallel-max {jobs} --remote-name-all --output-dir {{dir}} -K -"),
        ("wget2", f"wget2 -q --max-threads={jobs} -i {{list}} -P {{dir}}"),
        ("aria2c", f"aria2c -i {{list}} -d {{dir}} -j {jobs} {aria}"),
    ]
    if large:
        result.append(("curl -> /dev/null (1 file)", "curl -s --fail -o /dev/null $(head -n1 {list})"))
    return result


def run_once(command, out_dir, state, timing_file):
    os.makedirs(out_dir, exist_ok=True)
    expanded = command.replace("{dir}", out_dir).replace("{state}", state)
    started = time.monotonic()
    status = subprocess.call(
        ["/usr/bin/time", "-f", "%e %U %S %M", "-o", timing_file, "bash", "-c", expanded],
        stdout=subprocess.DEVNULL,
    )
    wall = time.monotonic() - started
    fields = open(timing_file).read().split()[-4:]
    return {
        "status": status,
        "wall": wall,
        "cpu": float(fields[1]) + float(fields[2]),
        "rss_mib": int(fields[3]) / 1024,
    }


def move_aside(root, path, many_files=True):
    """Moves the previous output aside (deleted at the end) when it has many files; deletes it otherwise."""
    if os.path.exists(path) and not many_files:
        shutil.rmtree(path)
    elif os.path.exists(path):
        trash = os.path.join(root, "trash")
        os.makedirs(trash, exist_ok=True)
        os.rename(path, os.path.join(trash, f"{os.path.basename(path)}.{time.time_ns()}"))


def prefault(byte_count):
    """Touches `byte_count` bytes of new memory, then frees them: the pages a run writes next are then ready."""
    block = b"\x01" * byte_count
    del block


def warm(folder):
    for name in os.listdir(folder):
        if name.endswith(".bin"):
            with open(os.path.join(folder, name), "rb") as f:
                while f.read(8 << 20):
                    pass


def verify(source, output):
    names = sorted(n for n in os.listdir(source) if n.endswith(".bin"))
    for name in names:
        target = os.path.join(output, name)
        if not os.path.exists(target) or not filecmp.cmp(os.path.join(source, name), target, shallow=False):
            return f"{name} differs or is missing"
    extra = set(os.listdir(output)) - set(names)
    return f"unexpected files: {sorted(extra)[:3]}" if extra else None


def first_start(haul, list_path, out_dir, state, jobs, timing_file):
    """Runs haul with --json; returns (seconds to the first `started` event, total seconds, peak RSS MiB, status)."""
    os.makedirs(out_dir, exist_ok=True)
    started = time.monotonic()
    process = subprocess.Popen(
        ["/usr/bin/time", "-f", "%e %U %S %M", "-o", timing_file, haul, "get", "-i", list_path, "-d", out_dir,
         "-j", str(jobs), "--json", "--state", state],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )
    first = None
    for line in process.stdout:
        if first is None and '"event":"started"' in line.replace(" ", ""):
            first = time.monotonic() - started
    status = process.wait()
    total = time.monotonic() - started
    fields = open(timing_file).read().split()[-4:]
    return first, total, int(fields[3]) / 1024, status, float(fields[1]) + float(fields[2])


def run_round(root, corpus, count, size, index, round_number, template, list_path, check):
    """One run of one tool on a corpus, as every round runs it: the previous output moved aside, the disk synced, the
    corpus warm in the page cache, memory touched first, a fresh state database. Returns the run's measures and what
    was wrong with it (its exit status, or with `check`, the first output that differs from the corpus), if anything."""
    out = os.path.join(root, "out", f"{corpus}-{index}")
    move_aside(root, out, many_files=count >= 1000)
    subprocess.call(["sync"])
    source = os.path.join(root, "www", corpus)
    warm(source)
    state = os.path.join(root, "state", f"{corpus}-{index}-{round_number}.sqlite")
    os.makedirs(os.path.dirname(state), exist_ok=True)
    prefault(max(count * size * 5 // 4, 256 << 20))
    result = run_once(template.replace("{list}", list_path), out, state, os.path.join(root, "time.txt"))
    problem = f"exit {result['status']}" if result["status"] != 0 else (verify(source, out) if check else None)
    if count < 1000:
        # Gone before the next run: six tools' 2 GiB each stayed in the page cache, and which run paid for
        # reclaiming them (with its own system time) moved the large corpus's times by 2x.
        shutil.rmtree(out, ignore_errors=True)
    return result, problem


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpora", default="small,medium,large")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("-j", "--jobs", type=int, default=16)
    parser.add_argument("--root", default="/tmp/haul-bench")
    parser.add_argument("--haul", default=os.path.join(PROJECT, ".build", "release", "haul"))
    parser.add_argument("--large-mib", type=int, default=1024)
    parser.add_argument("--only", default="", help="comma list of tool names to run (default: all)")
    parser.add_argument("--store-rounds", type=int, default=40,
                        help="on the small corpus, rounds of haul with and without its store alone (default 40)")
    args = parser.parse_args()

    root = os.path.abspath(args.root)
    os.makedirs(root, exist_ok=True)
    if not os.access(args.haul, os.X_OK):
        raise SystemExit(f"no haul at {args.haul}: run `swift build -c release` first")
    port = free_port()
    corpora = [c for c in args.corpora.split(",") if c]
    for corpus in corpora:
        count, size = CORPORA[corpus]
        generate(root, corpus, count, size or args.large_mib * 1024 * 1024)

    nginx = Nginx(root, port)
    try:
        for corpus in corpora:
            count, size = CORPORA[corpus]
            size = size or args.large_mib * 1024 * 1024
            list_path = write_list(root, corpus, count, port)
            source = os.path.join(root, "www", corpus)
            if corpus == "list100k":
                out = os.path.join(root, "out", corpus)
                move_aside(root, out)
                state = os.path.join(root, "state", f"{corpus}.sqlite")
                os.makedirs(os.path.dirname(state), exist_ok=True)
                for suffix in ("", "-wal", "-shm"):
                    if os.path.exists(state + suffix):
                        os.remove(state + suffix)
                prefault(256 << 20)
                first, total, rss, status, cpu = first_start(
                    args.haul, list_path, out, state, args.jobs, os.path.join(root, "time.txt"))
                problem = verify(source, out) if status == 0 else f"exit {status}"
                print(f"\n## {corpus}: {count:,} URLs of {size} bytes (haul -j {args.jobs}, state on)\n")
                print("| first request after | total | files/s | CPU s | peak RSS MiB | check |")
                print("|---|---|---|---|---|---|")
                print(f"| {first:.2f} s | {total:.1f} s | {count / total:,.0f} | {cpu:.1f} | {rss:.0f} | "
                      f"{problem or 'identical'} |")
                continue

            selected = [t for t in tools(args.haul, args.jobs, corpus == "large")
                        if not args.only or t[0] in args.only.split(",")]
            results = {name: [] for name, _ in selected}
            problems = {}
            for round_number in range(args.runs):
                # Each round starts one tool further on (haul curl wget2 ..., then curl wget2 ... haul), so that no
                # tool always runs in the same place: on large, haul without its store (always second) was slower
                # than haul in every run of two sessions, by up to 60 %.
                shift = round_number % len(selected)
                order = list(enumerate(selected))[shift:] + list(enumerate(selected))[:shift]
                for index, (name, template) in order:
                    result, problem = run_round(root, corpus, count, size, index, round_number, template, list_path,
                                                check=round_number == args.runs - 1 and "/dev/null" not in name)
                    results[name].append(result)
                    if problem and name not in problems:
                        problems[name] = problem
                print(f"round {round_number + 1}/{args.runs} of {corpus} done", file=sys.stderr)

            # What persistence costs, in rounds of its own: the target is a ratio near 1.1, and the main rounds' few
            # ratios leave its median anywhere in their range.
            pair = [(index, (name, template)) for index, (name, template) in enumerate(selected)
                    if name in ("haul", "haul (no state)")]
            store_rounds = {name: [] for _, (name, _) in pair}
            if corpus == "small" and len(pair) == 2:
                for round_number in range(args.store_rounds):
                    for index, (name, template) in pair[round_number % 2:] + pair[:round_number % 2]:
                        result, problem = run_round(root, corpus, count, size, index, args.runs + round_number,
                                                    template, list_path, check=round_number >= args.store_rounds - 2)
                        store_rounds[name].append(result)
                        if problem and name not in problems:
                            problems[name] = problem
                if args.store_rounds:
                    print(f"{args.store_rounds} rounds of the store's share done", file=sys.stderr)

            base = statistics.median(r["wall"] for r in results["haul"]) if "haul" in results else None
            print(f"\n## {corpus}: {count} x {size // 1024} KiB, -j {args.jobs}, {args.runs} interleaved runs, "
                  f"medians\n")
            print("| tool | wall s | files/s | MB/s | CPU s | CPU s/GiB | peak RSS MiB | time / haul's | check |")
            print("|---|---|---|---|---|---|---|---|---|")
            for name, runs in results.items():
                wall = statistics.median(r["wall"] for r in runs)
                cpu = statistics.median(r["cpu"] for r in runs)
                rss = max(r["rss_mib"] for r in runs)
                files = 1 if "(1 file)" in name else count
                gib = files * size / (1 << 30)
                ratio = f"{wall / base:.2f}" if base else "-"
                print(f"| {name} | {wall:.3f} | {files / wall:,.0f} | {files * size / 1e6 / wall:,.0f} | {cpu:.2f} | "
                      f"{cpu / gib:.2f} | {rss:.1f} | {ratio} | {problems.get(name, 'identical')} |")
            for label, rounds in (("per round", results), (f"in {args.store_rounds} rounds of their own", store_rounds)):
                if rounds.get("haul") and rounds.get("haul (no state)"):
                    share = paired_ratios([r["wall"] for r in rounds["haul"]],
                                          [r["wall"] for r in rounds["haul (no state)"]])
                    if share:
                        print(f"\nhaul / haul (no state), {label}: median {share[0]:.3f}, quartiles {share[1]:.3f}-"
                              f"{share[2]:.3f}, 95 % interval of the median {share[3]:.3f}-{share[4]:.3f} (what "
                              f"persistence costs)")
            sys.stdout.flush()
    finally:
        nginx.stop()
        shutil.rmtree(os.path.join(root, "trash"), ignore_errors=True)
        shutil.rmtree(os.path.join(root, "out"), ignore_errors=True)
        shutil.rmtree(os.path.join(root, "state"), ignore_errors=True)


if __name__ == "__main__":
    main()
