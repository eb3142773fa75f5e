#include "snapshot/test_stall.hpp"

#include <stdlib.h>
#include <unistd.h>

#include <string>

#include "vmm/log.hpp"

namespace nanovm::snapshot {

void test_stall_point(std::string_view step) {
    const char* want = ::getenv(kTestStallEnv);
    if (!want || step != want) return;
    log_line("test stall at " + std::string(step));
    for (;;) ::pause();
}

}  // namespace nanovm::snapshot
