#!/usr/bin/env python3
"""Generate RoCEv2 test vectors with scapy, an implementation nobody here wrote.

Every line of the output is one complete IP packet (IPv4 or IPv6 / UDP /
BTH / extension headers / payload / pad / ICRC) built by scapy, whose
``scapy.contrib.roce.BTH`` layer computes the ICRC. Next to the packet the
line records the field values this script put in, so the Rust test
``crates/wire/tests/scapy_vectors.rs`` can check its parser, its builder and
its ICRC against them.

scapy has layers only for the BTH and the AETH; the other extension headers
(RETH, AtomicETH, AtomicAckETH, DETH, ImmDt, IETH) are packed here with
``struct`` from the layouts of the InfiniBand specification (vol. 1, ch. 9),
independently of the Rust code.

Output is deterministic (fixed seed, explicit values for every field scapy
would otherwise choose). Usage, from anywhere:

    gen_vectors.py                 write ../vectors/scapy_roce.txt
    gen_vectors.py --out FILE      write FILE
    gen_vectors.py --check FILE    exit 1 if FILE differs from a fresh run

Line format (space separated, hex values with 0x):

    ipv4|ipv6 name=OPCODE_NAME opcode= psn= dqpn= pkey= se= m= pad= fecn=
    becn= ackreq= [reth=va,rkey,len] [aeth=syndrome,msn]
    [atomic=va,rkey,swap_add,compare] [atomicack=orig] [deth=qkey,srcqp]
    [imm=] [ieth=] payload_len= assumed=0|1 [flow_id=] icrc= pkt=HEX

``assumed=1`` marks packets whose unmasked IP header fields are exactly the
ones ``softverbs_wire::Flow`` assumes (IPv4: no options, identification 0,
DF set, fragment offset 0; IPv6: no extension headers), so the Rust test can
also check the ICRC computed from addresses and ports alone. ``icrc`` is the
ICRC as the little-endian reading of the last four bytes.

``flow_id=ID`` marks IPv4 packets (appended after the others, from a
second seed) whose unmasked header fields are the ones ``Flow`` assumes
except the identification, which is ``ID`` (non-zero): a receiver that
cannot see the identification must recover ``ID`` from the ICRC, and a
sender sealing with ``ID`` must produce scapy's bytes. Their payloads
include the lengths of full 1 KiB and 4 KiB MTU packets.
"""

import argparse
import random
import struct
import sys
from pathlib import Path

from scapy.contrib.roce import AETH, BTH
from scapy.layers.inet import IP, UDP, IPOption_NOP
from scapy.layers.inet6 import IPv6
from scapy.packet import Raw

SEED = 0x50F7_0E55
# The vectors with a non-zero IPv4 identification come from their own
# seed, so adding them left every earlier line as it was.
ID_SEED = SEED + 1
# Payload lengths of the identification vectors: small, around the 256-byte
# steps of the receiver's tables, full MTUs.
ID_PAYLOADS = [0, 1, 2, 3, 200, 255, 256, 257, 1000, 1024, 2048, 4096]
ROCE_PORT = 4791
DEFAULT_OUT = Path(__file__).resolve().parent.parent / "vectors" / "scapy_roce.txt"

