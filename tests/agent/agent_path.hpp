// Where meson built the host build of the guest agent (nanovm-agent). Only
// agent_path.cpp is compiled with that absolute path (-DNANOVM_AGENT_PATH), so that
// the other sources' compile lines do not depend on where the checkout lives and the
// compiler cache (ccache) serves them in any clone.
#pragma once

namespace nanovm::agent::testing {

/// Absolute path of build/guest-init/nanovm-agent.
const char* built_agent_path() noexcept;

}  // namespace nanovm::agent::testing
