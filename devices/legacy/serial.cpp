#include "devices/legacy/serial.hpp"

namespace nanovm {

namespace {

// Register offsets.
constexpr uint8_t kRbrThr = 0, kIer = 1, kIirFcr = 2, kLcr = 3, kMcr = 4, kLsr = 5, kMsr = 6, kScr = 7;

// IER bits.
constexpr uint8_t kIerRxData = 0x01, kIerThre = 0x02, kIerLineStatus = 0x04, kIerModemStatus = 0x08;
// IIR values (bits 3:1 = source, bit 0 = no interrupt pending, bits 7:6 = FIFOs on).
constexpr uint8_t kIirNone = 0x01, kIirLineStatus = 0x06, kIirRxData = 0x04, kIirThre = 0x02, kIirModem = 0x00;
constexpr uint8_t kIirFifoEnabled = 0xc0;
// FCR bits.
constexpr uint8_t kFcrEnable = 0x01, kFcrClearRx = 0x02;
// LCR bits.
constexpr uint8_t kLcrDlab = 0x80;
// MCR bits.
constexpr uint8_t kMcrDtr = 0x01, kMcrRts = 0x02, kMcrOut1 = 0x04, kMcrOut2 = 0x08, kMcrLoop = 0x10;
// LSR bits.
constexpr uint8_t kLsrDataReady = 0x01, kLsrOverrun = 0x02, kLsrThre = 0x20, kLsrTemt = 0x40;
constexpr uint8_t kLsrErrorBits = 0x1e;  // OE, PE, FE, BI
// MSR bits.
constexpr uint8_t kMsrDcts = 0x01, kMsrDdsr = 0x02, kMsrTeri = 0x04, kMsrDdcd = 0x08;
constexpr uint8_t kMsrCts = 0x10, kMsrDsr = 0x20, kMsrRi = 0x40, kMsrDcd = 0x80;

// Modem status lines seen by the UART for a given MCR: in loopback the outputs are
// wired back (RTS->CTS, DTR->DSR, OUT1->RI, OUT2->DCD); otherwise a present, ready
// peer (CTS, DSR, DCD).
uint8_t status_lines(uint8_t mcr) {
    if (!(mcr & kMcrLoop)) return kMsrCts | kMsrDsr | kMsrDcd;
    uint8_t lines = 0;
    if (mcr & kMcrRts) lines |= kMsrCts;
    if (mcr & kMcrDtr) lines |= kMsrDsr;
    if (mcr & kMcrOut1) lines |= kMsrRi;
    if (mcr & kMcrOut2) lines |= kMsrDcd;
    return lines;
}

}  // namespace

Serial::Serial(IrqLine& irq, OutputSink output) : irq_(irq), output_(std::move(output)) {}

void Serial::read(uint64_t offset, std::span<uint8_t> data) {
    std::lock_guard lock(mutex_);
    for (size_t i = 0; i < data.size(); ++i) {
        const uint64_t reg = offset + i;  // a wide access covers consecutive registers
        data[i] = reg < kRegisterCount ? read_register(static_cast<uint8_t>(reg)) : 0xff;
    }
}

void Serial::write(uint64_t offset, std::span<const uint8_t> data) {
    std::lock_guard lock(mutex_);
    for (size_t i = 0; i < data.size(); ++i) {
        const uint64_t reg = offset + i;
        if (reg < kRegisterCount) write_register(static_cast<uint8_t>(reg), data[i]);
    }
}

uint8_t Serial::interrupt_id() const {
    if ((ier_ & kIerLineStatus) && (lsr_errors_ & kLsrErrorBits)) return kIirLineStatus;
    if ((ier_ & kIerRxData) && !fifo_.empty()) return kIirRxData;
    if ((ier_ & kIerThre) && thre_pending_) return kIirThre;
    if ((ier_ & kIerModemStatus) && (msr_deltas_ & 0x0f)) return kIirModem;
    return kIirNone;
}

uint8_t Serial::line_status() const {
    uint8_t lsr = kLsrThre | kLsrTemt | lsr_errors_;
    if (!fifo_.empty()) lsr |= kLsrDataReady;
    return lsr;
}

uint8_t Serial::modem_status() const { return static_cast<uint8_t>(status_lines(mcr_) | msr_deltas_); }

void Serial::set_modem_control(uint8_t value) {
    const uint8_t before = status_lines(mcr_);
    mcr_ = value & 0x1f;
    const uint8_t after = status_lines(mcr_);
    const uint8_t changed = before ^ after;
    if (changed & kMsrCts) msr_deltas_ |= kMsrDcts;
    if (changed & kMsrDsr) msr_deltas_ |= kMsrDdsr;
    if ((before & kMsrRi) && !(after & kMsrRi)) msr_deltas_ |= kMsrTeri;  // trailing edge
    if (changed & kMsrDcd) msr_deltas_ |= kMsrDdcd;
}

// Moves host input into the FIFO while the guest listens for it.
void Serial::fill_fifo() {
    const bool listening = (ier_ & kIerRxData) && (mcr_ & kMcrOut2) && !(mcr_ & kMcrLoop);
    if (!listening || backlog_.empty()) return;
    while (fifo_.size() < kFifoSize && !backlog_.empty()) {
        fifo_.push_back({backlog_.front(), true});
        backlog_.pop_front();
    }
}

void Serial::update_irq() {
    fill_fifo();
    const bool level = interrupt_id() != kIirNone && (mcr_ & kMcrOut2) && !(mcr_ & kMcrLoop);
    if (level == irq_level_) return;
    irq_.set_level(level);
    irq_level_ = level;
}

uint8_t Serial::read_register(uint8_t reg) {
    const bool dlab = lcr_ & kLcrDlab;
    switch (reg) {
        case kRbrThr: {
            if (dlab) return dll_;
            uint8_t byte = 0;
            if (!fifo_.empty()) {
                byte = fifo_.front().value;
                fifo_.pop_front();
            }
            update_irq();  // refills the FIFO from the backlog
            return byte;
        }
        case kIer: return dlab ? dlm_ : ier_;
        case kIirFcr: {
            const uint8_t id = interrupt_id();
            if (id == kIirThre) {  // reading IIR acknowledges THR empty
                thre_pending_ = false;
                update_irq();
            }
            return static_cast<uint8_t>(id | ((fcr_ & kFcrEnable) ? kIirFifoEnabled : 0));
        }
        case kLcr: return lcr_;
        case kMcr: return mcr_;
        case kLsr: {
            const uint8_t lsr = line_status();
            if (lsr_errors_) {
                lsr_errors_ = 0;
                update_irq();
            }
            return lsr;
        }
        case kMsr: {
            const uint8_t msr = modem_status();
            if (msr_deltas_) {
                msr_deltas_ = 0;
                update_irq();
            }
            return msr;
        }
        case kScr: return scr_;
        default: return 0xff;
    }
}

void Serial::write_register(uint8_t reg, uint8_t value) {
    const bool dlab = lcr_ & kLcrDlab;
    switch (reg) {
        case kRbrThr:
            if (dlab) {
                dll_ = value;
                return;
            }
            // THR: the byte leaves at once; THR goes full then empty again, which
            // lowers and re-raises the THRE source (a fresh edge for the guest).
            thre_pending_ = false;
            update_irq();
            if (mcr_ & kMcrLoop) {
                if (fifo_.size() < kFifoSize)
                    fifo_.push_back({value, false});
                else
                    lsr_errors_ |= kLsrOverrun;
            } else if (output_) {
                output_(std::span<const uint8_t>(&value, 1));
            }
            thre_pending_ = true;
            update_irq();
            return;
        case kIer:
            if (dlab) {
                dlm_ = value;
                return;
            }
            {
                const uint8_t old = ier_;
                ier_ = value & 0x0f;
                // Enabling the THRE interrupt with THR empty raises it at once (16550).
                if ((old ^ ier_) & kIerThre) thre_pending_ = (ier_ & kIerThre) != 0;
            }
            update_irq();
            return;
        case kIirFcr:
            // Changing the FIFO enable bit, or FCR bit 1, empties the receive FIFO.
            // Host bytes the guest never read go back to the front of the host's
            // backlog instead of being dropped: Linux clears the FIFO while it
            // (re)starts the port (uart startup, set_termios, autoconfig), and host
            // input typed or piped before that must still arrive once the guest
            // listens. Loopback bytes are the guest's own: discarded, as the real
            // part's clear does (put back, they would grow the backlog without bound).
            // The host bytes came from the backlog, which receive() keeps within
            // kRxCapacity, so the backlog stays within kRxCapacity + kFifoSize.
            if (((fcr_ ^ value) & kFcrEnable) || (value & kFcrClearRx)) {
                for (auto it = fifo_.rbegin(); it != fifo_.rend(); ++it)
                    if (it->from_host) backlog_.push_front(it->value);
                fifo_.clear();
            }
            fcr_ = value & 0xc9;  // enable, DMA mode, trigger level (bits 1-2 self-clear)
            update_irq();
            return;
        case kLcr: lcr_ = value; return;
        case kMcr:
            set_modem_control(value);
            update_irq();
            return;
        case kScr: scr_ = value; return;
        default: return;  // LSR and MSR writes are for factory test: ignored
    }
}

size_t Serial::receive(std::span<const uint8_t> bytes) {
    std::lock_guard lock(mutex_);
    const size_t space = rx_space_locked();
    const size_t n = bytes.size() < space ? bytes.size() : space;
    backlog_.insert(backlog_.end(), bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(n));
    if (n > 0) update_irq();
    return n;
}

// The backlog may hold up to kFifoSize bytes more than kRxCapacity (FIFO bytes put
// back by an FCR reset): no space then, never a wrapped-around size_t.
size_t Serial::rx_space_locked() const {
    return backlog_.size() < kRxCapacity ? kRxCapacity - backlog_.size() : 0;
}

size_t Serial::rx_space() const {
    std::lock_guard lock(mutex_);
    return rx_space_locked();
}

size_t Serial::buffered_bytes() const {
    std::lock_guard lock(mutex_);
    return backlog_.size() + fifo_.size();
}

SerialState Serial::save_state() const {
    std::lock_guard lock(mutex_);
    return SerialState{ier_, fcr_, lcr_, mcr_, scr_, dll_, dlm_, lsr_errors_, msr_deltas_, thre_pending_};
}

void Serial::load_state(const SerialState& state) {
    std::lock_guard lock(mutex_);
    ier_ = state.ier;
    fcr_ = state.fcr;
    lcr_ = state.lcr;
    mcr_ = state.mcr;
    scr_ = state.scr;
    dll_ = state.dll;
    dlm_ = state.dlm;
    lsr_errors_ = state.lsr_errors;
    msr_deltas_ = state.msr_deltas;
    thre_pending_ = state.thre_pending;
    update_irq();
}

}  // namespace nanovm
