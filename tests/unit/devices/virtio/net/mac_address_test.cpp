#include <catch2/catch.hpp>

#include "devices/virtio/net/mac_address.hpp"
#include "vmm/error.hpp"

using nanovm::Error;
using nanovm::virtio::net::MacAddress;

TEST_CASE("MAC address: parses and prints six hex bytes", "[devices][virtio][net]") {
    const MacAddress mac = MacAddress::parse("02:Ab:cd:EF:01:23");
    CHECK(mac.bytes == std::array<uint8_t, 6>{0x02, 0xab, 0xcd, 0xef, 0x01, 0x23});
    CHECK(mac.to_string() == "02:ab:cd:ef:01:23");
}

TEST_CASE("MAC address: malformed text and multicast addresses are refused", "[devices][virtio][net]") {
    for (const char* bad : {"", "02:00:00:00:00", "02:00:00:00:00:0g", "02-00-00-00-00-01", "02:00:00:00:00:001",
                            "01:00:5e:00:00:01"})
        CHECK_THROWS_AS(MacAddress::parse(bad), Error);
    CHECK_THROWS_WITH(MacAddress::parse("03:00:00:00:00:01"), Catch::Contains("multicast"));
}

TEST_CASE("MAC address: random ones are locally administered unicast (02:...) and differ", "[devices][virtio][net]") {
    const MacAddress a = MacAddress::random_local(), b = MacAddress::random_local();
    CHECK(a.bytes[0] == 0x02);
    CHECK(a != b);
}
