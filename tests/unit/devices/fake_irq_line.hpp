// An IrqLine that records its level and counts rising edges.
#pragma once

#include "devices/irq_line.hpp"

namespace nanovm::test {

class FakeIrqLine : public IrqLine {
public:
    void set_level(bool high) override {
        if (high && !level) ++rising_edges;
        level = high;
    }
    bool level = false;
    int rising_edges = 0;
};

}  // namespace nanovm::test
