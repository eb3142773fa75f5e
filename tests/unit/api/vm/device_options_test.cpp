#include <catch2/catch.hpp>

#include "api/vm/device_options.hpp"
#include "vmm/error.hpp"

using namespace nanovm;

TEST_CASE("--disk takes a path with ro and serial settings") {
    const DiskOption plain = parse_disk_option("/images/root.ext4");
    CHECK(plain.path == "/images/root.ext4");
    CHECK_FALSE(plain.read_only);
    const DiskOption ro = parse_disk_option("/images/root.ext4,ro,serial=root0");
    CHECK(ro.read_only);
    CHECK(ro.serial == "root0");
    CHECK_THROWS_WITH(parse_disk_option("a.img,rw"), "--disk a.img,rw: unknown setting 'rw'");
    CHECK_THROWS_WITH(parse_disk_option(",ro"), "--disk ,ro: the path (or tap name) before the first comma is empty");
    CHECK_THROWS_WITH(parse_disk_option("a.img,serial=123456789012345678901"),
                      "--disk a.img,serial=123456789012345678901: serial must be 1 to 20 bytes");
    CHECK_THROWS_WITH(parse_disk_option("a.img,,ro"), "--disk a.img,,ro: empty part");
}

TEST_CASE("--net takes a tap name and an optional unicast MAC") {
    const NetOption net = parse_net_option("nanovm0,mac=52:54:00:12:34:ab");
    CHECK(net.tap == "nanovm0");
    REQUIRE(net.mac);
    CHECK(*net.mac == std::array<uint8_t, 6>{0x52, 0x54, 0x00, 0x12, 0x34, 0xab});
    CHECK_FALSE(parse_net_option("tap1").mac);
    CHECK_THROWS_WITH(parse_net_option("tap1,mac=01:00:00:00:00:01"),
                      "MAC address '01:00:00:00:00:01' is a multicast address");
    CHECK_THROWS_AS(parse_net_option("tap1,mac=52:54:00:12:34"), Error);
    CHECK_THROWS_AS(parse_net_option("tap1,mac=52-54-00-12-34-56"), Error);
    CHECK_THROWS_AS(parse_net_option("tap1,mac=zz:54:00:12:34:56"), Error);
    CHECK_THROWS_WITH(parse_net_option("a-very-long-tap-name"), "--net a-very-long-tap-name: tap name longer than 15 bytes");
}

TEST_CASE("--vsock takes a socket path and a guest CID of at least 3") {
    const VsockOption v = parse_vsock_option("/run/vm.sock");
    CHECK(v.path == "/run/vm.sock");
    CHECK(v.cid == 3);
    CHECK(parse_vsock_option("/run/vm.sock,cid=42").cid == 42);
    CHECK_THROWS_WITH(parse_vsock_option("/run/vm.sock,cid=2"),
                      "--vsock /run/vm.sock,cid=2: cid must be a number from 3 to 4294967294");
    CHECK_THROWS_AS(parse_vsock_option("/run/vm.sock,cid=x"), Error);
    CHECK_THROWS_AS(parse_vsock_option("/run/vm.sock,port=1"), Error);
}
