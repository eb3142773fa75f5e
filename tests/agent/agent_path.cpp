#include "tests/agent/agent_path.hpp"

#ifndef NANOVM_AGENT_PATH
#error "NANOVM_AGENT_PATH: the nanovm-agent binary (set by tests/agent/meson.build)"
#endif

namespace nanovm::agent::testing {

const char* built_agent_path() noexcept { return NANOVM_AGENT_PATH; }

}  // namespace nanovm::agent::testing