# name: (value, extension headers in wire order, carries payload)
OPCODES = {
    "RC_SEND_FIRST": (0x00, [], True),
    "RC_SEND_MIDDLE": (0x01, [], True),
    "RC_SEND_LAST": (0x02, [], True),
    "RC_SEND_LAST_IMM": (0x03, ["imm"], True),
    "RC_SEND_ONLY": (0x04, [], True),
    "RC_SEND_ONLY_IMM": (0x05, ["imm"], True),
    "RC_WRITE_FIRST": (0x06, ["reth"], True),
    "RC_WRITE_MIDDLE": (0x07, [], True),
    "RC_WRITE_LAST": (0x08, [], True),
    "RC_WRITE_LAST_IMM": (0x09, ["imm"], True),
    "RC_WRITE_ONLY": (0x0A, ["reth"], True),
    "RC_WRITE_ONLY_IMM": (0x0B, ["reth", "imm"], True),
    "RC_READ_REQUEST": (0x0C, ["reth"], False),
    "RC_READ_RESP_FIRST": (0x0D, ["aeth"], True),
    "RC_READ_RESP_MIDDLE": (0x0E, [], True),
    "RC_READ_RESP_LAST": (0x0F, ["aeth"], True),
    "RC_READ_RESP_ONLY": (0x10, ["aeth"], True),
    "RC_ACK": (0x11, ["aeth"], False),
    "RC_ATOMIC_ACK": (0x12, ["aeth", "atomicack"], False),
    "RC_CMP_SWAP": (0x13, ["atomic"], False),
    "RC_FETCH_ADD": (0x14, ["atomic"], False),
    "RC_SEND_LAST_INV": (0x16, ["ieth"], True),
    "RC_SEND_ONLY_INV": (0x17, ["ieth"], True),
    "UC_SEND_FIRST": (0x20, [], True),
    "UC_SEND_MIDDLE": (0x21, [], True),
    "UC_SEND_LAST": (0x22, [], True),
    "UC_SEND_LAST_IMM": (0x23, ["imm"], True),
    "UC_SEND_ONLY": (0x24, [], True),
    "UC_SEND_ONLY_IMM": (0x25, ["imm"], True),
    "UC_WRITE_FIRST": (0x26, ["reth"], True),
    "UC_WRITE_MIDDLE": (0x27, [], True),
    "UC_WRITE_LAST": (0x28, [], True),
    "UC_WRITE_LAST_IMM": (0x29, ["imm"], True),
    "UC_WRITE_ONLY": (0x2A, ["reth"], True),
    "UC_WRITE_ONLY_IMM": (0x2B, ["reth", "imm"], True),
    "UD_SEND_ONLY": (0x64, ["deth"], True),
    "UD_SEND_ONLY_IMM": (0x65, ["deth", "imm"], True),
}

# The opcodes the vectors must stress beyond one packet each.
EMPHASIS = [
    "RC_SEND_ONLY",
    "RC_WRITE_FIRST",
    "RC_WRITE_ONLY_IMM",
    "RC_READ_REQUEST",
    "RC_READ_RESP_FIRST",
    "RC_READ_RESP_MIDDLE",
    "RC_READ_RESP_LAST",
    "RC_READ_RESP_ONLY",
    "RC_ACK",
    "RC_CMP_SWAP",
    "RC_FETCH_ADD",
    "RC_ATOMIC_ACK",
    "UD_SEND_ONLY",
    "UD_SEND_ONLY_IMM",
    "RC_SEND_ONLY_INV",
]


def bits(rng, n):
    return rng.getrandbits(n)


def syndrome(rng):
    """A random valid AETH syndrome: ACK, RNR NAK, or one of the 5 NAKs."""
    kind = rng.randrange(3)
    if kind == 0:
        return 0x00 | bits(rng, 5)
    if kind == 1:
        return 0x20 | bits(rng, 5)
    return 0x60 | rng.randrange(5)


def ext_header(rng, kind):
    """Returns (bytes for everything but AETH, line field)."""
    if kind == "reth":
        va, rkey, length = bits(rng, 64), bits(rng, 32), bits(rng, 32)
        return struct.pack(">QII", va, rkey, length), f"reth={va:#x},{rkey:#x},{length:#x}"
    if kind == "atomic":
        va, rkey, swap, cmp = bits(rng, 64), bits(rng, 32), bits(rng, 64), bits(rng, 64)
        return (
            struct.pack(">QIQQ", va, rkey, swap, cmp),
            f"atomic={va:#x},{rkey:#x},{swap:#x},{cmp:#x}",
        )
    if kind == "atomicack":
        orig = bits(rng, 64)
        return struct.pack(">Q", orig), f"atomicack={orig:#x}"
    if kind == "deth":
        qkey, srcqp = bits(rng, 32), bits(rng, 24)
        # Q_Key, one reserved byte (0), SrcQP.
        return struct.pack(">II", qkey, srcqp), f"deth={qkey:#x},{srcqp:#x}"
    if kind == "imm":
        imm = bits(rng, 32)
        return struct.pack(">I", imm), f"imm={imm:#x}"
    if kind == "ieth":
        rkey = bits(rng, 32)
        return struct.pack(">I", rkey), f"ieth={rkey:#x}"
    raise ValueError(kind)


