#!/usr/bin/python3
"""Turns the raw outputs of bench/run.sh into the benchmark report.

Reads RESULTS (target/bench): perftest's client and server output and the
GNU time line of each process, iperf3's JSON, the baseline programs' lines,
the scale programs' lines and the engine bench. Prints the headline table
(each softverbs figure, its baseline, the ratio, the target), writes
docs/perf.md (the tables, the machine, the command, the date) and the PNG
plot of bandwidth against message size with the baselines as horizontal
lines.

Units: bandwidth in GB/s, 10^9 bytes per second (perftest prints MiB/s,
converted here; iperf3 prints bits per second). CPU in seconds of user +
system time of the processes involved, per GB (10^9 bytes) moved.

Uses only the standard library and Debian's python3-matplotlib, so it runs
with /usr/bin/python3 (bench/setup-deps.sh installs the package).
"""

import argparse
import datetime
import json
import math
import os
import platform
import re
import subprocess
import sys
from pathlib import Path

MIB = 1 << 20
GB = 1e9
SIZES = [1 << i for i in range(1, 21)]  # 2 B .. 1 MiB, as run.sh runs them
BW_TESTS = ["write", "read", "send"]
LAT_TESTS = ["send", "write", "read"]

# The targets of issue 10 (same host, the default path on one machine).
TARGET_BW_VS_TCP = 2.0  # ib_{write,read,send}_bw at 64 KiB >= 2.0x TCP
TARGET_BEST_BW_VS_MEMCPY = 0.5  # the same at 1 MiB >= 0.5x memcpy
TARGET_LAT_VS_UDP = 0.5  # ib_*_lat at 2 B <= 0.5x UDP half RTT
TARGET_CPU_VS_TCP = 0.5  # CPU seconds per GB <= 0.5x TCP's
TARGET_QP_BYTES = 64 * 1024  # memory per idle RC QP <= 64 KiB
TARGET_COLLAPSE = 2.0  # each size within 2x of its neighbours' trend

# The targets of issue 13 (the wire path, SOFTVERBS_SHM=0).
WIRE_BW_VS_TCP = 1.0  # ib_{write,read,send}_bw at 64 KiB >= 1.0x TCP
WIRE_CPU_VS_TCP = 1.0  # CPU seconds per GB <= 1.0x TCP's
WIRE_LAT_VS_UDP = 1.5  # send at 2 B <= 1.5x the UDP half RTT, read <= 1.5x the RTT
# Against kernel rxe in the VM (issue 13; bench/rxe_vm.sh): softverbs'
# bandwidth >= 1.0x rxe's, its latency <= 1.0x, and under 1% loss its
# throughput kept (as a fraction of its own lossless) >= rxe's.
RXE_BW_VS_RXE = 1.0
RXE_LAT_VS_RXE = 1.0
RXE_VM_BW = ["write", "read", "send"]
RXE_VM_LAT = ["send", "read", "write"]


def read(path):
    try:
        return Path(path).read_text(errors="replace")
    except OSError:
        return ""


def kv_line(text, prefix):
    """The key=value pairs of the first line starting with `prefix`."""
    for line in text.splitlines():
        if line.startswith(prefix):
            return {k: v for k, v in re.findall(r"(\w+)=([^\s]+)", line)}
    return {}


def cpu_seconds(path):
    """User + system seconds from a GNU time file ('%e %U %S' on its last
    line; a line about the exit status may come first)."""
    lines = read(path).strip().splitlines()
    if not lines:
        return None
    parts = lines[-1].split()
    try:
        return float(parts[1]) + float(parts[2])
    except (IndexError, ValueError):
        return None


def perftest_rows(text, ncols):
    """The result rows of perftest's output: lines of `ncols` numbers."""
    rows = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == ncols and all(re.fullmatch(r"[\d.]+", p) for p in parts):
            rows.append([float(p) for p in parts])
    return rows


class Results:
    """Everything measured, parsed from the results directory."""

    def __init__(self, root, perftest="perftest"):
        self.root = Path(root)
        pt = self.root / perftest
        self.bw = {}  # (test, size) -> GB/s
        self.cpu = {}  # (test, size) -> CPU s per GB
        self.failed = []
        for t in BW_TESTS:
            # CPU seconds of a 5-message run: the fixed cost of a run.
            setup = sum(
                cpu_seconds(pt / f"bw_{t}_setup.{side}.time") or 0.0 for side in ("cli", "srv")
            )
            for s in SIZES:
                rows = perftest_rows(read(pt / f"bw_{t}_{s}.cli"), 5)
                if not rows or int(rows[-1][0]) != s:
                    self.failed.append(f"ib_{t}_bw -s {s}")
                    continue
                _, iters, _, avg_mib, _ = rows[-1]
                self.bw[t, s] = avg_mib * MIB / GB
                cpus = [cpu_seconds(pt / f"bw_{t}_{s}.{side}.time") for side in ("cli", "srv")]
                if None not in cpus:
                    moved = s * iters / GB
                    self.cpu[t, s] = max(sum(cpus) - setup, 0.0) / moved
        self.lat = {}  # (test, size) -> (typical us, avg us, p99 us)
        self.lat_min = {}  # (test, size) -> t_min us
        for t in LAT_TESTS:
            for s in (2, 4096):
                rows = perftest_rows(read(pt / f"lat_{t}_{s}.cli"), 9)
                if not rows or int(rows[-1][0]) != s:
                    self.failed.append(f"ib_{t}_lat -s {s}")
                    continue
                r = rows[-1]
                self.lat[t, s] = (r[4], r[5], r[7])
                self.lat_min[t, s] = r[2]

        b = self.root / "baselines"
        self.tcp_gbs = self.tcp_cpu = None
        try:
            j = json.loads(read(b / "iperf3.json"))
            recv = j["end"]["sum_received"]
            self.tcp_gbs = recv["bits_per_second"] / 8 / GB
            cpus = [cpu_seconds(b / f"iperf3.{side}.time") for side in ("cli", "srv")]
            if None not in cpus:
                self.tcp_cpu = sum(cpus) / (recv["bytes"] / GB)
        except (ValueError, KeyError):
            self.failed.append("iperf3")
        self.udp = {}  # (mode, size) -> (median, mean, p99) half RTT in us
        for mode in ("busy", "block"):
            for s in (2, 4096):
                kv = kv_line(read(b / f"udp_{mode}_{s}"), "udp-pingpong")
                if kv:
                    self.udp[mode, s] = tuple(float(kv[k]) / 1000 for k in ("median", "mean", "p99"))
                else:
                    self.failed.append(f"udp-pingpong {mode} {s}")
        kv = kv_line(read(b / "memcpy"), "memcpy-bw")
        self.memcpy = float(kv["gbps_best"]) if kv else None

        sc = self.root / "scale"
        self.qp_scale = kv_line(read(sc / "qp_scale"), "qp_scale")
        self.pairs = {
            side: kv_line(read(sc / f"qp_pairs.{side}"), "qp_pairs") for side in ("cli", "srv")
        }
        self.pairs_cpu = [cpu_seconds(sc / f"qp_pairs.{side}.time") for side in ("cli", "srv")]
        self.checked = [
            dict(re.findall(r"(\w+)=([^\s]+)", line))
            for line in read(self.root / "engine" / "checked_memory").splitlines()
            if line.startswith("checked-memory ")
        ]
        if not self.checked:
            self.failed.append("checked_memory")
        self.engine = []
        for line in read(self.root / "engine" / "engine").splitlines():
            if line.startswith("engine "):
                self.engine.append(dict(re.findall(r"(\w+)=([^\s]+)", line)))

    def collapse(self, t):
        """bw(size) / the trend of its neighbours, for each size measured:
        the geometric mean of the two neighbours inside the sweep (exact
        when bandwidth grows or falls by a constant factor per doubling),
        extrapolated from the two nearest at the ends."""
        bw = [(s, self.bw.get((t, s))) for s in SIZES]
        out = {}
        for i, (s, v) in enumerate(bw):
            if not v:
                continue
            if 0 < i < len(bw) - 1:
                a, b = bw[i - 1][1], bw[i + 1][1]
                trend = math.sqrt(a * b) if a and b else None
            elif i == 0:
                a, b = bw[1][1], bw[2][1]
                trend = a * a / b if a and b else None
            else:
                a, b = bw[-2][1], bw[-3][1]
                trend = a * a / b if a and b else None
            if trend:
                out[s] = v / trend
        return out


