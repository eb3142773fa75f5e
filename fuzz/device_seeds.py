#!/usr/bin/env python3
"""Writes the seed inputs of the device state-machine harnesses (fuzz/device_ops.hpp and
fuzz/{blk,rng,net,vsock}_device_fuzz.cpp, fuzz/legacy_devices_fuzz.cpp) into
fuzz/corpus/<harness>/: a driver's usual bring-up and traffic for each device, and
the inputs that reach issue 15's bugs (regression seeds: each crashed or broke an
invariant before its fix).
Usage: fuzz/device_seeds.py [ROOT]   (default: fuzz/corpus, checked in)"""
import os
import struct
import sys

# device_ops.hpp op codes
REG_WRITE, REG_READ, KICK, RAM, BRING_UP, POST, CONFIG, RESET, QUEUE_REG, MALFORMED, KICK_HOLD, RELEASE = range(12)
HOST = 12


def u16(v):
    return struct.pack('<H', v)


def u32(v):
    return struct.pack('<I', v)


def u64(v):
    return struct.pack('<Q', v)


def bring_up(without_bit=None, queue_size=0):
    if without_bit is None:
        return bytes([BRING_UP, 0, queue_size])
    return bytes([BRING_UP, 2, without_bit, queue_size])


def post(queue, buffers):
    """buffers: ('w', len multiple of 8 up to 1016) or ('r', bytes up to 127)."""
    out = bytes([POST, queue, len(buffers) - 1])
    for kind, val in buffers:
        out += bytes([0x80 | (val // 8)]) if kind == 'w' else bytes([len(val)]) + val
    return out


def queue_reg(queue, which, value=0):
    return bytes([QUEUE_REG, queue, which]) + u32(value)


def malformed(queue, kind, head):
    return bytes([MALFORMED, queue, kind, head])


def host(n, operands=b''):
    return bytes([HOST + n]) + operands


# Issue 15, bug 1: writes in flight, a malformed chain fails the device, the driver
# unsets the queue (QueueReady=0, QueueNum=0) while it is failed, the writes complete.
def blk_request(kind, sector, data, no_status=0, segment=None):
    out = host(2, bytes([kind]) + u16(sector) + bytes([data, no_status]))
    if segment is not None:
        out += u32(segment[0]) + u32(segment[1]) + u32(segment[2])
    return out


# vsock tx packets (vsock_device_fuzz.cpp host event 3): index into its kOps
REQUEST, RESPONSE, RST, SHUTDOWN, RW = 7, 1, 2, 3, 4


def vsock_tx(op, src_port, dst, payload=b'', flags=0, split=False):
    return host(3, bytes([op]) + u16(src_port) + bytes([dst]) + u32(flags) + u32(65536) + u32(0) +
                bytes([len(payload)]) + payload + bytes([1 if split else 0]))


BLK_FLUSH_BIT = 9
OUT, IN, FLUSH, GET_ID, DISCARD, WZ = 1, 0, 2, 3, 4, 5  # indices into the harness's kTypes
blk_bug = (bring_up(without_bit=BLK_FLUSH_BIT) + blk_request(OUT, 0, 7) + blk_request(OUT, 8, 7) +
           blk_request(OUT, 16, 7) + malformed(0, 0, 200) + bytes([KICK_HOLD, 0]) + queue_reg(0, 0) +
           queue_reg(0, 2, 0))
SEEDS = {
    'blk_device': {
        'read-write-flush': b'\0' + bring_up() + blk_request(OUT, 4, 7) + blk_request(IN, 4, 0x87) +
                            blk_request(FLUSH, 0, 0x7f) + blk_request(GET_ID, 0, 0x80) + bytes([KICK, 0]) + host(0),
        'discard-write-zeroes': b'\0' + bring_up() + blk_request(DISCARD, 0, 0x7f, 0, (0, 8, 0)) +
                                blk_request(WZ, 0, 0x7f, 0, (8, 8, 1)) + bytes([KICK, 0]) + host(0),
        'reset-in-flight': b'\0' + bring_up() + blk_request(OUT, 0, 0x3f) + blk_request(IN, 0, 0xbf) +
                           bytes([KICK_HOLD, 0, RESET]) + bring_up() + blk_request(IN, 0, 0x80) + bytes([KICK, 0]),
        'drain': b'\0' + bring_up() + blk_request(OUT, 0, 7) + bytes([KICK_HOLD, 0]) + host(1),
        'issue15-needs-reset-queue-unset': b'\0' + blk_bug + host(0),
        # the same without touching the queue: completions of a failed device
        'issue15-failed-device-completes': b'\0' + bring_up(without_bit=BLK_FLUSH_BIT) + blk_request(OUT, 0, 7) +
                                           blk_request(OUT, 8, 7) + malformed(0, 0, 200) + bytes([KICK_HOLD, 0]) +
                                           host(0),
        'issue15-needs-reset-queue-unset-drain': b'\0' + blk_bug + host(1),
    },
    'rng_device': {
        'requests': bring_up() + host(0, bytes([1, 3, 0])) + bytes([KICK, 0]) + host(1, bytes([0, 0xff])) +
                    bytes([KICK, 0]),
        'issue15-needs-reset-queue-unset': bring_up() + post(0, [('w', 64)]) + malformed(0, 1, 100) +
                                           bytes([KICK_HOLD, 0]) + queue_reg(0, 0) + queue_reg(0, 2, 0) +
                                           bytes([RELEASE, KICK, 0]),
    },
    'net_device': {
        'rx-tx': bring_up() + post(0, [('w', 1016)]) + post(0, [('w', 1016)]) + bytes([KICK, 0]) +
                 host(0, u16(76) + bytes(12) + b'\xff' * 6 + b'\x52\x54\x00\x00\x00\x01' + b'\x08\x00' + bytes(50)) +
                 host(2, bytes([1]) + u16(60) + b'\xff' * 6 + b'\x52\x54\x00\x12\x34\x56' + b'\x08\x00' + bytes(46)) +
                 bytes([KICK, 1]) + host(1),
        'tap-gone': bring_up() + host(2, bytes([0]) + u16(60) + bytes(60)) + host(3) + bytes([KICK, 1]),
        'issue15-needs-reset-queue-unset': bring_up() + post(1, [('r', bytes(12) + bytes(60))]) +
                                           malformed(1, 0, 200) + bytes([KICK_HOLD, 1]) + queue_reg(1, 0) +
                                           queue_reg(1, 2, 0) + host(1) + bytes([RELEASE]),
    },
    'vsock_device': {
        # rx buffers, a host program connects to guest port 1024 (its side gets local
        # port 1024), the guest answers RESPONSE, then data both ways
        'host-connect': bring_up() + post(0, [('w', 1016)]) + post(0, [('w', 1016)]) + post(2, [('w', 8)]) +
                        bytes([KICK, 0]) + host(0, bytes([0])) + host(2, bytes([0x08])) +
                        vsock_tx(RESPONSE, 1024, 0) + bytes([KICK, 1]) + host(1, bytes([0, 5]) + b'hello') +
                        vsock_tx(RW, 1024, 0, b'abc', split=True) + bytes([KICK, 1]) +
                        post(0, [('w', 1016)]) + bytes([KICK, 0]) + host(2, bytes([0x00])),
        # the guest connects to the host listener at _5000; data; SHUTDOWN; RST
        'guest-connect': bring_up() + post(0, [('w', 1016)]) + vsock_tx(REQUEST, 40001, 9) + bytes([KICK, 1]) +
                         host(2, bytes([0x04])) + host(1, bytes([0, 3]) + b'xyz') + bytes([KICK, 0]) +
                         vsock_tx(SHUTDOWN, 40001, 9, flags=3) + vsock_tx(RST, 40001, 9) + bytes([KICK, 1]),
        'issue15-needs-reset-queue-unset': bring_up() + post(0, [('w', 1016)]) + host(0, bytes([1])) +
                                           malformed(1, 1, 100) + bytes([KICK_HOLD, 1]) + queue_reg(0, 0) +
                                           queue_reg(0, 2, 0) + host(1, bytes([0, 4]) + b'data') + bytes([RELEASE]),
    },
}

# Issue 15, bug 2: loopback, 16 bytes to THR, FCR clear RX, again and again.
PORT_MCR, PORT_THR, PORT_FCR, PORT_LCR, PORT_IER, PORT_LSR, PORT_RBR = 4, 0, 2, 3, 1, 5, 0


def outb(port_index, value):
    return bytes([0, port_index, 0]) + u32(value)


def inb(port_index):
    return bytes([1, port_index, 0])


loopback = outb(PORT_MCR, 0x10) + b''.join(outb(PORT_THR, ord('L')) for _ in range(16)) + outb(PORT_FCR, 0x02)
SEEDS['legacy_devices'] = {
    # Linux's 8250 start-up: divisor, 8N1, FIFOs, OUT2, interrupts; then host input read back
    'uart-linux-start': outb(PORT_LCR, 0x80) + outb(PORT_THR, 1) + outb(PORT_IER, 0) + outb(PORT_LCR, 0x03) +
                        outb(PORT_FCR, 0x07) + outb(PORT_MCR, 0x0b) + outb(PORT_IER, 0x05) +
                        bytes([2, 5]) + b'hello' + inb(PORT_LSR) + inb(PORT_RBR) + inb(PORT_RBR) + inb(2),
    # i8042 self test, config read/write; RTC seconds and status B; control port announce
    'i8042-rtc-control': outb(9, 0xaa) + inb(8) + outb(9, 0x20) + inb(8) + outb(9, 0x60) + outb(8, 0x47) +
                         outb(10, 0x0b) + inb(11) + outb(10, 0x00) + inb(11) + outb(12, 1) + inb(12) + outb(9, 0xfe),
    'issue15-loopback-fcr-growth': loopback + bytes([3, 16]) + u16(4095) + bytes([3, 16]) + u16(4095),
}


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), 'corpus')
    for harness, seeds in SEEDS.items():
        d = os.path.join(root, harness)
        os.makedirs(d, exist_ok=True)
        for name, data in seeds.items():
            with open(os.path.join(d, name), 'wb') as f:
                f.write(data)
    print(f'wrote {sum(len(s) for s in SEEDS.values())} seeds under {root}')


if __name__ == '__main__':
    main()
