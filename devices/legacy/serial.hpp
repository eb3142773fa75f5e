// A 16550A UART (8250 family), as COM1 at ports 0x3f8-0x3ff, ISA IRQ 4.
// Registers (offset: DLAB=0 read / write; DLAB=1):
//   0 RBR / THR; DLL     1 IER; DLM     2 IIR / FCR     3 LCR     4 MCR
//   5 LSR               6 MSR          7 SCR
// Transmission is instantaneous: THR is always empty (LSR THRE|TEMT), and each byte
// written goes to the output sink (or, in loopback, back into the receiver).
// Received bytes come from the host console through receive() into a host-side
// backlog; they move into the 16-byte receive FIFO only while the guest listens
// (IER data-ready interrupt enabled and MCR.OUT2 set, as Linux's 8250 driver does once
// a tty is open), so input typed before the guest opens its console is not thrown
// away by the FIFO resets the driver does while it starts (an FCR reset puts unread
// host bytes of the FIFO back at the front of the backlog; bytes the guest looped
// back to itself are discarded, as the real part's clear does). Host memory is
// bounded: at most kRxCapacity + kFifoSize bytes are held whatever the guest does.
// Interrupts: IIR reports the highest-priority pending source (line status > data
// ready > THR empty > modem status); the THRE source is cleared by reading IIR while
// it is the one reported, or by writing THR. The IRQ line is high while a source is
// pending and MCR.OUT2 is set (the PC gates the UART's IRQ with OUT2; loopback
// disconnects it), so the line toggles as the 8250 on an ISA IRQ does.
// Sources: TI PC16550D datasheet; Linux drivers/tty/serial/8250.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <span>

#include "devices/bus_device.hpp"
#include "devices/irq_line.hpp"

namespace nanovm {

/// The UART's registers as a snapshot keeps them (the FIFOs are not kept: host input
/// not yet read by the guest belongs to the host console of the VMM that took it).
struct SerialState {
    uint8_t ier = 0, fcr = 0, lcr = 0, mcr = 0, scr = 0, dll = 0x0c, dlm = 0;
    uint8_t lsr_errors = 0, msr_deltas = 0;
    bool thre_pending = false;
};

class Serial : public BusDevice {
public:
    /// Where transmitted bytes go (the console). Called on vCPU threads, in order,
    /// with the device lock held: it may block (back-pressure) but must not call back.
    using OutputSink = std::function<void(std::span<const uint8_t>)>;

    static constexpr uint16_t kCom1Base = 0x3f8;
    static constexpr uint32_t kCom1Irq = 4;
    static constexpr uint16_t kRegisterCount = 8;
    /// Host-side receive backlog, bytes.
    static constexpr size_t kRxCapacity = 4096;
    /// The 16550A's receive FIFO, bytes.
    static constexpr size_t kFifoSize = 16;

    Serial(IrqLine& irq, OutputSink output);

    void read(uint64_t offset, std::span<uint8_t> data) override;
    void write(uint64_t offset, std::span<const uint8_t> data) override;

    /// Queues bytes from the host for the guest to read. Returns how many were taken
    /// (at most the free space). Any thread.
    size_t receive(std::span<const uint8_t> bytes);
    /// Free space in the receive backlog, bytes.
    size_t rx_space() const;
    /// Bytes held for the guest to read: the host backlog plus the receive FIFO. At
    /// most kRxCapacity + kFifoSize whatever the guest does. Any thread.
    size_t buffered_bytes() const;

    /// The registers (for a snapshot; vCPUs paused). Any thread.
    SerialState save_state() const;
    /// Sets the registers from a snapshot and the IRQ line to match. Any thread,
    /// before the restored vCPUs run. Values are the guest's own; any byte is valid.
    void load_state(const SerialState& state);

private:
    uint8_t read_register(uint8_t reg);
    void write_register(uint8_t reg, uint8_t value);
    uint8_t interrupt_id() const;
    uint8_t line_status() const;
    uint8_t modem_status() const;
    void set_modem_control(uint8_t value);
    void fill_fifo();
    size_t rx_space_locked() const;
    void update_irq();

    IrqLine& irq_;
    OutputSink output_;
    mutable std::mutex mutex_;
    std::deque<uint8_t> backlog_;  // from the host, not yet in the FIFO
    /// One byte of the receive FIFO and where it came from.
    struct FifoByte {
        uint8_t value;
        bool from_host;  ///< host input (kept across an FCR clear), not loopback
    };
    std::deque<FifoByte> fifo_;    // what the guest reads (<= kFifoSize)
    uint8_t ier_ = 0;
    uint8_t fcr_ = 0;
    uint8_t lcr_ = 0;
    uint8_t mcr_ = 0;
    uint8_t scr_ = 0;
    uint8_t dll_ = 0x0c;  // 9600 baud
    uint8_t dlm_ = 0;
    uint8_t lsr_errors_ = 0;  // OE, sticky until LSR is read
    uint8_t msr_deltas_ = 0;  // DCTS, DDSR, TERI, DDCD, cleared by reading MSR
    bool thre_pending_ = false;
    bool irq_level_ = false;
};

}  // namespace nanovm