def scheduler_note():
    """Why a woken thread waits for a spinning one on this kernel, if the
    kernel's config says (no full preemption: it runs at the next tick)."""
    try:
        import gzip

        config = gzip.open("/proc/config.gz", "rt").read()
    except OSError:
        return "."
    hz = re.search(r"^CONFIG_HZ=(\d+)$", config, re.M)
    if "CONFIG_PREEMPT_NONE=y" not in config or not hz:
        return "."
    tick_ms = 1000 / int(hz.group(1))
    return (
        f"; this kernel (PREEMPT_NONE, HZ={hz.group(1)}, from /proc/config.gz) "
        f"runs it only at the next scheduler tick, every {tick_ms:g} ms, "
        f"so {tick_ms / 2:g} ms on average."
    )


def size_name(s):
    if s >= MIB:
        return f"{s // MIB} MiB"
    if s >= 1024:
        return f"{s // 1024} KiB"
    return f"{s} B"


def fmt(v, digits=3):
    if v is None:
        return "n/a"
    if v == 0:
        return "0"
    mag = math.floor(math.log10(abs(v)))
    places = max(0, digits - 1 - mag)
    return f"{v:,.{places}f}"


def ratio(a, b):
    return a / b if a is not None and b else None


def verdict(value, target, higher_is_better):
    """'met' or 'missed by N x' for a ratio against its target."""
    if value is None:
        return "not measured"
    if higher_is_better:
        return "met" if value >= target else f"missed: {target / value:.1f}x short"
    return "met" if value <= target else f"missed: {value / target:.1f}x over"


def machine():
    """CPU model, cores, memory, kernel, OS, tool versions."""
    info = {}
    cpuinfo = read("/proc/cpuinfo")
    models = re.findall(r"^model name\s*:\s*(.+)$", cpuinfo, re.M)
    info["CPU"] = models[0].strip() if models else platform.processor() or "unknown"
    for key, name in (("cpu MHz", "CPU MHz"), ("cache size", "cache"), ("cpu cores", "cores per socket")):
        found = re.search(rf"^{key}\s*:\s*(.+)$", cpuinfo, re.M)
        if found:
            info[name] = found.group(1).strip()
    info["logical CPUs"] = str(os.cpu_count())
    mem = re.search(r"MemTotal:\s*(\d+) kB", read("/proc/meminfo"))
    info["memory"] = f"{int(mem.group(1)) / (1 << 20):.1f} GiB" if mem else "unknown"
    u = platform.uname()
    info["kernel"] = f"{u.system} {u.release} {u.version} {u.machine}"
    osr = re.search(r'^PRETTY_NAME="?([^"\n]+)', read("/etc/os-release"), re.M)
    info["OS"] = osr.group(1) if osr else "unknown"

    def run(*cmd):
        try:
            return subprocess.run(cmd, capture_output=True, text=True, timeout=10).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    info["rustc"] = run("rustc", "--version") or "unknown"
    info["perftest"] = run("dpkg-query", "-W", "-f=${Version}", "perftest") or "unknown"
    info["iperf3"] = (run("iperf3", "--version").splitlines() or ["unknown"])[0]
    head = run("git", "rev-parse", "--short", "HEAD")
    if head:
        # `git diff --quiet` only reads; exit 1 means the tree differs.
        dirty = subprocess.run(["git", "diff", "--quiet", "HEAD", "--"]).returncode == 1
        info["source"] = f"commit {head}" + (" plus uncommitted changes" if dirty else "")
    return info


def headline(r):
    """Rows of the main table: (measure, softverbs, baseline, ratio, target)."""
    rows = []
    k64 = 65536
    tcp = r.tcp_gbs
    tcp_name = f"TCP loopback, iperf3 ({fmt(tcp)} GB/s)" if tcp else "TCP loopback (n/a)"
    for t in BW_TESTS:
        x = r.bw.get((t, k64))
        v = ratio(x, tcp)
        target = f">= {TARGET_BW_VS_TCP}x: {verdict(v, TARGET_BW_VS_TCP, True)}"
        rows.append((f"ib_{t}_bw 64 KiB, GB/s", fmt(x), tcp_name, v, target))
    for t in BW_TESTS:
        x = r.bw.get((t, MIB))
        v = ratio(x, r.memcpy)
        target = f">= {TARGET_BEST_BW_VS_MEMCPY}x: {verdict(v, TARGET_BEST_BW_VS_MEMCPY, True)}"
        rows.append(
            (
                f"ib_{t}_bw 1 MiB, GB/s",
                fmt(x),
                f"memcpy, 1 thread ({fmt(r.memcpy)} GB/s)",
                v,
                target,
            )
        )
    udp_busy = {s: r.udp.get(("busy", s)) for s in (2, 4096)}
    for t in LAT_TESTS:
        for s in (2, 4096):
            lat = r.lat.get((t, s))
            base = udp_busy[s]
            # READ latency is a whole round trip, the others half of one.
            factor = 2 if t == "read" else 1
            what = "RTT" if t == "read" else "half RTT"
            base_v = base[0] * factor if base else None
            target = ""
            v = ratio(lat[0] if lat else None, base_v)
            if s == 2:
                # The target is against the half round trip; READ's
                # baseline is the whole one.
                goal = TARGET_LAT_VS_UDP / factor
                target = f"<= {goal:g}x: {verdict(v, goal, False)}"
            rows.append(
                (
                    f"ib_{t}_lat {size_name(s)}, median us",
                    fmt(lat[0] if lat else None),
                    f"UDP ping-pong {what}, spinning ({fmt(base_v)} us)",
                    v,
                    target,
                )
            )
    for t in BW_TESTS:
        c = r.cpu.get((t, k64))
        rows.append(
            (
                f"ib_{t}_bw 64 KiB, CPU s/GB",
                fmt(c),
                f"TCP loopback, iperf3 ({fmt(r.tcp_cpu)} s/GB)",
                ratio(c, r.tcp_cpu),
                f"<= {TARGET_CPU_VS_TCP}x: {verdict(ratio(c, r.tcp_cpu), TARGET_CPU_VS_TCP, False)}",
            )
        )
    qp = r.qp_scale
    per_qp = float(qp["bytes_per_qp"]) if qp else None
    rows.append(
        (
            f"memory per idle RC QP ({qp.get('qps', '?')} QPs), bytes",
            fmt(per_qp),
            "target 64 KiB",
            ratio(per_qp, TARGET_QP_BYTES),
            f"<= 1.0x: {verdict(ratio(per_qp, TARGET_QP_BYTES), 1.0, False)}",
        )
    )
    rows.append(worst_trend_row(r))
    return rows


