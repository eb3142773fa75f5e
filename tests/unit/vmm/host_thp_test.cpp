// vmm/host_thp.hpp: reading shmem_enabled and doctor's advice about it.
#include "vmm/host_thp.hpp"

#include <catch2/catch.hpp>

namespace nanovm {
namespace {

TEST_CASE("the selected word of a transparent_hugepage setting", "[thp]") {
    CHECK(selected_thp_word("always within_size [advise] never deny force") == "advise");
    CHECK(selected_thp_word("always within_size advise [never] deny force\n") == "never");
    CHECK(selected_thp_word("[always] madvise never") == "always");
    CHECK_FALSE(selected_thp_word("always within_size advise never"));
    CHECK_FALSE(selected_thp_word("[] never"));
    CHECK_FALSE(selected_thp_word("never] [advise"));
    CHECK_FALSE(selected_thp_word(""));
}

TEST_CASE("doctor advises advise for shmem_enabled: never and deny for speed, always/within_size/force for restores",
          "[thp]") {
    CHECK(shmem_gives_huge_pages(std::string("advise")));
    CHECK(shmem_gives_huge_pages(std::string("force")));
    CHECK_FALSE(shmem_gives_huge_pages(std::string("never")));
    CHECK_FALSE(shmem_gives_huge_pages(std::string("deny")));
    CHECK_FALSE(shmem_gives_huge_pages(std::nullopt));

    CHECK(shmem_advice(std::string("advise")).empty());
    CHECK(shmem_advice(std::nullopt).empty());
    CHECK(shmem_advice(std::string("bogus")).empty());
    for (const char* slow : {"never", "deny"}) {
        const std::string advice = shmem_advice(std::string(slow));
        CHECK(advice.starts_with(std::string("echo advise > ") + kShmemEnabledPath));
        CHECK(advice.find("nested page fault per 2 MiB") != std::string::npos);
    }
    for (const char* unchecked : {"always", "within_size", "force"}) {
        const std::string advice = shmem_advice(std::string(unchecked));
        CHECK(advice.starts_with(std::string("echo advise > ") + kShmemEnabledPath));
        CHECK(advice.find(std::string("with ") + unchecked + " every shmem mapping") != std::string::npos);
        CHECK(advice.find("zeros") != std::string::npos);
    }
}

}  // namespace
}  // namespace nanovm
