// SHA-256 through OpenSSL's libcrypto, loaded with dlopen at the first use instead of
// linked: every process of the `nanovm` binary (each VMM included) mapped libcrypto
// and ran its ~18,000 relocations at start, 1.4 MiB of RSS per VMM for a library only
// the daemon's image pins use (measured in the test host with the boot bench's
// --save smaps, 2026-12-02). The digest is OpenSSL's (SHA-NI where the CPU has it).
#pragma once

#include <cstddef>
#include <string>

namespace nanovm::daemon::store {

/// One SHA-256 computation. Throws Error if libcrypto cannot be loaded or fails.
class Sha256 {
public:
    Sha256();
    ~Sha256();
    Sha256(const Sha256&) = delete;
    Sha256& operator=(const Sha256&) = delete;

    void update(const void* data, size_t bytes);
    /// The digest as 64 lowercase hex digits; the object is spent after this.
    std::string hex_digest();

private:
    void* ctx_;  ///< EVP_MD_CTX*
};

}  // namespace nanovm::daemon::store