def worst_trend_row(r):
    """The headline row of the size furthest from its neighbours' trend."""
    worst = None
    for t in BW_TESTS:
        for s, v in r.collapse(t).items():
            dev = max(v, 1 / v)
            if worst is None or dev > worst[0]:
                worst = (dev, t, s, v)
    return (
        "worst size vs its neighbours' trend",
        f"{worst[3]:.2f}x (ib_{worst[1]}_bw {size_name(worst[2])})" if worst else "n/a",
        "its neighbours' trend",
        worst[0] if worst else None,
        f"within {TARGET_COLLAPSE}x: {verdict(worst[0] if worst else None, TARGET_COLLAPSE, False)}",
    )


def wire_headline(w):
    """The wire path's rows against issue 13's targets: (measure,
    softverbs, baseline, ratio, target)."""
    rows = []
    k64 = 65536
    tcp_name = f"TCP loopback, iperf3 ({fmt(w.tcp_gbs)} GB/s)"
    for t in BW_TESTS:
        v = ratio(w.bw.get((t, k64)), w.tcp_gbs)
        target = f">= {WIRE_BW_VS_TCP}x: {verdict(v, WIRE_BW_VS_TCP, True)}"
        rows.append((f"ib_{t}_bw 64 KiB, GB/s", fmt(w.bw.get((t, k64))), tcp_name, v, target))
    for t in BW_TESTS:
        c = w.cpu.get((t, k64))
        v = ratio(c, w.tcp_cpu)
        rows.append(
            (
                f"ib_{t}_bw 64 KiB, CPU s/GB",
                fmt(c),
                f"TCP loopback, iperf3 ({fmt(w.tcp_cpu)} s/GB)",
                v,
                f"<= {WIRE_CPU_VS_TCP}x: {verdict(v, WIRE_CPU_VS_TCP, False)}",
            )
        )
    for t in LAT_TESTS:
        lat = w.lat.get((t, 2))
        base = w.udp.get(("busy", 2))
        factor = 2 if t == "read" else 1
        base_v = base[0] * factor if base else None
        v = ratio(lat[0] if lat else None, base_v)
        what = "RTT" if t == "read" else "half RTT"
        # ib_write_lat's target is only "not bound to the scheduler tick":
        # reported, not judged here.
        target = "" if t == "write" else f"<= {WIRE_LAT_VS_UDP}x: {verdict(v, WIRE_LAT_VS_UDP, False)}"
        rows.append(
            (
                f"ib_{t}_lat 2 B, median us",
                fmt(lat[0] if lat else None),
                f"UDP ping-pong {what}, spinning ({fmt(base_v)} us)",
                v,
                target,
            )
        )
    rows.append(worst_trend_row(w))
    return rows


# What the profiles of the wire path showed, per kind of target it
# misses (the key is matched in the measure's name): docs/perf-profile.md
# has the measurements behind each.
WIRE_PROFILE = {
    "GB/s": """- Bandwidth: perftest's client is the busy side. A profile of it in
  wire `ib_write_bw` 64 KiB (2026-12-05) put 58% of its time in the
  kernel, of which the copy of each GSO batch into socket buffers 21% and
  the loopback delivery to the server's socket 10%; its own copy out of
  the application's buffer with the ICRC beside it about 13%; the engine's work
  per packet about 12%; and its two threads (the application's and the
  progress thread, which take the ACKs in by turns) handing the driver's
  lock back and forth about 8%. Each side pays two copies, the kernel's
  and its own, where TCP pays one; and a run sits on one of two levels
  about a factor of two apart, the machine's, TCP's too (\"Wire
  bandwidth: where the two levels come from\", \"The sweep at best of 2,
  and where the wire client's CPU goes\").""",
    "trend": """- Trend: the sizes off their neighbours' trend are runs on the other of
  the two levels than their neighbours' (message rates at small sizes
  sit on two levels as the large sizes' bandwidth does); the best of two
  runs per size does not always put neighbours on the same one (\"The
  sweep at best of 2, and where the wire client's CPU goes\").""",
    "lat": """- Latency: the UDP ping-pong makes one `recvfrom` and one `sendto` per
  half round trip and nothing else. Timed inside softverbs (wire
  `ib_send_lat`, medians), a half round trip spends about 3.3 us in its
  two system calls, the `recvmsg` that takes the peer's SEND with its
  ACK (1.1 us) and the GSO `sendmsg` of the reply with the ACK (about
  2.2 us), more than 1.5 times the ping-pong's whole half round trip; and
  about 2 us in user space, spread over some forty functions of 50 to
  100 ns each (the engine's work on the two packets arriving 0.9 us, the
  reply's build 0.9 us, polls and the posted receive 0.3 us). Less work
  per packet alone cannot meet the target: it needs the datagrams taken
  in without a system call as well (\"Where a wire half round trip
  goes\").""",
    "CPU": """- CPU per GB: both CPUs are busy for the whole transfer, perftest's
  client spinning on its CQ and taking the responses or ACKs in, the
  server's progress thread taking the data in or serving the READs and
  lingering, polling, between datagrams; so the CPU per GB is about two
  CPUs over the bandwidth, and it follows the bandwidth of the run
  (\"Where a wire half round trip goes\").""",
}


def wire_profile(missed):
    """What the profile showed for the wire targets in `missed` (their
    measure names), or nothing when none is missed."""
    points = [text for key, text in WIRE_PROFILE.items() if any(key in m for m in missed)]
    if not points:
        return ""
    return (
        "What the profiles showed where a target is missed\n"
        "([perf-profile.md](perf-profile.md)):\n\n" + "\n".join(points)
    )


def wire_section(w, header, sweep_header):
    """The doc's section on the wire path."""
    rows = [(a, b, c, f"{d:.2f}x" if d is not None else "n/a", e) for a, b, c, d, e in wire_headline(w)]
    verdicts = "\n".join(
        f"- {measure}: **{target.split(': ', 1)[1]}**" + (f" ({v:.2f}x)" if v is not None else "")
        for measure, _, _, v, target in wire_headline(w)
        if target
    )
    lat = "\n".join(
        "| " + " | ".join([f"ib_{t}_lat", size_name(s)] + ([fmt(x) for x in w.lat[t, s]] if (t, s) in w.lat else ["n/a"] * 3)) + " |"
        for t in LAT_TESTS
        for s in (2, 4096)
    )
    missing = ("\nNot measured on the wire path in this run: " + ", ".join(w.failed) + "\n") if w.failed else ""
    profile = wire_profile([m for m, _, _, _, target in wire_headline(w) if "missed" in target])
    if profile:
        verdicts += "\n\n" + profile
    return f"""## The wire path (issue 13)

The same perftest runs with `SOFTVERBS_SHM=0`: every operation travels as
RoCEv2 packets over UDP on loopback, through the sockets, as between two
hosts.

{md_table(header, rows)}

{verdicts}

Latency on the wire:

| test | size | median us | mean us | p99 us |
|---|---|---|---|---|
{lat}

Bandwidth sweep on the wire:

{md_table(sweep_header, sweep_rows(w))}
{missing}
"""



