// RESYNC's steps in the agent (guest-init/agent/resync.hpp), against a recording
// fake kernel: their order, their arguments, and where a failure stops them. The
// real ioctls need a guest (root, a kernel that may be changed).
#include <linux/random.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "guest-init/agent/resync.hpp"

using namespace nanovm::agent;

namespace {

// Records each step; fails the one named in `fail_at` with `err`.
class FakeKernel final : public ResyncTarget {
public:
    std::vector<std::string> steps;
    std::string entropy;
    timespec clock{};
    std::string hostname;
    std::string fail_at;
    int err = EPERM;

    int add_entropy(std::string_view e) override {
        entropy = e;
        return step("add_entropy");
    }
    int reseed_crng() override { return step("reseed_crng"); }
    int set_wall_clock(const timespec& t) override {
        clock = t;
        return step("set_wall_clock");
    }
    int set_hostname(std::string_view name) override {
        hostname = name;
        return step("set_hostname");
    }

private:
    int step(const char* name) {
        steps.emplace_back(name);
        return fail_at == name ? err : 0;
    }
};

nanovm::agent::proto::ResyncRequest request(std::string hostname) {
    nanovm::agent::proto::ResyncRequest r;
    r.entropy = std::string(64, '\x5a');
    r.wall_clock_ns = 1'700'000'000'250'000'000;
    r.hostname = std::move(hostname);
    return r;
}

}  // namespace

TEST_CASE("RESYNC reseeds after adding the entropy, then sets the clock and hostname", "[guest-init][resync]") {
    FakeKernel kernel;
    Failure failure;
    REQUIRE(apply_resync(request("box-7"), kernel, failure));
    CHECK(kernel.steps == std::vector<std::string>{"add_entropy", "reseed_crng", "set_wall_clock", "set_hostname"});
    CHECK(kernel.entropy == std::string(64, '\x5a'));
    CHECK(kernel.clock.tv_sec == 1'700'000'000);
    CHECK(kernel.clock.tv_nsec == 250'000'000);
    CHECK(kernel.hostname == "box-7");
}

TEST_CASE("RESYNC with an empty hostname keeps the hostname", "[guest-init][resync]") {
    FakeKernel kernel;
    Failure failure;
    REQUIRE(apply_resync(request(""), kernel, failure));
    CHECK(kernel.steps == std::vector<std::string>{"add_entropy", "reseed_crng", "set_wall_clock"});
}

TEST_CASE("a failed RESYNC step stops the rest and names itself", "[guest-init][resync]") {
    struct Case {
        const char* fail_at;
        int err;
        const char* what;
        size_t steps_done;
    };
    for (const Case c : {Case{"add_entropy", EPERM, "resync: RNDADDENTROPY", 1},
                         Case{"reseed_crng", ENODATA, "resync: RNDRESEEDCRNG", 2},
                         Case{"set_wall_clock", EINVAL, "resync: clock_settime", 3},
                         Case{"set_hostname", EPERM, "resync: sethostname", 4}}) {
        INFO("failing " << c.fail_at);
        FakeKernel kernel;
        kernel.fail_at = c.fail_at;
        kernel.err = c.err;
        Failure failure;
        CHECK_FALSE(apply_resync(request("h"), kernel, failure));
        CHECK(kernel.steps.size() == c.steps_done);
        CHECK(failure.err == c.err);
        CHECK(failure.what == c.what);
    }
}

TEST_CASE("the RNDADDENTROPY argument is a rand_pool_info crediting 8 bits per byte", "[guest-init][resync]") {
    std::string entropy(33, '\0');
    for (size_t i = 0; i < entropy.size(); ++i) entropy[i] = static_cast<char>(0xa0 + i);
    const std::vector<uint32_t> words = rand_pool_info_words(entropy);
    REQUIRE(words.size() == 2 + 9);  // 33 bytes round up to 9 words
    rand_pool_info header{};
    std::memcpy(&header, words.data(), sizeof header);
    CHECK(header.entropy_count == 33 * 8);
    CHECK(header.buf_size == 33);
    CHECK(std::memcmp(&words[2], entropy.data(), entropy.size()) == 0);
    CHECK(reinterpret_cast<const unsigned char*>(&words[2])[33] == 0);  // padding
}

TEST_CASE("wall clock nanoseconds split into a timespec", "[guest-init][resync]") {
    const timespec epoch = timespec_from_ns(0);
    CHECK(epoch.tv_sec == 0);
    CHECK(epoch.tv_nsec == 0);
    const timespec t = timespec_from_ns(1'999'999'999);
    CHECK(t.tv_sec == 1);
    CHECK(t.tv_nsec == 999'999'999);
}