def payload_len(rng, index):
    # The first packets cover every pad count explicitly, then random.
    if index < 8:
        return [0, 1, 2, 3, 4, 5, 6, 7][index]
    return rng.randrange(0, 301)


def roce_layers(rng, name, index, plen=None):
    """BTH / extension headers / payload / pad, and the line fields."""
    value, headers, has_payload = OPCODES[name]
    if not has_payload:
        plen = 0
    elif plen is None:
        plen = payload_len(rng, index)
    pad = -plen % 4
    bth = dict(
        opcode=value,
        solicited=bits(rng, 1),
        migreq=bits(rng, 1),
        padcount=pad,
        version=0,
        pkey=rng.choice([0xFFFF, 0x8001, bits(rng, 16)]),
        fecn=bits(rng, 1),
        becn=bits(rng, 1),
        dqpn=bits(rng, 24),
        ackreq=bits(rng, 1),
        psn=bits(rng, 24),
    )
    fields = [
        f"name={name}",
        f"opcode={value:#04x}",
        f"psn={bth['psn']:#x}",
        f"dqpn={bth['dqpn']:#x}",
        f"pkey={bth['pkey']:#x}",
        f"se={bth['solicited']}",
        f"m={bth['migreq']}",
        f"pad={pad}",
        f"fecn={bth['fecn']}",
        f"becn={bth['becn']}",
        f"ackreq={bth['ackreq']}",
    ]
    layers = BTH(**bth)
    raw = b""
    for kind in headers:
        if kind == "aeth":
            syn, msn = syndrome(rng), bits(rng, 24)
            # AETH always comes first after the BTH, so scapy's layer fits.
            layers = layers / AETH(syndrome=syn, msn=msn)
            fields.append(f"aeth={syn:#04x},{msn:#x}")
        else:
            data, field = ext_header(rng, kind)
            raw += data
            fields.append(field)
    raw += bytes(bits(rng, 8) for _ in range(plen)) + bytes(pad)
    fields.append(f"payload_len={plen}")
    if raw:
        layers = layers / Raw(raw)
    return layers, fields


def ipv4_layer(rng, assumed, options):
    """An IPv4 header; `assumed` pins the unmasked fields softverbs assumes.

    TOS, TTL and (sometimes) the header checksum are random: the ICRC masks
    them, so they must not change it.
    """
    ip = dict(
        src=f"10.{bits(rng, 8)}.{bits(rng, 8)}.{bits(rng, 8)}",
        dst=f"192.168.{bits(rng, 8)}.{bits(rng, 8)}",
        tos=bits(rng, 8),
        ttl=bits(rng, 8),
    )
    if assumed:
        ip.update(id=0, flags="DF", frag=0)
    else:
        ip.update(id=rng.randrange(1, 0x10000), flags=rng.choice([0, "DF"]), frag=0)
    if options:
        ip["options"] = [IPOption_NOP()] * 4
    if bits(rng, 1):
        ip["chksum"] = bits(rng, 16)
    return IP(**ip)


def ipv6_layer(rng):
    """An IPv6 header with random (masked) traffic class, flow label and hop limit."""
    src = "fd00::" + ":".join(f"{bits(rng, 16):x}" for _ in range(4))
    dst = "fe80::" + ":".join(f"{bits(rng, 16):x}" for _ in range(4))
    return IPv6(src=src, dst=dst, tc=bits(rng, 8), fl=bits(rng, 20), hlim=bits(rng, 8))