class RxeVm:
    """The side-by-side run against rxe in the VM (bench/rxe_vm.sh, which
    leaves RESULTS/rxe_vm/guest.out in sections written by
    bench/rxe_vm_guest.sh), or why it is missing."""

    def __init__(self, root):
        d = Path(root) / "rxe_vm"
        self.missing = None
        self.sections = {}  # (setup, test, role, run) -> (header fields, lines)
        self.info = {}  # key -> [values, in order]
        self.bw = {}  # (setup, test) -> MB/s (10^6 B/s)
        self.lat = {}  # (setup, test) -> (typical us, avg us, p99 us)
        self.resent = {}  # test -> (packets sent, resent) of softverbs' requester
        self.errors = {}  # (setup, test) -> why the run failed
        self.failed = []
        self.status = read(d / "status").split()
        self.load = read(d / "loadavg").split()
        boot = re.search(r"booted in (\d+) s \(kernel ([^,]+)", read(d / "vm.err"))
        self.boot = (boot.group(1), boot.group(2)) if boot else None
        self.tick = guest_tick_us(self.boot[1]) if self.boot else None
        if not d.is_dir():
            self.missing = f"bench/rxe_vm.sh did not run (no {d})"
            return
        text = read(d / "guest.out")
        current = None
        run = "1"
        done = False
        for line in text.splitlines():
            if line.startswith("@@bench-info "):
                key, _, value = line[len("@@bench-info "):].partition(" ")
                self.info.setdefault(key, []).append(value)
            elif line.startswith("@@bench-done"):
                done = True
            elif line.startswith("@@bench "):
                f = line.split()
                current = None
                if len(f) >= 4:
                    fields = dict(x.split("=", 1) for x in f[4:] if "=" in x)
                    role = f[3]
                    if not role.endswith("-stderr"):
                        run = fields.get("run", "1")
                    # A stderr section belongs to the run of the section before it.
                    current = (f[1], f[2], role, run)
                    self.sections[current] = (fields, [])
            elif current:
                self.sections[current][1].append(line)
        if read(d / "missing").strip():
            self.missing = read(d / "missing").strip()
        elif not self.sections:
            self.missing = "the VM run left no output (see " + str(d) + ")"
        elif not done:
            self.missing = "the guest stopped before its last program (see " + str(d / "guest.out") + ")"
        self.runs = {}  # (setup, test) -> every run's figure (MB/s, or median us)
        self.lat_runs = {}  # (setup, test) -> every run's (typical, avg, p99)
        bad = {}  # (setup, test) -> why each run that gave no figure failed
        for (setup, test, role, run), (fields, lines) in self.sections.items():
            if role != "client":
                continue
            out = "\n".join(lines)
            rc = fields.get("rc")
            srv_rc = self.sections.get((setup, test, "server", run), ({}, []))[0].get("rc")
            err = "\n".join(self.sections.get((setup, test, "client-stderr", run), ({}, []))[1])
            self.runs.setdefault((setup, test), [])
            if rc != "0" or srv_rc != "0":
                st = re.search(r"Failed status (\d+)", err)
                why = f"client exit {rc}, server exit {srv_rc}"
                if st:
                    why += f"; completion status {st.group(1)}" + (
                        " (IBV_WC_RETRY_EXC_ERR: transport retry counter exceeded)" if st.group(1) == "12" else "")
                bad.setdefault((setup, test), []).append(why)
                continue
            rows = perftest_rows(out, 9 if test.endswith("_lat") else 5)
            if rows and not test.endswith("_lat") and rows[-1][3] == 0:
                # perftest prints 0.00 where its clock calibration failed;
                # the server's row (the same run seen from the other end)
                # stands in when it has a figure.
                srv = perftest_rows("\n".join(self.sections.get((setup, test, "server", run), ({}, []))[1]), 5)
                rows = srv if srv and srv[-1][3] > 0 else []
            if not rows:
                # perftest prints "inf" when its clock calibration fails.
                why = "no result row" + (" (perftest's clock calibration failed)" if "Correlation" in err else "")
                bad.setdefault((setup, test), []).append(why)
                continue
            r = rows[-1]
            if test.endswith("_lat"):
                self.lat_runs.setdefault((setup, test), []).append((r[4], r[5], r[7]))
                self.runs[setup, test].append(r[4])
            else:
                self.runs[setup, test].append(r[3] * MIB / 1e6)
            if setup == "softverbs":
                m = re.search(r"(\d+) packets sent, (\d+) received, (\d+) resent", err)
                if m:
                    sent, resent = self.resent.get(test, (0, 0))
                    self.resent[test] = (sent + int(m.group(1)), resent + int(m.group(3)))
        # Each side's best run: the highest bandwidth, the lowest median.
        for key, vals in self.runs.items():
            if key in self.lat_runs:
                self.lat[key] = min(self.lat_runs[key])
            elif vals:
                self.bw[key] = max(vals)
        for key, whys in bad.items():
            setup, test = key
            if key in self.bw or key in self.lat:
                self.failed.append(f"{setup} {test}: {len(whys)} of {len(whys) + len(self.runs[key])} runs "
                                   f"gave no figure ({'; '.join(sorted(set(whys)))})")
            else:
                self.errors[key] = "; ".join(sorted(set(whys)))
                self.failed.append(f"{setup} {test} ({self.errors[key]})")

    def tick_bound(self, us):
        """Whether a median latency is half the guest's scheduler tick or
        more: a wait for the tick, not a cost per message."""
        return bool(self.tick) and us >= 0.5 * self.tick

    def spread(self, setup, test):
        """Every run's figure, when there were several."""
        vals = self.runs.get((setup, test), [])
        return ", ".join(fmt(x) for x in vals) if len(vals) > 1 else ""

    def netem(self, label):
        """(packets that left, sends dropped) over the devices of one
        netem phase ("rxe", "softverbs", "softverbs-gso")."""
        for v in self.info.get("netem", []):
            if v.split(" ", 1)[0] == label:
                sent = sum(int(x) for x in re.findall(r"sent=(\d+)", v))
                dropped = sum(int(x) for x in re.findall(r"dropped=(\d+)", v))
                return sent, dropped
        return None

    def rows(self):
        """(measure, rxe, softverbs, ratio, target) per program."""
        rows = []
        for t in RXE_VM_BW:
            a, b = self.bw.get(("rxe", f"{t}_bw")), self.bw.get(("softverbs", f"{t}_bw"))
            v = ratio(b, a)
            rows.append((f"ib_{t}_bw 64 KiB, MB/s", fmt(a), fmt(b), v,
                         f">= {RXE_BW_VS_RXE}x: {verdict(v, RXE_BW_VS_RXE, True)}"))
        for t in RXE_VM_LAT:
            a, b = self.lat.get(("rxe", f"{t}_lat")), self.lat.get(("softverbs", f"{t}_lat"))
            v = ratio(b[0] if b else None, a[0] if a else None)
            judged = verdict(v, RXE_LAT_VS_RXE, False)
            if v is not None and self.tick_bound(a[0]) and (self.tick_bound(b[0]) or judged == "met"):
                # rxe waited for the scheduler tick: no comparison of the two.
                judged = "inconclusive: rxe's figure is tick-bound"
            rows.append((f"ib_{t}_lat 2 B, median us", fmt(a[0] if a else None),
                         fmt(b[0] if b else None), v,
                         f"<= {RXE_LAT_VS_RXE}x: {judged}"))
        return rows

    def passthrough_rows(self):
        """(measure, rxe direct, pass-through, ratio, hooked, ratio) for
        the pass-through device against rxe's own provider."""
        rows = []
        for test, label, get in (("write_bw", "ib_write_bw 64 KiB, MB/s", lambda k: self.bw.get(k)),
                                 ("send_lat", "ib_send_lat 2 B, median us",
                                  lambda k: self.lat.get(k, (None,))[0])):
            d, p, h = (get((s, test)) for s in ("rxe", "passthrough", "passthrough_hooked"))
            rows.append((label, fmt(d), fmt(p), ratio(p, d), fmt(h), ratio(h, d)))
        return rows

    def loss_rows(self):
        """Per bandwidth test: rxe's and softverbs' throughput under loss as
        a fraction of their own lossless throughput, and the target
        (softverbs keeps at least rxe's fraction)."""
        rows = []
        for t in RXE_VM_BW:
            rl, rx = self.bw.get(("rxe", f"{t}_bw_ref")), self.bw.get(("rxe", f"{t}_bw_loss1"))
            sl, sx = self.bw.get(("softverbs", f"{t}_bw_nogso")), self.bw.get(("softverbs", f"{t}_bw_loss1"))
            gl, gx = self.bw.get(("softverbs", f"{t}_bw_ref")), self.bw.get(("softverbs", f"{t}_bw_loss1_gso"))
            rf, sf, gf = ratio(rx, rl), ratio(sx, sl), ratio(gx, gl)
            v = ratio(sf, rf)
            target = f">= rxe's: {verdict(v, 1.0, True)}"
            sv_err = self.errors.get(("softverbs", f"{t}_bw_loss1"))
            if sx is None and sv_err and rx is not None:
                target = f">= rxe's: missed: softverbs' run failed ({sv_err})"

            def kept(x, base, err):
                if x is None and err:
                    return "failed"
                return f"{fmt(x)} / {fmt(base)} = {fmt(ratio(x, base), 2)}"

            rows.append((
                f"ib_{t}_bw 64 KiB",
                kept(rx, rl, self.errors.get(("rxe", f"{t}_bw_loss1"))),
                kept(sx, sl, sv_err),
                kept(gx, gl, self.errors.get(("softverbs", f"{t}_bw_loss1_gso"))),
                v,
                target,
            ))
        return rows


