#!/usr/bin/env python3
"""Checks a softverbs capture (SOFTVERBS_PCAP, softverbs daemon --pcap)
with scapy, an implementation nobody here wrote. Used by capture.sh.

    capture_check.py icrc FILE
        every packet is IPv4 or IPv6 / UDP to 4791 / BTH; scapy's RoCE
        layer (scapy.contrib.roce) computes the same ICRC over the captured
        IP and UDP headers as the packet carries; the UDP checksum is
        non-zero and the one scapy computes, and so is the IPv4 header
        checksum.
    capture_check.py covered DAEMON FILE...
        every packet in the daemon's capture is in one of the processes'
        captures (same addresses, ports and RoCE bytes).

Prints one line saying what was checked, or the first failures, and exits
non-zero on failure.
"""

import sys

from scapy.contrib.roce import BTH
from scapy.layers.inet import IP, UDP, in4_chksum
from scapy.layers.inet6 import IPv6, in6_chksum
from scapy.utils import RawPcapReader, checksum

ROCE_PORT = 4791
LINKTYPE_RAW = 101
MAX_SHOWN = 5


def datagrams(path):
    """The raw IP datagrams of a LINKTYPE_RAW capture, as scapy layers."""
    reader = RawPcapReader(path)
    if reader.linktype != LINKTYPE_RAW:
        raise SystemExit(f"{path}: link type {reader.linktype}, not raw IP ({LINKTYPE_RAW})")
    for data, _meta in reader:
        yield IPv6(data) if data[0] >> 4 == 6 else IP(data)


def problems(pkt):
    """What is wrong with one captured packet, by scapy's reckoning."""
    if UDP not in pkt or pkt[UDP].dport != ROCE_PORT or BTH not in pkt:
        return ["not UDP to 4791 carrying a BTH"]
    found = []
    raw = bytes(pkt)
    if pkt[BTH].compute_icrc(None) != raw[-4:]:
        found.append("ICRC differs from scapy's")
    udp = bytearray(bytes(pkt[UDP]))
    udp[6:8] = b"\0\0"
    ip = pkt[IP] if IP in pkt else pkt[IPv6]
    want = in4_chksum(17, ip, bytes(udp)) if IP in pkt else in6_chksum(17, ip, bytes(udp))
    if pkt[UDP].chksum == 0:
        found.append("UDP checksum zero")
    elif pkt[UDP].chksum != (want or 0xFFFF):
        found.append(f"UDP checksum {pkt[UDP].chksum:#06x}, scapy computes {want:#06x}")
    if IP in pkt and checksum(raw[: pkt[IP].ihl * 4]) != 0:
        found.append("IPv4 header checksum wrong")
    return found


def check_icrc(path):
    total = v4 = numbered = 0
    bad = []
    for pkt in datagrams(path):
        total += 1
        if IP in pkt:
            v4 += 1
            numbered += pkt[IP].id != 0
        for p in problems(pkt):
            bad.append(f"packet {total}: {p}")
    if total == 0:
        print("no packets")
        return False
    if bad:
        print(f"{len(bad)} problems in {total} packets: " + "; ".join(bad[:MAX_SHOWN]))
        return False
    ids = f" ({numbered} of {v4} IPv4 packets with a non-zero identification)" if v4 else ""
    checksums = "UDP and IPv4 header checksums" if v4 else "UDP checksums"
    print(f"{total} packets, every ICRC valid per scapy, {checksums} right{ids}")
    return True


def key(pkt):
    """A datagram as both ends of a capture see it: addresses, ports,
    traffic class (IPv4 TOS, IPv6 traffic class) and payload."""
    ip = pkt[IP] if IP in pkt else pkt[IPv6]
    udp = pkt[UDP]
    tclass = ip.tos if IP in pkt else ip.tc
    return (ip.src, ip.dst, udp.sport, udp.dport, tclass, bytes(udp.payload))


def check_covered(daemon, processes):
    seen = set()
    for path in processes:
        seen.update(key(p) for p in datagrams(path))
    total = 0
    missing = []
    for pkt in datagrams(daemon):
        total += 1
        if key(pkt) not in seen:
            missing.append(total)
    if total == 0:
        print("the daemon captured no packets")
        return False
    if missing:
        shown = ", ".join(map(str, missing[:MAX_SHOWN]))
        print(f"{len(missing)} of {total} packets the daemon captured are in no process's capture (packets {shown})")
        return False
    print(f"all {total} packets the daemon captured are in the processes' captures")
    return True


def main(argv):
    if len(argv) >= 2 and argv[0] == "icrc":
        return check_icrc(argv[1])
    if len(argv) >= 3 and argv[0] == "covered":
        return check_covered(argv[1], argv[2:])
    raise SystemExit(__doc__)


if __name__ == "__main__":
    sys.exit(0 if main(sys.argv[1:]) else 1)
