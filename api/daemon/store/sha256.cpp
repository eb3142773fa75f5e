// SHA-256 over libcrypto loaded on demand (sha256.hpp).
#include "api/daemon/store/sha256.hpp"

#include <dlfcn.h>
#include <openssl/evp.h>
#include <openssl/opensslv.h>

#include <mutex>

#include <fmt/format.h>

#include "vmm/error.hpp"

namespace nanovm::daemon::store {

namespace {

#define NANOVM_STR2(x) #x
#define NANOVM_STR(x) NANOVM_STR2(x)
/// The soname of the libcrypto the headers belong to (OpenSSL 3: libcrypto.so.3).
constexpr const char* kLibcrypto = "libcrypto.so." NANOVM_STR(OPENSSL_VERSION_MAJOR);

/// The libcrypto functions used, with their declared types.
struct Crypto {
    decltype(&EVP_MD_CTX_new) md_ctx_new = nullptr;
    decltype(&EVP_MD_CTX_free) md_ctx_free = nullptr;
    decltype(&EVP_sha256) sha256 = nullptr;
    decltype(&EVP_DigestInit_ex) init = nullptr;
    decltype(&EVP_DigestUpdate) update = nullptr;
    decltype(&EVP_DigestFinal_ex) final = nullptr;
};

template <typename F>
void bind(void* lib, F& fn, const char* name) {
    fn = reinterpret_cast<F>(::dlsym(lib, name));
    if (!fn) throw Error(fmt::format("SHA-256: {} has no {}", kLibcrypto, name));
}

/// libcrypto, loaded once per process (never unloaded).
const Crypto& crypto() {
    static Crypto c;
    static std::once_flag once;
    std::call_once(once, [] {
        void* lib = ::dlopen(kLibcrypto, RTLD_NOW | RTLD_LOCAL);
        if (!lib) throw Error(fmt::format("SHA-256: cannot load {}: {}", kLibcrypto, ::dlerror()));
        Crypto loaded;
        bind(lib, loaded.md_ctx_new, "EVP_MD_CTX_new");
        bind(lib, loaded.md_ctx_free, "EVP_MD_CTX_free");
        bind(lib, loaded.sha256, "EVP_sha256");
        bind(lib, loaded.init, "EVP_DigestInit_ex");
        bind(lib, loaded.update, "EVP_DigestUpdate");
        bind(lib, loaded.final, "EVP_DigestFinal_ex");
        c = loaded;
    });
    return c;
}

}  // namespace

Sha256::Sha256() {
    const Crypto& c = crypto();
    EVP_MD_CTX* ctx = c.md_ctx_new();
    if (!ctx) throw Error("SHA-256: EVP_MD_CTX_new failed");
    if (c.init(ctx, c.sha256(), nullptr) != 1) {
        c.md_ctx_free(ctx);
        throw Error("SHA-256: EVP_DigestInit_ex failed");
    }
    ctx_ = ctx;
}

Sha256::~Sha256() { crypto().md_ctx_free(static_cast<EVP_MD_CTX*>(ctx_)); }

void Sha256::update(const void* data, size_t bytes) {
    if (crypto().update(static_cast<EVP_MD_CTX*>(ctx_), data, bytes) != 1) throw Error("SHA-256: EVP_DigestUpdate failed");
}

std::string Sha256::hex_digest() {
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int length = 0;
    if (crypto().final(static_cast<EVP_MD_CTX*>(ctx_), digest, &length) != 1)
        throw Error("SHA-256: EVP_DigestFinal_ex failed");
    std::string out;
    for (unsigned int i = 0; i < length; ++i) out += fmt::format("{:02x}", digest[i]);
    return out;
}

}  // namespace nanovm::daemon::store
