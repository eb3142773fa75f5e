// Lets Catch print a Gpa in failed assertions ("0x100200", not "{?}"). Every x86 test
// file includes it, so the specialization is the same in each translation unit.
#pragma once

#include <catch2/catch.hpp>

#include <cstdio>
#include <string>

#include "vmm/address.hpp"

namespace Catch {
template <>
struct StringMaker<nanovm::Gpa> {
    static std::string convert(const nanovm::Gpa& gpa) {
        char text[24];
        std::snprintf(text, sizeof text, "%#llx", static_cast<unsigned long long>(gpa.value));
        return text;
    }
};
}  // namespace Catch