def guest_tick_us(kernel):
    """The scheduler tick of the VM's kernel in microseconds, from its
    config in /boot (CONFIG_HZ), or None."""
    hz = re.search(r"^CONFIG_HZ=(\d+)$", read(f"/boot/config-{kernel}"), re.M) if kernel else None
    return 1e6 / int(hz.group(1)) if hz else None


def rxe_vm_text(v):
    """The printed summary of the comparison against rxe."""
    if v.missing and not v.bw and not v.lat:
        return f"against rxe in a VM: not measured: {v.missing}"
    out = ["against rxe in a VM (QEMU TCG, 2 vCPUs: emulated, see docs/perf.md):"]
    out.append(text_table(["measure", "rxe", "softverbs", "softverbs/rxe", "target"],
                          [(a, b, c, f"{d:.2f}x" if d is not None else "n/a", e) for a, b, c, d, e in v.rows()]))
    out.append("\nunder 1% loss, throughput kept (lossy / lossless MB/s):")
    out.append(text_table(["test", "rxe", "softverbs, per packet", "softverbs, GSO", "softverbs/rxe", "target"],
                          [(a, b, c, d, f"{e:.2f}x" if e is not None else "n/a", f) for a, b, c, d, e, f in v.loss_rows()]))
    out.append("\npass-through to rxe (sv_xa, sv_xb) against rxe's provider directly:")
    out.append(text_table(["measure", "rxe", "pass-through", "ratio", "hooked", "ratio"],
                          [(a, b, c, f"{d:.2f}x" if d is not None else "n/a", e,
                            f"{f:.2f}x" if f is not None else "n/a") for a, b, c, d, e, f in v.passthrough_rows()]))
    if v.missing:
        out.append(f"incomplete: {v.missing}")
    if v.failed:
        out.append("not measured in the VM: " + ", ".join(v.failed))
    return "\n".join(out)


