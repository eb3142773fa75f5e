// nanovm's version: the meson project version, and `git describe` of the checkout it
// was built from when the build found one (api/version/version.cpp.in, filled in by
// meson's vcs_tag at each build).
#pragma once

#include <string>

namespace nanovm {

/// The meson project version ("0.1.0").
const char* project_version();

/// `git describe --tags --always --dirty` of the source tree at build time
/// ("d97b36d-dirty"), or "" when the build had no git checkout.
const char* git_describe();

/// What `nanovm --version` prints: "nanovm 0.1.0 (git d97b36d-dirty)", or
/// "nanovm 0.1.0" without a git description.
std::string version_text();

}  // namespace nanovm
