// The tap backend: open_tap's errors, and virtio-net frames through a real tap in a
// fresh network namespace (so nothing on the machine's own network is touched). These
// need root (CAP_NET_ADMIN, CAP_SYS_ADMIN for the namespace) and /dev/net/tun; where
// that is missing each test prints "SKIPPED (<reason>): <name>" and passes.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/if_packet.h>
#include <linux/if_tun.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <future>
#include <iostream>
#include <thread>

#include "devices/virtio/net/tap.hpp"
#include "tests/unit/devices/virtio/net/net_rig.hpp"

using namespace nanovm;
using namespace nanovm::virtio;
using namespace nanovm::virtio::net;
using test::TestBuffer;
using namespace std::chrono_literals;

namespace {

constexpr uint16_t kRx = 0, kTx = 1;
constexpr uint16_t kTestEtherType = 0x88b5;

// Moves the calling thread into a new, empty network namespace for its lifetime, and
// back after. Fds opened inside keep referring to the new namespace.
class FreshNetns {
public:
    FreshNetns() {
        if (::access("/dev/net/tun", R_OK | W_OK) != 0) {
            skip_reason_ = "no /dev/net/tun";
            return;
        }
        original_ = Fd(::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC));
        if (!original_ || ::unshare(CLONE_NEWNET) != 0) {
            skip_reason_ = std::string("cannot unshare a network namespace: ") + ::strerror(errno);
            return;
        }
        entered_ = true;
        // No IPv6 on new interfaces: no router solicitations or MLD reports on the tap.
        Fd sysctl(::open("/proc/sys/net/ipv6/conf/default/disable_ipv6", O_WRONLY | O_CLOEXEC));
        if (sysctl) [[maybe_unused]] const ssize_t n = ::write(sysctl.get(), "1", 1);
    }
    ~FreshNetns() {
        if (entered_) ::setns(original_.get(), CLONE_NEWNET);
    }
    FreshNetns(const FreshNetns&) = delete;
    FreshNetns& operator=(const FreshNetns&) = delete;

    /// True (after printing the SKIPPED line) if the test cannot run here.
    bool skip() const {
        if (skip_reason_.empty()) return false;
        std::cout << "SKIPPED (" << skip_reason_ << "): " << Catch::getResultCapture().getCurrentTestName()
                  << std::endl;
        return true;
    }

private:
    Fd original_;
    bool entered_ = false;
    std::string skip_reason_;
};

