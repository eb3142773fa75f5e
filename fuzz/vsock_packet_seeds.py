#!/usr/bin/env python3
"""Writes seed inputs for vsock_packet_fuzz (layout: see vsock_packet_fuzz.cpp) into DIR:
a well-formed tx packet of every op from the guest (CID 3) to the host (CID 2), one
with its header split over three segments, and a CONNECT line.
Usage: fuzz/vsock_packet_seeds.py DIR"""
import os
import struct
import sys

REQUEST, RESPONSE, RST, SHUTDOWN, RW, CREDIT_UPDATE, CREDIT_REQUEST = range(1, 8)


def header(op, length=0, flags=0):
    # src_cid dst_cid src_port dst_port len type op flags buf_alloc fwd_cnt (44 bytes)
    return struct.pack('<QQIIIHHIII', 3, 2, 40000, 1234, length, 1, op, flags, 262144, 0)


def one_segment(packet):
    return bytes([0]) + packet


SEEDS = {
    'request': one_segment(header(REQUEST)),
    'response': one_segment(header(RESPONSE)),
    'rst': one_segment(header(RST)),
    'shutdown': one_segment(header(SHUTDOWN, flags=3)),
    'rw': one_segment(header(RW, 5) + b'hello'),
    'credit_update': one_segment(header(CREDIT_UPDATE)),
    'credit_request': one_segment(header(CREDIT_REQUEST)),
    # three segments: 7 bytes, 30 bytes, the rest
    'rw_split': bytes([2, 6, 29]) + header(RW, 4) + b'data',
    'connect_line': b'CONNECT 52\n',
}

if __name__ == '__main__':
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    os.makedirs(sys.argv[1], exist_ok=True)
    for name, data in SEEDS.items():
        with open(os.path.join(sys.argv[1], name), 'wb') as f:
            f.write(data)
