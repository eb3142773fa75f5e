#include "snapshot/frozen_ram.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

#include "vmm/error.hpp"

namespace nanovm::snapshot {

namespace {
constexpr int kSealAttempts = 40;  // 25 ms apart: ~1 s
}  // namespace

FrozenRam::~FrozenRam() {
    retired.release();
    try {
        seal_layer(memfds);
    } catch (const std::exception&) {
        // Unsealed, the layer still has no writer left: the VM maps it MAP_PRIVATE.
    }
}

std::string freeze_unsupported_reason(const GuestMemory& memory, const UffdServer* server) {
    switch (memory.backing()) {
        case GuestMemory::Backing::memfd:
            return {};
        case GuestMemory::Backing::lazy_memfd:
            return server ? "" : "guest RAM is served by a userfaultfd handler that was not given";
        case GuestMemory::Backing::private_memfd:
        case GuestMemory::Backing::lazy_private_memfd:
            return "guest RAM is a private mapping over a frozen layer already (a fork, or an earlier snapshot)";
        case GuestMemory::Backing::private_file:
            return "guest RAM is a MAP_PRIVATE file mapping";
    }
    return "unknown guest RAM backing";
}

FrozenRam freeze_ram(GuestMemory& memory, UffdServer* server) {
    if (const std::string reason = freeze_unsupported_reason(memory, server); !reason.empty())
        throw Error("freezing guest RAM: " + reason);
    FrozenRam ram;
    std::vector<int> fds;
    for (const MemoryRegion& r : memory.regions()) {
        if (r.file_offset != 0) throw Error("freezing guest RAM: a region does not start its memfd");
        Fd fd(::fcntl(r.memfd.get(), F_DUPFD_CLOEXEC, 0));
        if (!fd) throw_errno("dup(guest RAM memfd)");
        fds.push_back(fd.get());
        ram.memfds.push_back(std::move(fd));
        ram.bytes.push_back(r.size);
    }
    if (memory.backing() == GuestMemory::Backing::lazy_memfd) {
        server->remap(memory, [&] { ram.retired = memory.remap_private(fds); });
    } else {
        ram.retired = memory.remap_private(fds);
    }
    return ram;
}

uint64_t write_frozen_ram(FrozenRam& ram, LayerBuilder& builder) {
    uint64_t pages = 0, first = 0;
    for (size_t k = 0; k < ram.memfds.size(); ++k) {
        pages += put_memfd(builder, ram.memfds[k].get(), ram.bytes[k], first);
        first += ram.bytes[k] / kPageSize;
    }
    ram.retired.release();
    seal_layer(ram.memfds);
    return pages;
}

void seal_layer(const std::vector<Fd>& memfds) {
    for (const Fd& fd : memfds) {
        const int seals = ::fcntl(fd.get(), F_GET_SEALS);
        if (seals >= 0 && (seals & F_SEAL_SEAL)) continue;  // sealed already
        // F_SEAL_WRITE fails with EBUSY while a page of the memfd holds a reference
        // beyond its mappings (a vCPU thread inside a fault on it, a uffd copy in
        // flight): the kernel waits ~75 ms for such pins (mm/memfd.c,
        // memfd_wait_for_pins), which a loaded host can outlast. Pins on a frozen
        // layer are transient (no writer is left), so try again for up to ~1 s.
        for (int attempt = 0;; ++attempt) {
            if (::fcntl(fd.get(), F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) == 0) break;
            if (errno != EBUSY || attempt == kSealAttempts - 1) throw_errno("fcntl(F_ADD_SEALS) on a frozen layer");
            ::usleep(25'000);
        }
    }
}

}  // namespace nanovm::snapshot
