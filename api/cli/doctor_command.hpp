// `nanovm doctor`: what this host offers nanovm (KVM flavour, API version,
// capabilities) and where the guest kernel and initramfs are.
#pragma once

namespace nanovm {

/// Prints the report (a table, or one JSON object with `json`). Returns 0 whenever
/// it could report, even without KVM; 1 only if the report itself failed.
int run_doctor(bool json);

}  // namespace nanovm