void set_up(const std::string& ifname) {
    Fd sock(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    REQUIRE(sock);
    ifreq ifr{};
    std::strncpy(ifr.ifr_name, ifname.c_str(), IFNAMSIZ - 1);
    REQUIRE(::ioctl(sock.get(), SIOCGIFFLAGS, &ifr) == 0);
    ifr.ifr_flags = static_cast<short>(ifr.ifr_flags | IFF_UP);
    REQUIRE(::ioctl(sock.get(), SIOCSIFFLAGS, &ifr) == 0);
}

// An AF_PACKET socket on `ifname` that sees and sends frames of kTestEtherType: the
// host network stack's side of the tap.
Fd packet_socket(const std::string& ifname) {
    Fd sock(::socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, htons(kTestEtherType)));
    REQUIRE(sock);
    sockaddr_ll addr{};
    addr.sll_family = AF_PACKET;
    addr.sll_protocol = htons(kTestEtherType);
    addr.sll_ifindex = static_cast<int>(::if_nametoindex(ifname.c_str()));
    REQUIRE(addr.sll_ifindex > 0);
    REQUIRE(::bind(sock.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
    return sock;
}

// A virtio-net device on a fresh, up tap `name`, with a packet socket on the host side.
struct TapRig {
    GuestMemory memory = GuestMemory::create(32 * MiB);
    EventLoop loop;
    std::string ifname;
    NetDevice device;
    MmioTransport transport{device, memory, loop};
    test::TestDriver driver{memory, transport};
    Fd host;

    explicit TapRig(const char* name) : TapRig(open_tap(name)) {}
    explicit TapRig(Tap tap)
        : ifname(tap.name), device(std::move(tap.fd), {tap.name, MacAddress::parse("02:00:00:00:00:aa")}) {
        set_up(ifname);
        host = packet_socket(ifname);
        REQUIRE(driver.bring_up());
    }
};

}  // namespace

TEST_CASE("tap: a missing clone device says to load the tun module", "[devices][virtio][net][tap]") {
    CHECK_THROWS_WITH(open_tap("nv0", "/nonexistent/tun"),
                      Catch::Contains("tap nv0") && Catch::Contains("modprobe tun"));
}

TEST_CASE("tap: bad interface names are refused before any system call", "[devices][virtio][net][tap]") {
    CHECK_THROWS_WITH(open_tap("", "/nonexistent/tun"), Catch::Contains("not a valid interface name"));
    CHECK_THROWS_WITH(open_tap("a-very-long-name-x", "/nonexistent/tun"), Catch::Contains("not a valid interface name"));
    CHECK_THROWS_WITH(open_tap("a/b", "/nonexistent/tun"), Catch::Contains("not a valid interface name"));
}

TEST_CASE("tap: open_tap creates a tap with a 12-byte vnet header and no offloads", "[devices][virtio][net][tap]") {
    FreshNetns ns;
    if (ns.skip()) return;
    Tap tap = open_tap("nvtest0");
    CHECK(tap.name == "nvtest0");
    CHECK((::fcntl(tap.fd.get(), F_GETFL) & O_NONBLOCK) != 0);
    ifreq ifr{};
    REQUIRE(::ioctl(tap.fd.get(), TUNGETIFF, &ifr) == 0);
    CHECK((ifr.ifr_flags & (IFF_TAP | IFF_NO_PI | IFF_VNET_HDR)) == (IFF_TAP | IFF_NO_PI | IFF_VNET_HDR));
    int hdr = 0;
    REQUIRE(::ioctl(tap.fd.get(), TUNGETVNETHDRSZ, &hdr) == 0);
    CHECK(hdr == 12);
    CHECK(::if_nametoindex("nvtest0") > 0);
}

TEST_CASE("tap: open_tap attaches to an existing persistent tap; a second open of it fails with EBUSY",
          "[devices][virtio][net][tap]") {
    FreshNetns ns;
    if (ns.skip()) return;
    {
        // What `ip tuntap add nvtest1 mode tap` does.
        Fd creator(::open("/dev/net/tun", O_RDWR | O_CLOEXEC));
        REQUIRE(creator);
        ifreq ifr{};
        std::strcpy(ifr.ifr_name, "nvtest1");
        ifr.ifr_flags = IFF_TAP | IFF_NO_PI;
        REQUIRE(::ioctl(creator.get(), TUNSETIFF, &ifr) == 0);
        REQUIRE(::ioctl(creator.get(), TUNSETPERSIST, 1) == 0);
    }
    Tap tap = open_tap("nvtest1");
    CHECK(tap.name == "nvtest1");
    CHECK_THROWS_WITH(open_tap("nvtest1"), Catch::Contains("TUNSETIFF") && Catch::Contains("Device or resource busy") &&
                                               Catch::Contains("another process has it open"));
    REQUIRE(::ioctl(tap.fd.get(), TUNSETPERSIST, 0) == 0);  // gone with the fd
}

TEST_CASE("tap: without CAP_NET_ADMIN creating a tap fails with EPERM and says what is needed",
          "[devices][virtio][net][tap]") {
    FreshNetns ns;
    if (ns.skip()) return;
    // Drop CAP_NET_ADMIN from the effective set of one thread (capabilities are per thread).
    auto result = std::async(std::launch::async, [] {
        __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
        __user_cap_data_struct data[2]{};
        if (::syscall(SYS_capget, &header, data) != 0) return std::string("capget failed");
        data[CAP_NET_ADMIN / 32].effective &= ~(1u << (CAP_NET_ADMIN % 32));
        if (::syscall(SYS_capset, &header, data) != 0) return std::string("capset failed");
        try {
            open_tap("nvtest2");
            return std::string("opened");
        } catch (const Error& e) {
            return std::string(e.what());
        }
    });
    const std::string message = result.get();
    CHECK_THAT(message, Catch::Contains("Operation not permitted") && Catch::Contains("CAP_NET_ADMIN") &&
                            Catch::Contains("ip tuntap add nvtest2 mode tap user"));
}

TEST_CASE("tap: a frame the guest transmits appears on the host interface", "[devices][virtio][net][tap]") {
    FreshNetns ns;
    if (ns.skip()) return;
    TapRig rig("nvtest3");
    const auto frame = test::test_frame(1000, 1);
    rig.driver.post(kTx, {TestBuffer::in(test::with_header(frame))});
    rig.driver.kick(kTx);
    REQUIRE(rig.driver.wait_used(kTx, 1));
    CHECK(rig.driver.queue(kTx).used(0).len == 0);
    const auto got = test::recv_message(rig.host.get(), 2s);
    REQUIRE(got);
    CHECK(*got == frame);
    CHECK(rig.device.save_state().tx_frames == 1);
}

TEST_CASE("tap: a frame sent to the host interface arrives in the guest's receive chain",
          "[devices][virtio][net][tap]") {
    FreshNetns ns;
    if (ns.skip()) return;
    TapRig rig("nvtest4");
    std::vector<uint64_t> gpas;
    for (int i = 0; i < 8; ++i) gpas.push_back(rig.driver.post(kRx, {TestBuffer::out(1526)}).writable_gpas[0]);
    rig.driver.kick(kRx);
    const auto frame = test::test_frame(700, 2);
    sockaddr_ll to{};
    to.sll_family = AF_PACKET;
    to.sll_ifindex = static_cast<int>(::if_nametoindex(rig.ifname.c_str()));
    to.sll_halen = 6;
    std::memset(to.sll_addr, 0xff, 6);
    REQUIRE(::sendto(rig.host.get(), frame.data(), frame.size(), 0, reinterpret_cast<sockaddr*>(&to), sizeof(to)) ==
            static_cast<ssize_t>(frame.size()));
    // Other traffic may come first; find ours among the used chains.
    bool found = false;
    for (uint16_t i = 0; i < 8 && !found; ++i) {
        if (!rig.driver.wait_used(kRx, static_cast<uint16_t>(i + 1), 2s)) break;
        const UsedElement used = rig.driver.queue(kRx).used(i);
        const auto bytes = rig.driver.read_guest(gpas[used.id], used.len);
        if (used.len == 12 + frame.size() && std::equal(frame.begin(), frame.end(), bytes.begin() + 12)) {
            found = true;
            CHECK(std::vector<uint8_t>(bytes.begin(), bytes.begin() + 12) ==
                  std::vector<uint8_t>{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0});
        }
    }
    CHECK(found);
    CHECK(rig.device.save_state().rx_dropped == 0);
}
