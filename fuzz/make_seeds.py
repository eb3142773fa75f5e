#!/usr/bin/env python3
"""Writes the seed inputs of the virtqueue and mmio_transport harnesses into
fuzz/corpus/<harness>/ (checked in; rerun after changing an input format).

Each seed is a well-formed case the fuzzer can mutate from: the field order is the
one documented at the top of fuzz/virtqueue_fuzz.cpp and fuzz/mmio_transport_fuzz.cpp.
"""
import pathlib
import struct

HERE = pathlib.Path(__file__).resolve().parent

# --- virtqueue ------------------------------------------------------------------
NEXT, WRITE, INDIRECT = 1, 2, 4


def low(off):
    """GPA in the low window (0x10000 + off)."""
    return struct.pack("<BI", 0, off)


def end_of_low(back):
    return struct.pack("<BI", 1, back)


def high(off):
    return struct.pack("<BI", 2, off)


def end_of_high(back):
    return struct.pack("<BI", 3, back)


def desc(addr, length, flags=0, nxt=0):
    return addr + struct.pack("<IHH", length, flags, nxt)


def virtqueue(size_log2, features, next_avail, descs, heads, avail_delta=None, payloads=(), tables=(),
              used_event=0, after=3):
    out = struct.pack("<BBH", size_log2, features, next_avail)
    out += low(0) + low(0x1000) + low(0x2000)  # descriptor table, avail ring, used ring
    out += struct.pack("<B", len(payloads))
    for addr, data in payloads:
        out += addr + struct.pack("<H", len(data)) + data
    out += struct.pack("<B", len(tables))
    for addr, entries in tables:
        out += addr + struct.pack("<H", len(entries)) + b"".join(entries)
    out += struct.pack("<H", len(descs)) + b"".join(descs)
    out += struct.pack("<HHH", len(heads) if avail_delta is None else avail_delta, 0, used_event)
    out += struct.pack("<H", len(heads)) + b"".join(struct.pack("<H", h) for h in heads)
    return out + struct.pack("<B", after)


VIRTQUEUE_SEEDS = {
    "read-write-chain": virtqueue(
        4, 3, 0,
        descs=[desc(low(0x8000), 8, NEXT, 1), desc(low(0x9000), 16, WRITE)],
        heads=[0],
        payloads=[(low(0x8000), b"virtqueu")]),
    "indirect-table": virtqueue(
        4, 3, 0,
        descs=[desc(low(0x4000), 48, INDIRECT)],
        heads=[0],
        tables=[(low(0x4000), [desc(low(0x8000), 4, NEXT, 1), desc(high(0x100), 32, NEXT, 2),
                               desc(end_of_high(0x1000), 64, WRITE)])]),
    "event-idx-wrap": virtqueue(
        3, 3, 65533,
        descs=[desc(low(0xa000 + 0x100 * i), 32, WRITE) for i in range(8)],
        heads=list(range(8)),
        used_event=65535),
    "region-edges": virtqueue(
        2, 2, 0,
        descs=[desc(end_of_low(16), 16, NEXT, 1), desc(high(0), 16, NEXT, 2), desc(end_of_high(16), 16, WRITE)],
        heads=[0]),
    "descriptor-loop": virtqueue(
        4, 3, 0,
        descs=[desc(low(0x8000), 8, NEXT, 1), desc(low(0x8000), 8, NEXT, 0)],
        heads=[0]),
}

# --- mmio_transport -------------------------------------------------------------
# Register indices into kRegisters of fuzz/mmio_transport_fuzz.cpp.
REG = {name: i for i, name in enumerate([
    "MagicValue", "Version", "DeviceId", "VendorId", "DeviceFeatures", "DeviceFeaturesSel", "DriverFeatures",
    "DriverFeaturesSel", "QueueSel", "QueueNumMax", "QueueNum", "QueueReady", "QueueNotify", "InterruptStatus",
    "InterruptAck", "Status", "QueueDescLow", "QueueDescHigh", "QueueDriverLow", "QueueDriverHigh",
    "QueueDeviceLow", "QueueDeviceHigh", "ShmSel", "ShmLenLow", "ShmLenHigh", "ShmBaseLow", "ShmBaseHigh",
    "QueueReset", "ConfigGeneration", "Config", "Config4"])}