def rxe_vm_section(v):
    """The doc's section on the comparison against rxe."""
    head = """## Against kernel rxe in a VM (issue 13)

The same perftest programs, side by side in one VM session
(`bench/rxe_vm.sh`, which boots the interop VM of `make interop`,
tests/interop/README.md, and runs `bench/rxe_vm_guest.sh` in it): rxe
against rxe (`rxe_xa`, `rxe_xb` on the two ends of a veth pair) and
softverbs against softverbs (preload mode, one network namespace per end
of another veth pair, `SOFTVERBS_SHM=0`: the wire path, each namespace
with its own daemon). Both at path MTU 1024 (`-m 1024`, veth MTU 1500),
RC, GID index of the IPv4 address, IPv4; for each program rxe runs first,
then softverbs.

**Caveat: the VM is emulated.** QEMU with TCG (every guest instruction
translated in software, no KVM), 2 vCPUs, 1.5 GiB, Debian's kernel, on the
machine above and sharing its cores with whatever else runs there. The
figures are a hundred times below the host's and compare the two
implementations' code paths under emulation (rxe in the guest's kernel,
softverbs in its user space with its progress threads and daemon), not
what either does on real hardware.
"""
    if v.missing and not v.bw and not v.lat:
        return head + f"\n**Not measured: {v.missing}.**\n\n"
    st = v.status
    run = []
    if v.boot:
        run.append(f"kernel {v.boot[1]}, booted in {v.boot[0]} s")
    if len(st) >= 2:
        run.append(f"the whole VM session took {st[1]} s")
    setup = dict(re.findall(r"(\w+)=(\S+)", (v.info.get("setup") or [""])[0]))
    if setup:
        run.append(f"guest setup {setup.get('seconds', '?')} s, {setup.get('cpus', '?')} vCPUs")
    if len(v.load) >= 2:
        run.append(f"host load average {v.load[0]} before, {v.load[1]} after")
    rows = [(a, b, c, f"{d:.2f}x" if d is not None else "n/a", e) for a, b, c, d, e in v.rows()]
    spread_rows = [
        (f"ib_{t}", v.spread("rxe", t) or "n/a", v.spread("softverbs", t) or "n/a")
        for t in [f"{x}_bw" for x in RXE_VM_BW] + [f"{x}_lat" for x in RXE_VM_LAT]
    ]
    verdicts = "\n".join(
        f"- {m}: **{t.split(': ', 1)[1]}**" + (f" ({d:.2f}x)" if d is not None else "")
        for m, _, _, d, t in v.rows()
    )
    kernel = v.boot[1] if v.boot else setup.get("kernel")
    tick = v.tick
    bound = [
        f"{who} `ib_{t}_lat` ({fmt(v.lat[who, f'{t}_lat'][0])} us)"
        for t in RXE_VM_LAT
        for who in ("rxe", "softverbs")
        if (who, f"{t}_lat") in v.lat and v.tick_bound(v.lat[who, f"{t}_lat"][0])
    ]
    if bound:
        verdicts += f"""

**Tick-bound latencies:** {", ".join(bound)}: half the guest's scheduler
tick ({fmt(tick)} us, CONFIG_HZ of {kernel}) or more. perftest's two
processes both spin, one on each of the VM's 2 vCPUs, so anything else
that must run for a message to get through waits for the next tick:
softverbs' progress thread where no verb call takes the packets in
(`ib_write_lat` polls memory, not the CQ; the responder of `ib_read_lat`
makes no verb call at all), and for rxe presumably its packet processing
once the kernel defers softirqs to ksoftirqd (it does when they overrun
their time budget, which emulation makes likely; not traced here). Such
a figure says which side needed a thread scheduled in that run, and
varies with the host's load from one session to the next (in a session
where nothing waits for the tick, rxe's `ib_send_lat` is tens of
microseconds); it is not a cost per message. A comparison where rxe's figure is tick-bound is
marked inconclusive rather than met."""
    loss = [(a, b, c, d, f"{e:.2f}x" if e is not None else "n/a", f) for a, b, c, d, e, f in v.loss_rows()]
    loss_verdicts = "\n".join(
        f"- {a} under 1% loss: **{f.split(': ', 1)[1]}**" + (f" (softverbs keeps {e:.2f}x rxe's fraction)" if e is not None else "")
        for a, _, _, _, e, f in v.loss_rows()
    )
    sizes = dict(re.findall(r"(\w+)=(\S+)", (v.info.get("sizes") or [""])[0]))
    loss_iters = sizes.get("loss_iters", "?")
    drops = []
    for label, name in (("rxe", "rxe"), ("softverbs", "softverbs, per packet"),
                        ("softverbs-gso", "softverbs, GSO")):
        n = v.netem(label)
        if n and n[0]:
            unit = "sends (of up to 64 packets)" if label == "softverbs-gso" else "packets"
            drops.append(f"{name}: {n[1]:,} {unit} dropped, {n[0]:,} packets passed"
                         + ("" if label == "softverbs-gso" else f" ({100 * n[1] / (n[0] + n[1]):.2f}%)"))
    resent = ", ".join(
        f"{t.replace('_loss1', '').replace('_gso', ' (GSO)')}: {r:,} of {s:,}"
        for t, (s, r) in sorted(v.resent.items()) if "loss1" in t
    )
    lossless_resent = ", ".join(
        f"{t}: {r:,}" for t, (s, r) in sorted(v.resent.items()) if "loss1" not in t and r
    )
    rxe_counters = "; ".join(v.info.get("rxe-counters", []))
    udp = "; ".join(
        f"after {x.split(' ', 1)[0]}: " + (
            " ".join(f for f in x.split()[1:] if not f.endswith("=0")) or "none")
        for x in v.info.get("udp-drops", [])
    )
    msgs = (v.info.get("rxe-kernel-messages") or [""])[0].strip()
    notes = f"""
Run: {"; ".join(run) or "n/a"}.

{md_table(["measure", "rxe", "softverbs", "softverbs/rxe", "target"], rows)}

{verdicts}

Every run (the table shows each side's best: highest bandwidth, lowest
median):

{md_table(["program", "rxe", "softverbs"], spread_rows)}

Bandwidth in MB/s (10^6 bytes per second: perftest's MiB/s converted) of
`ib_{{write,read,send}}_bw -m 1024 -s 65536 -n {sizes.get("bw_iters", "?")}` (the client's
figure, or the server's where perftest's clock calibration failed in the
client and it printed 0.00); latency the median (`t_typical`) of `ib_{{send,read,write}}_lat -m
1024 -s 2 -n {sizes.get("lat_iters", "?")}` (half a round trip for send and write, the whole READ
round trip for read: the same definition on both sides). Each lossless
program ran {sizes.get("repeat", "?")} times, rxe then softverbs each time; a run perftest could
not time (its clock calibration sometimes fails under emulation: "inf")
counts as no figure.

### Under 1% loss

{md_table(["test", "rxe: lossy / lossless MB/s = kept", "softverbs, each packet alone", "softverbs with GSO (bursty loss)", "softverbs/rxe", "target"], loss)}

{loss_verdicts}

`tc qdisc add dev DEV root netem loss 1% limit 100000` on both ends of
each veth (both directions: data, ACKs and READ responses alike; the
queue limit raised so that nothing but the random loss drops). netem
decides per skb, and softverbs sends up to 64 packets in one skb with UDP
segmentation offload (GSO), which stays whole through the qdisc: 1% of
those would be 1% of *bursts* lost, where rxe, which sends every packet
as its own skb, loses 1% of its packets one at a time. So the judged
comparison has softverbs send each packet alone too (transmit checksum
offload off on its veths, so the kernel refuses GSO and softverbs falls
back to one datagram per packet), against its own lossless throughput
sent the same way; the GSO column is the default configuration under the
same netem, for the record. Every figure here is one run of
`-n {loss_iters}` (64 KiB messages), each lossless reference measured the
same way in the same session just before the lossy runs.
Dropped by netem: {"; ".join(drops) or "n/a"}.
Packets softverbs' requester sent again (SOFTVERBS_STATS=1, resent of
sent): {resent or "n/a"}{f"; without loss: {lossless_resent}" if lossless_resent else ""}.
Datagrams the kernel dropped in softverbs' namespaces for want of buffer
room or as errors (UdpRcvbufErrors, UdpInErrors, UdpSndbufErrors,
cumulative): {udp or "n/a"}.
rxe's counters that moved (requester `rxe_xb`, responder `rxe_xa`):
{rxe_counters or "n/a"}.{f" rxe's kernel messages during the session: {msgs}" if msgs else ""}
"""
    pt = [(a, b, c, f"{d:.2f}x" if d is not None else "n/a", e, f"{f:.2f}x" if f is not None else "n/a")
          for a, b, c, d, e, f in v.passthrough_rows()]
    pt_spread = [
        (f"ib_{t}", v.spread("passthrough", t) or "n/a", v.spread("passthrough_hooked", t) or "n/a")
        for t in ("write_bw", "send_lat")
    ]
    notes += f"""
### Pass-through to rxe (issue 14)

The rxe pair of the table above, once more through softverbs'
pass-through devices (`SOFTVERBS_DEVICES="sv_xa=passthrough:rxe_xa
sv_xb=passthrough:rxe_xb"`, preload mode; docs/passthrough.md), in the
same loop as each rxe run: as configured, with no rule and no trace (the
application gets rxe's own context, untouched), and hooked (a fault rule
that never fires, `post_send qp=0 errno=EIO`, so every verb passes
through softverbs' ops on its way to rxe's). Ratios are pass-through over
rxe's provider used directly: 1.00x is no cost.

{md_table(["measure", "rxe directly", "pass-through", "ratio", "pass-through, hooked", "ratio"], pt)}

Every run:

{md_table(["program", "pass-through", "hooked"], pt_spread)}
"""
    tail = ""
    if v.missing:
        tail += f"\nIncomplete: {v.missing}.\n"
    if v.failed:
        tail += "\nNot measured in the VM: " + ", ".join(v.failed) + ".\n"
    return head + notes + tail + "\n"

def md_table(header, rows):
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(out)


def text_table(header, rows):
    cells = [header] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def sweep_rows(r):
    rows = []
    for s in SIZES:
        row = [size_name(s)]
        for t in BW_TESTS:
            v = r.bw.get((t, s))
            x = ratio(v, r.tcp_gbs)
            row.append(f"{fmt(v)} ({fmt(x, 2)}x)" if v else "n/a")
        for t in BW_TESTS:
            row.append(fmt(r.cpu.get((t, s))))
        for t in BW_TESTS:
            c = r.collapse(t).get(s)
            row.append(f"{c:.2f}" if c else "n/a")
        rows.append(row)
    return rows


