// The host side of `nanovm boot`'s console: the terminal in raw mode, host input
// forwarded to the guest's serial port, and the host's termination signals (and the
// escape Ctrl-A x) turned into a stop request — all on one thread, with poll(2). The
// signals come from api/vm/termination_signals.hpp's signalfd.
#pragma once

#include <termios.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "devices/legacy/serial.hpp"
#include "vmm/fd.hpp"

namespace nanovm {

/// Puts a terminal in raw mode (no echo, no line editing, no signal keys, no output
/// processing) and restores the saved settings on destruction.
class RawTerminal {
public:
    /// Does nothing (active() == false) if `fd` is not a terminal.
    explicit RawTerminal(int fd);
    RawTerminal(const RawTerminal&) = delete;
    RawTerminal& operator=(const RawTerminal&) = delete;
    ~RawTerminal();
    bool active() const noexcept { return active_; }
    /// Restores the saved settings now (idempotent).
    void restore() noexcept;

private:
    int fd_;
    bool active_ = false;
    termios saved_{};
};

/// The console escape: Ctrl-A x stops nanovm, Ctrl-A Ctrl-A sends one Ctrl-A, Ctrl-A
/// followed by anything else sends both bytes.
class ConsoleEscape {
public:
    static constexpr uint8_t kEscape = 0x01;  ///< Ctrl-A
    /// Filters `in`, appending what the guest should receive to `out`. Returns true
    /// when the quit sequence was typed (bytes after it are dropped).
    bool filter(const uint8_t* in, size_t len, std::vector<uint8_t>& out);

private:
    bool armed_ = false;
};

/// The console thread. Forwards bytes read from `input_fd` (until EOF) to `serial`,
/// with back-pressure; on a signal from `signal_fd` calls `on_stop` with the signal
/// number, on the escape (when `escape`) with 0. Stops on stop() or destruction.
class HostConsole {
public:
    HostConsole(int input_fd, int signal_fd, Serial& serial, bool escape, std::function<void(int)> on_stop);
    HostConsole(const HostConsole&) = delete;
    HostConsole& operator=(const HostConsole&) = delete;
    ~HostConsole();
    /// Ends the thread and waits for it (idempotent).
    void stop();

private:
    void loop();

    int input_fd_;
    int signal_fd_;
    Serial& serial_;
    bool escape_enabled_;
    std::function<void(int)> on_stop_;
    Fd wake_;  // eventfd: stop()
    std::thread thread_;
};

}  // namespace nanovm
