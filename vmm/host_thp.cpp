// The host's shmem huge page setting (see host_thp.hpp).
#include "vmm/host_thp.hpp"

#include <fstream>

#include <fmt/format.h>

namespace nanovm {

std::optional<std::string> selected_thp_word(std::string_view text) {
    const size_t open = text.find('['), close = text.find(']');
    if (open == std::string_view::npos || close == std::string_view::npos || close <= open + 1) return std::nullopt;
    return std::string(text.substr(open + 1, close - open - 1));
}

std::optional<std::string> read_shmem_enabled() {
    std::ifstream in(kShmemEnabledPath);
    std::string text;
    if (!std::getline(in, text)) return std::nullopt;
    return selected_thp_word(text);
}

bool shmem_gives_huge_pages(const std::optional<std::string>& setting) {
    return setting && (*setting == "advise" || *setting == "always" || *setting == "within_size" ||
                       *setting == "force");
}

std::string shmem_advice(const std::optional<std::string>& setting) {
    if (!setting) return {};
    if (*setting == "never" || *setting == "deny")
        return fmt::format(
            "echo advise > {}: guest RAM on 2 MiB pages, a nested page fault per 2 MiB instead of per 4 KiB "
            "(test host, Linux 6.1, 2026-12-03: cold boot 1.68-1.89x QEMU's speed with advise, 0.94x with never; "
            "snapshots, restores and forks checked with it: README \"Guest RAM and huge pages\")",
            kShmemEnabledPath);
    if (*setting == "always" || *setting == "within_size" || *setting == "force")
        return fmt::format(
            "echo advise > {}: with {} every shmem mapping that nanovm does not mark MADV_NOHUGEPAGE may get huge "
            "pages, which was never checked with restored VMs; before Linux 6.4 khugepaged collapses a "
            "userfaultfd-served memfd through such a mapping and fills the pages not yet served with zeros, which "
            "a restored guest then reads. advise is the setting checked: README \"Guest RAM and huge pages\"",
            kShmemEnabledPath, *setting);
    return {};
}

}  // namespace nanovm