def plot(r, path, title):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, ax2) = plt.subplots(2, 1, figsize=(10, 10), sharex=True, height_ratios=[3, 2])
    styles = {"write": "o-", "read": "s-", "send": "^-"}
    for t in BW_TESTS:
        pts = [(s, r.bw[t, s]) for s in SIZES if (t, s) in r.bw]
        if pts:
            ax.plot(*zip(*pts), styles[t], label=f"softverbs ib_{t}_bw", linewidth=2, markersize=5)
        pts = [(s, r.cpu[t, s]) for s in SIZES if (t, s) in r.cpu and r.cpu[t, s] > 0]
        if pts:
            ax2.plot(*zip(*pts), styles[t], label=f"softverbs ib_{t}_bw", linewidth=2, markersize=5)
    if r.tcp_gbs:
        ax.axhline(r.tcp_gbs, color="tab:red", linestyle="--", linewidth=2,
                   label=f"TCP loopback, iperf3: {r.tcp_gbs:.2f} GB/s")
    if r.memcpy:
        ax.axhline(r.memcpy, color="tab:purple", linestyle=":", linewidth=2,
                   label=f"memcpy, 1 thread: {r.memcpy:.1f} GB/s")
    if r.tcp_cpu:
        ax2.axhline(r.tcp_cpu, color="tab:red", linestyle="--", linewidth=2,
                    label=f"TCP loopback, iperf3: {r.tcp_cpu:.2f} s/GB")
    for a in (ax, ax2):
        a.set_xscale("log", base=2)
        a.set_yscale("log")
        a.grid(True, which="major", alpha=0.4)
        a.legend(loc="best", fontsize=9)
    ax.set_ylabel("bandwidth, GB/s (10^9 B/s), log scale")
    ax.set_title(title, fontsize=11)
    ax2.set_ylabel("CPU s per GB moved (both processes)")
    ax2.set_xlabel("message size")
    # Every size measured gets its label, turned so neighbours do not
    # overlap.
    ax2.set_xticks(SIZES)
    ax2.set_xticklabels([size_name(s) for s in SIZES], rotation=45, ha="right")
    ax2.minorticks_off()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def engine_rows(r):
    rows = []
    for e in r.engine:
        rows.append(
            [
                "WRITE" if e["op"] == "write" else "SEND",
                size_name(int(e["payload"])),
                fmt(float(e["sender_pps"]) / 1e6),
                fmt(float(e["receiver_pps"]) / 1e6),
                e["sender_ns"],
                e["receiver_ns"],
            ]
        )
    return rows


def checked_rows(r):
    return [
        [
            c["op"],
            size_name(int(c["bytes"])),
            c["plain_ns"],
            c["guarded_ns"],
            fmt(float(c["guarded_ns"]) / float(c["plain_ns"]), 2) + "x",
            c["kernel_ns"],
            fmt(float(c["kernel_ns"]) / float(c["plain_ns"]), 2) + "x",
        ]
        for c in r.checked
    ]