def udp_layer(rng):
    # Mostly the standard port; a few others, as a transport may use.
    dport = ROCE_PORT if rng.randrange(8) else rng.randrange(1024, 0x10000)
    udp = dict(sport=rng.randrange(0xC000, 0x10000), dport=dport)
    if bits(rng, 1):
        udp["chksum"] = bits(rng, 16)
    return UDP(**udp)


def vector(rng, name, index):
    family = "ipv6" if bits(rng, 1) else "ipv4"
    if family == "ipv6":
        ip, assumed = ipv6_layer(rng), True
    else:
        options = index % 17 == 5
        assumed = not options and bits(rng, 1) == 1
        ip = ipv4_layer(rng, assumed, options)
    roce, fields = roce_layers(rng, name, index)
    pkt = bytes(ip / udp_layer(rng) / roce)
    icrc = int.from_bytes(pkt[-4:], "little")
    fields += [f"assumed={int(assumed)}", f"icrc={icrc:#010x}", f"pkt={pkt.hex()}"]
    return " ".join([family] + fields)


def vector_with_id(rng, name, plen):
    """An IPv4 packet with the fields Flow assumes but a non-zero identification."""
    ip = ipv4_layer(rng, assumed=True, options=False)
    ip.id = rng.randrange(1, 0x10000)
    roce, fields = roce_layers(rng, name, 0, plen)
    pkt = bytes(ip / udp_layer(rng) / roce)
    icrc = int.from_bytes(pkt[-4:], "little")
    fields += ["assumed=0", f"flow_id={ip.id:#x}", f"icrc={icrc:#010x}", f"pkt={pkt.hex()}"]
    return " ".join(["ipv4"] + fields)


def generate():
    rng = random.Random(SEED)
    names = list(OPCODES) + EMPHASIS + EMPHASIS[:10]
    # Shuffle so pad counts, families and opcodes mix.
    rng.shuffle(names)
    lines = [
        "# RoCEv2 packets built by scapy.contrib.roce (ICRC by scapy).",
        "# Generated by crates/wire/tests/scapy/gen_vectors.py; do not edit.",
        "# Format: see the script's docstring.",
    ]
    lines += [vector(rng, name, i) for i, name in enumerate(names)]
    rng = random.Random(ID_SEED)
    with_payload = [name for name, (_, _, payload) in OPCODES.items() if payload]
    for plen in ID_PAYLOADS:
        lines.append(vector_with_id(rng, rng.choice(with_payload), plen))
    for name in ["RC_ACK", "RC_READ_REQUEST", "RC_ATOMIC_ACK", "RC_CMP_SWAP"]:
        lines.append(vector_with_id(rng, name, 0))
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--check", type=Path, metavar="FILE", help="compare with FILE")
    group.add_argument("--out", type=Path, metavar="FILE", help="write FILE")
    args = parser.parse_args()

    text = generate()
    if args.check is not None:
        try:
            current = args.check.read_text()
        except OSError as err:
            print(f"gen_vectors: cannot read {args.check}: {err}", file=sys.stderr)
            return 1
        if current != text:
            old, new = current.splitlines(), text.splitlines()
            diff = [i + 1 for i, (a, b) in enumerate(zip(old, new)) if a != b]
            print(
                f"gen_vectors: {args.check} differs from scapy's output "
                f"({len(old)} vs {len(new)} lines; first differing lines: {diff[:5]}). "
                "Regenerate with gen_vectors.py and review the change.",
                file=sys.stderr,
            )
            return 1
        print(f"gen_vectors: {args.check} matches scapy ({len(text.splitlines()) - 3} packets)")
        return 0

    out = args.out or DEFAULT_OUT
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print(f"gen_vectors: wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
