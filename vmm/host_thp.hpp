// The host's transparent huge page setting for shmem, which decides whether guest
// RAM (memfds, MADV_HUGEPAGE where nanovm asks for it) gets 2 MiB pages, and what
// `nanovm doctor` advises about it. Source: Documentation/admin-guide/mm/transhuge.rst
// ("Hugepages in tmpfs/shmem"); the khugepaged fault on Linux 6.1 is README "Guest RAM
// and huge pages" (tools/testhost/uffd-thp-probe.c).
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace nanovm {

/// Where Linux shows the setting.
inline constexpr const char* kShmemEnabledPath = "/sys/kernel/mm/transparent_hugepage/shmem_enabled";

/// The selected word of shmem_enabled's text ("always within_size [advise] never deny
/// force" -> "advise"); nullopt if no word is bracketed.
std::optional<std::string> selected_thp_word(std::string_view text);

/// selected_thp_word of kShmemEnabledPath's first line; nullopt if it cannot be read.
std::optional<std::string> read_shmem_enabled();

/// Whether guest RAM gets huge pages under `setting` (advise, always, within_size,
/// force); false for never, deny, or an unknown setting.
bool shmem_gives_huge_pages(const std::optional<std::string>& setting);

/// What doctor advises: `echo advise > ...` with the reason when `setting` is never or
/// deny (no huge pages: a nested page fault per 4 KiB) or always, within_size or
/// force (huge pages for every shmem mapping nanovm does not mark MADV_NOHUGEPAGE:
/// never checked with restored VMs); empty for advise or an unknown setting.
std::string shmem_advice(const std::optional<std::string>& setting);

}  // namespace nanovm