def write_reg(name, value):
    return struct.pack("<BBBI", 0, REG[name], 0, value)


def read_reg(name, width_code=0):
    return struct.pack("<BBB", 1, REG[name], width_code)


def kick(queue):
    return struct.pack("<BB", 2, queue)


def write_ram(gpa, data):
    return struct.pack("<BIB", 3, gpa, len(data)) + data


def bring_up(queue_size=0):
    return struct.pack("<BBB", 4, 0, queue_size)


def post(queue, readable, writable_len):
    assert len(readable) % 8 == 0 and writable_len % 8 == 0
    return struct.pack("<BBBB", 5, queue, 1, len(readable) // 8) + readable + struct.pack("<B", 0x80 | writable_len // 8)


def config_read(offset, width_code):
    return struct.pack("<BHB", 6, offset, width_code)


def device_side(bits):
    return struct.pack("<BB", 7, bits)


# TestDriver's layout of queue 0 (16 entries at 0x10000): avail ring at 0x10100.
QUEUE0_DESC, QUEUE0_AVAIL = 0x10000, 0x10100

MMIO_TRANSPORT_SEEDS = {
    "bring-up-echo": b"\0" + bring_up() + post(0, b"12345678", 16) + kick(0) + read_reg("InterruptStatus")
    + write_reg("InterruptAck", 1) + read_reg("Status") + write_reg("Status", 0),
    "manual-init": b"\0" + b"".join([
        write_reg("Status", 1), write_reg("Status", 3), read_reg("DeviceFeatures"),
        write_reg("DeviceFeaturesSel", 1), read_reg("DeviceFeatures"),
        write_reg("DriverFeaturesSel", 1), write_reg("DriverFeatures", 1), write_reg("Status", 0xb),
        write_reg("QueueSel", 0), read_reg("QueueNumMax"), write_reg("QueueNum", 16),
        write_reg("QueueDescLow", 0x10000), write_reg("QueueDriverLow", 0x11000),
        write_reg("QueueDeviceLow", 0x12000), write_reg("QueueReady", 1), write_reg("Status", 0xf),
        config_read(0, 0), config_read(1, 1), config_read(3, 2), config_read(0xefc, 3), read_reg("ConfigGeneration"),
    ]),
    "fail-and-recover": b"\0" + b"".join([
        bring_up(),
        write_ram(QUEUE0_DESC, struct.pack("<QIHH", 0x100000, 8, NEXT, 0)),  # descriptor 0 loops onto itself
        write_ram(QUEUE0_AVAIL + 2, struct.pack("<HH", 1, 0)),             # avail.idx = 1, ring[0] = 0
        kick(0), read_reg("Status"), read_reg("InterruptStatus"), write_reg("InterruptAck", 3),
        bring_up(), post(0, b"abcdefgh", 8), kick(0),
    ]),
    "device-side": b"\0" + b"".join([
        bring_up(8), device_side(2), read_reg("ConfigGeneration"), device_side(1), post(1, b"", 8), kick(1),
        device_side(1), write_reg("Status", 0), bring_up(), post(1, b"", 8), kick(1),
    ]),
}


def main():
    for harness, seeds in (("virtqueue", VIRTQUEUE_SEEDS), ("mmio_transport", MMIO_TRANSPORT_SEEDS)):
        folder = HERE / "corpus" / harness
        folder.mkdir(parents=True, exist_ok=True)
        for name, data in seeds.items():
            (folder / name).write_bytes(data)
            print(f"{folder.relative_to(HERE.parent)}/{name}: {len(data)} bytes")


if __name__ == "__main__":
    main()