def where_time_goes(r):
    """Compares the engine's cost per packet with softverbs' CPU time per
    message end to end, for 64-byte WRITEs (one packet each): how much of
    it is the engine, the rest being system calls, wakeups and the
    provider."""
    eng = next((e for e in r.engine if e["op"] == "write" and e["payload"] == "64"), None)
    cpu = r.cpu.get(("write", 64))
    if not eng or not cpu:
        return None
    e2e_ns = cpu * 64 / GB * 1e9
    engine_ns = float(eng["sender_ns"]) + float(eng["receiver_ns"])
    return e2e_ns, engine_ns


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", required=True)
    ap.add_argument("--doc", required=True)
    ap.add_argument("--plot", required=True)
    ap.add_argument("--elapsed", type=int, default=0)
    ap.add_argument("--netns", default="")
    args = ap.parse_args()

    r = Results(args.results)
    w = Results(args.results, "perftest_wire")
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    m = machine()
    load = read(Path(args.results) / "loadavg").split()
    header = ["measure", "softverbs", "baseline", "ratio", "target"]
    rows = [(a, b, c, f"{d:.2f}x" if d is not None else "n/a", e) for a, b, c, d, e in headline(r)]

    print(text_table(header, rows))
    print("\nthe wire path (SOFTVERBS_SHM=0):")
    print(text_table(header, [(a, b, c, f"{d:.2f}x" if d is not None else "n/a", e) for a, b, c, d, e in wire_headline(w)]))
    if r.failed:
        print("\nnot measured (see " + args.results + "): " + ", ".join(r.failed))
    vm = RxeVm(args.results)
    print("\n" + rxe_vm_text(vm))

    title = f"softverbs perftest sweep, loopback - {m['CPU']}, {m['logical CPUs']} CPUs - {now}"
    plot(r, args.plot, title)

    sweep_header = ["size"] + [f"{t} GB/s (x TCP)" for t in BW_TESTS] + \
        [f"{t} CPU s/GB" for t in BW_TESTS] + [f"{t} vs trend" for t in BW_TESTS]
    lat_rows = []
    for t in LAT_TESTS:
        for s in (2, 4096):
            v = r.lat.get((t, s))
            lat_rows.append([f"ib_{t}_lat", size_name(s)] + ([fmt(x) for x in v] if v else ["n/a"] * 3))
    for mode in ("busy", "block"):
        for s in (2, 4096):
            v = r.udp.get((mode, s))
            name = "UDP ping-pong, " + ("spinning" if mode == "busy" else "blocking")
            lat_rows.append([name, size_name(s)] + ([fmt(x) for x in v] if v else ["n/a"] * 3))

    qp = r.qp_scale
    pc, ps = r.pairs["cli"], r.pairs["srv"]
    scale = []
    if qp:
        scale.append(
            f"- **{int(qp['qps']):,} RC QPs in one process** (RESET, {qp['send_wr']} send and "
            f"{qp['recv_wr']} receive WRs, one SGE; one PD, one CQ): resident set "
            f"{int(qp['rss_before_kib']):,} KiB before, {int(qp['rss_after_kib']):,} KiB after, "
            f"**{fmt(float(qp['bytes_per_qp']))} bytes per QP** "
            f"(target 64 KiB: {verdict(float(qp['bytes_per_qp']) / TARGET_QP_BYTES, 1.0, False)}); "
            f"created in {qp['create_s']} s, destroyed in {qp['destroy_s']} s."
        )
    else:
        scale.append("- 10,000 RC QPs in one process: not measured (see target/bench/scale/qp_scale).")
    if pc and ps:
        per_conn = [
            (int(p["rss_connected_kib"]) - int(p["rss_base_kib"])) * 1024 / int(p["pairs"]) for p in (pc, ps)
        ]
        cpu = " and ".join(f"{c:.2f}" for c in r.pairs_cpu if c is not None)
        scale.append(
            f"- **{int(pc['pairs']):,} RC QP pairs between two processes**, {pc['rounds']} rounds of "
            f"{pc['size']}-byte SENDs on every QP, each answered by the server: set up (create, "
            f"exchange over TCP, connect) in {pc['setup_s']} s (client) / {ps['setup_s']} s (server); "
            f"exchange of {2 * int(pc['pairs']) * int(pc['rounds']):,} messages in **{pc['exchange_s']} s, "
            f"{fmt(float(pc['msgs_per_s']))} messages/s**; resident set per connected QP "
            f"{fmt(per_conn[0])} / {fmt(per_conn[1])} bytes, peak {int(pc['rss_peak_kib']):,} / "
            f"{int(ps['rss_peak_kib']):,} KiB (client / server); CPU {cpu} s."
        )
    else:
        scale.append("- 1,000 RC QP pairs: not measured (see target/bench/scale/qp_pairs.*).")

    split = where_time_goes(r)
    misses = []
    for measure, _, base, v, target in headline(r):
        if "missed" in target:
            misses.append(f"- {measure}: {target.split(': ', 1)[1]} (ratio {v:.2f}x against {base}).")
    outside = [
        f"ib_{t}_bw {size_name(sz)} ({v:.2f}x)"
        for t in BW_TESTS
        for sz, v in r.collapse(t).items()
        if not 1 / TARGET_COLLAPSE <= v <= TARGET_COLLAPSE
    ]
    if outside:
        misses.append(
            "- Sizes off their neighbours' trend by more than 2x (a single run per size on a "
            "shared machine, so check the load average above before reading much into one): "
            + ", ".join(outside) + "."
        )
    for t in LAT_TESTS:
        for sz in (2, 4096):
            lat, base = r.lat.get((t, sz)), r.udp.get(("busy", sz))
            if lat and base and lat[0] > 10 * base[0] * (2 if t == "read" else 1):
                why = (
                    " perftest's write latency test waits by polling memory, not the CQ, so "
                    "nothing in the process calls into softverbs and only the provider's "
                    "progress thread can take the packets. When both processes spin on a machine "
                    "with no idle CPU, that thread wakes on a CPU held by a spinning thread"
                    + scheduler_note()
                    + " With a CPU free per process the wake-up takes microseconds."
                    if t == "write"
                    else ""
                )
                misses.append(
                    f"- Anomaly: `ib_{t}_lat` at {size_name(sz)} has a median of {fmt(lat[0])} us "
                    f"while its fastest iteration took {fmt(r.lat_min[t, sz])} us.{why}"
                )
    if split:
        e2e, eng = split
        misses.append(
            f"- Where the time goes: a 64-byte `ib_write_bw` message costs {fmt(e2e)} ns of CPU "
            f"(both processes), of which the engine's own work, sender plus receiver, is "
            f"{fmt(eng)} ns ({100 * eng / e2e:.1f}%) by the engine-alone benchmark below. On the "
            "same-host path the rest is the kernel: a large message is one `process_vm_writev`, "
            "about half of it the copy and half the pinning of the target's pages; see "
            "[perf-profile.md](perf-profile.md), \"The same-host path\"."
        )

    doc = f"""# softverbs performance

Generated by `make bench` (bench/run.sh, then bench/report.py) on {now}, in
{args.elapsed} s. Raw outputs: `target/bench/`. Do not edit by hand: the
next `make bench` rewrites this file and `docs/perf-bandwidth.png`.

## The machine

| | |
|---|---|
""" + "\n".join(f"| {k} | {v} |" for k, v in m.items()) + f"""
| load average (1 min) at start / end | {load[0] if load else 'n/a'} / {load[1] if len(load) > 1 else 'n/a'} |
| network namespace | {"own (only loopback)" if args.netns not in ("", "none") else "host's"} |

Everything ran on this one machine over loopback, softverbs0 on 127.0.0.1.
A perftest run is two processes (server and client), each with softverbs'
progress thread beside its own: on {m['logical CPUs']} logical CPUs they
share the cores, as iperf3's two processes do. Other work on the machine
during the run shows in the load average above.

## Headline: softverbs against the machine's own baselines

{md_table(header, rows)}

Ratios are softverbs / baseline: above 1 is faster for bandwidth, slower
for latency, costlier for CPU and memory. Server and client are two
processes on one host, so perftest runs on the same-host path (the
default; architecture.md, "Same host"): no packets, the requester moves
the data with cross-memory attach.

## Targets (issue 10, same host)

""" + "\n".join(
        f"- {measure}: **{target.split(': ', 1)[1]}**" + (f" ({v:.2f}x)" if v is not None else "")
        for measure, _, _, v, target in headline(r)
        if target
    ) + """

""" + ("### Missed targets\n\n" + "\n".join(misses) + "\n\n" if misses else "") + f"""## Bandwidth sweep, 2 B to 1 MiB

![bandwidth and CPU per GB against message size](perf-bandwidth.png)

{md_table(sweep_header, sweep_rows(r))}

Each size the best of 2 perftest runs (highest bandwidth, with its CPU
seconds), RC, one QP, perftest's defaults otherwise (128
outstanding WRs, completion every 100) but for `-N` (no peak bandwidth,
whose quadratic computation would count as CPU): each size moves 256 MiB,
at most 50,000 messages, and 64 KiB, the targets' size, 2 GiB, best of 3
runs: on this kind of 2-CPU
machine a run's bandwidth sits on one of two levels about a factor of two
apart, TCP's too (perf-profile.md, "Wire bandwidth: where the two levels
come from"), and a single run per size set sizes on the slow level beside
neighbours on the fast one. "x TCP" is the ratio to loopback TCP (iperf3, one stream,
5 s, best of 3: {fmt(r.tcp_gbs)} GB/s). CPU s/GB is the user + system time of both
perftest processes (GNU time), less that of a 5-message run of the same
test (the setup: device, memory registration, connection), divided by the
bytes moved; iperf3's is {fmt(r.tcp_cpu)} s/GB. "vs trend" is the size's
bandwidth over the geometric mean of its two neighbours' (extrapolated at
the ends): the target is every size within 0.5 to 2.

{wire_section(w, header, sweep_header)}
{rxe_vm_section(vm)}## Latency

| test | size | median us | mean us | p99 us |
|---|---|---|---|---|
""" + "\n".join("| " + " | ".join(row) + " |" for row in lat_rows) + f"""

perftest's latency tests, 2,000 iterations: `t_typical` (median), `t_avg`
and the 99th percentile; send and write report half a round trip, read the
whole READ round trip. The UDP ping-pong (crates/baselines,
`udp-pingpong`) is two processes echoing one datagram of the same size,
100,000 round trips, half of each reported; "spinning" polls non-blocking
sockets as perftest polls its CQ and is the baseline in the headline.

## Scale

""" + "\n".join(scale) + f"""

Both are C programs against libibverbs (bench/c/) run under `softverbs
run`, so they go through the real provider. Resident set from
/proc/self/status (VmRSS, VmHWM).

## The engine alone

| op | payload | sender Mpps | receiver Mpps | sender ns/pkt | receiver ns/pkt |
|---|---|---|---|---|---|
""" + "\n".join("| " + " | ".join(row) + " |" for row in engine_rows(r)) + """

`cargo bench -p softverbs-engine` (crates/engine/benches/engine.rs): two
engines joined in memory, no sockets, RC one-packet WRITEs and SENDs in
batches of 128, each side timed on its own, on one core each (packets per
second per core). The sender posts, builds packets and takes ACKs; the
receiver takes packets, places data and builds ACKs.

## Checked access to registered memory

| op | bytes | plain ns | guarded ns | ratio | kernel ns | ratio |
|---|---|---|---|---|---|---|
""" + "\n".join("| " + " | ".join(row) + " |" for row in checked_rows(r)) + """

An application may unmap a buffer it registered; a NIC has the pages
pinned, a software provider does not. So that a peer's WRITE or READ there
is an error completion instead of a crash, softverbs reaches registered
memory in one of two ways (provider-shim/src/process_memory.rs):
*guarded*, the default, copies with `rep movsb` and does atomics with
locked instructions whose faults a SIGSEGV/SIGBUS handler turns into an
error (as the kernel's exception tables do; other faults go on to the
application's own handler); *kernel*, used when that handler is displaced
and by the same-host path, goes through `process_vm_writev`/`readv` and
proves a word writable with a `FUTEX_WAKE_OP` adding 0 before an atomic.
`target/release/examples/checked_memory` times one access of each kind
against a plain copy or atomic, best of 5 rounds.

## The baselines

- TCP: `iperf3 -c 127.0.0.1 -t 5`, one stream, default 128 KiB writes,
  best of 3 runs (as softverbs' 64 KiB points).
- UDP half round trip: `target/release/udp-pingpong --size N [--busy]`.
- memcpy: `target/release/memcpy-bw --mib 256`, best of 10 copies of a
  256 MiB buffer (bytes copied per second).

""" + (
        "Not measured in this run: " + ", ".join(r.failed) + "\n" if r.failed else ""
    )
    Path(args.doc).write_text(doc)
    print(f"\nwrote {args.doc} and {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
