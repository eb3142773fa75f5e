// Kernel command line parsing of guest-init (guest-init/cmdline.hpp).
#include <catch2/catch.hpp>

#include "guest-init/cmdline.hpp"

using nanovm::guest_init::BootConfig;
using nanovm::guest_init::BootMode;
using nanovm::guest_init::KernelParam;
using nanovm::guest_init::parse_boot_config;
using nanovm::guest_init::split_kernel_params;

namespace {
KernelParam kv(std::string k, std::string v) { return {std::move(k), std::move(v)}; }
KernelParam flag(std::string k) { return {std::move(k), std::nullopt}; }
}  // namespace

TEST_CASE("params are split on whitespace, /proc/cmdline's newline included", "[guest-init][cmdline]") {
    auto p = split_kernel_params("console=ttyS0  reboot=k\tquiet\n");
    REQUIRE(p == std::vector<KernelParam>{kv("console", "ttyS0"), kv("reboot", "k"), flag("quiet")});
}

TEST_CASE("empty and blank command lines have no params", "[guest-init][cmdline]") {
    CHECK(split_kernel_params("").empty());
    CHECK(split_kernel_params(" \n").empty());
}

TEST_CASE("a quoted value keeps its spaces and loses its quotes", "[guest-init][cmdline]") {
    auto p = split_kernel_params("a=1 nanovm.exec=\"echo hi; uname -a\" b=2");
    REQUIRE(p == std::vector<KernelParam>{kv("a", "1"), kv("nanovm.exec", "echo hi; uname -a"), kv("b", "2")});
}

TEST_CASE("a fully quoted parameter keeps its spaces and loses its quotes", "[guest-init][cmdline]") {
    auto p = split_kernel_params("\"nanovm.exec=ls -l /\" x");
    REQUIRE(p == std::vector<KernelParam>{kv("nanovm.exec", "ls -l /"), flag("x")});
}

TEST_CASE("single quotes inside a quoted value are kept", "[guest-init][cmdline]") {
    auto p = split_kernel_params("nanovm.exec=\"echo 'a  b' > /tmp/x\"");
    REQUIRE(p == std::vector<KernelParam>{kv("nanovm.exec", "echo 'a  b' > /tmp/x")});
}

TEST_CASE("quotes in the middle of a value only toggle quoting, as in the kernel", "[guest-init][cmdline]") {
    auto p = split_kernel_params("k=a\"b c\"d next");
    REQUIRE(p == std::vector<KernelParam>{kv("k", "a\"b c\"d"), flag("next")});
}

TEST_CASE("an unterminated quote runs to the end of the line", "[guest-init][cmdline]") {
    auto p = split_kernel_params("nanovm.exec=\"echo a b");
    REQUIRE(p == std::vector<KernelParam>{kv("nanovm.exec", "echo a b")});
}

TEST_CASE("empty values: key=, key=\"\" and a lone quote", "[guest-init][cmdline]") {
    auto p = split_kernel_params("a= b=\"\" c=\"");
    REQUIRE(p == std::vector<KernelParam>{kv("a", ""), kv("b", ""), kv("c", "")});
}

TEST_CASE("only the first '=' splits key and value", "[guest-init][cmdline]") {
    auto p = split_kernel_params("nanovm.exec=a=b");
    REQUIRE(p == std::vector<KernelParam>{kv("nanovm.exec", "a=b")});
}

TEST_CASE("a bare -- ends the kernel's parameters", "[guest-init][cmdline]") {
    auto p = split_kernel_params("a=1 -- nanovm.until_ready=1");
    REQUIRE(p == std::vector<KernelParam>{kv("a", "1")});
    auto cfg = parse_boot_config("a=1 -- nanovm.until_ready=1");
    CHECK(cfg.mode == BootMode::kShell);
}

TEST_CASE("no nanovm keys: interactive shell, no diagnostics", "[guest-init][cmdline]") {
    BootConfig cfg = parse_boot_config("console=ttyS0 reboot=k panic=-1 quiet\n");
    CHECK(cfg.mode == BootMode::kShell);
    CHECK(cfg.exec_command.empty());
    CHECK(cfg.warnings.empty());
    CHECK(cfg.errors.empty());
}

TEST_CASE("nanovm.until_ready: with and without a value", "[guest-init][cmdline]") {
    CHECK(parse_boot_config("nanovm.until_ready=1").mode == BootMode::kUntilReady);
    CHECK(parse_boot_config("nanovm.until_ready").mode == BootMode::kUntilReady);
    CHECK(parse_boot_config("nanovm.until_ready=yes").mode == BootMode::kUntilReady);
    CHECK(parse_boot_config("nanovm.until_ready=ON").mode == BootMode::kUntilReady);
    CHECK(parse_boot_config("nanovm.until_ready=0").mode == BootMode::kShell);
    CHECK(parse_boot_config("nanovm.until_ready=false").mode == BootMode::kShell);
    CHECK(parse_boot_config("nanovm.until_ready=0").errors.empty());
}

TEST_CASE("nanovm.until_ready with a non-boolean value is an error", "[guest-init][cmdline]") {
    BootConfig cfg = parse_boot_config("nanovm.until_ready=maybe");
    REQUIRE(cfg.errors.size() == 1);
    CHECK(cfg.errors[0].find("maybe") != std::string::npos);
}

TEST_CASE("nanovm.exec runs its quoted shell command", "[guest-init][cmdline]") {
    BootConfig cfg = parse_boot_config("console=ttyS0 nanovm.exec=\"sleep 2; echo done\" quiet\n");
    CHECK(cfg.mode == BootMode::kExec);
    CHECK(cfg.exec_command == "sleep 2; echo done");
    CHECK(cfg.errors.empty());
    CHECK(cfg.warnings.empty());
}

TEST_CASE("nanovm.exec without a command is an error", "[guest-init][cmdline]") {
    for (const char* line : {"nanovm.exec", "nanovm.exec=", "nanovm.exec=\"\""}) {
        INFO(line);
        BootConfig cfg = parse_boot_config(line);
        CHECK(cfg.errors.size() == 1);
        CHECK(cfg.mode == BootMode::kShell);
    }
}

TEST_CASE("multiple keys: until_ready wins over exec, with a warning", "[guest-init][cmdline]") {
    BootConfig cfg = parse_boot_config("nanovm.exec=\"echo hi\" nanovm.until_ready=1");
    CHECK(cfg.mode == BootMode::kUntilReady);
    CHECK(cfg.errors.empty());
    REQUIRE(cfg.warnings.size() == 1);
    CHECK(cfg.warnings[0].find("nanovm.exec") != std::string::npos);
}

TEST_CASE("a key given twice: the last one wins", "[guest-init][cmdline]") {
    CHECK(parse_boot_config("nanovm.exec=a nanovm.exec=b").exec_command == "b");
    CHECK(parse_boot_config("nanovm.until_ready=1 nanovm.until_ready=0").mode == BootMode::kShell);
}

TEST_CASE("'-' and '_' are the same in key names", "[guest-init][cmdline]") {
    CHECK(parse_boot_config("nanovm.until-ready").mode == BootMode::kUntilReady);
}

TEST_CASE("unknown nanovm keys are warnings; other keys are ignored", "[guest-init][cmdline]") {
    BootConfig cfg = parse_boot_config("nanovm.frobnicate=3 nanovmx.exec=ls foo.nanovm.exec=ls nanovm=1");
    CHECK(cfg.mode == BootMode::kShell);
    CHECK(cfg.errors.empty());
    REQUIRE(cfg.warnings.size() == 1);
    CHECK(cfg.warnings[0].find("nanovm.frobnicate") != std::string::npos);
}

TEST_CASE("nanovm.agent serves the agent on its default or given vsock port", "[guest-init][cmdline]") {
    BootConfig plain = parse_boot_config("console=ttyS0 nanovm.agent");
    CHECK(plain.mode == BootMode::kAgent);
    CHECK(plain.agent_port == 1024);
    CHECK(plain.errors.empty());
    CHECK(plain.warnings.empty());
    BootConfig port = parse_boot_config("nanovm.agent=5000");
    CHECK(port.mode == BootMode::kAgent);
    CHECK(port.agent_port == 5000);
}

TEST_CASE("nanovm.agent with a bad port is an error", "[guest-init][cmdline]") {
    for (const char* line : {"nanovm.agent=", "nanovm.agent=0", "nanovm.agent=x1", "nanovm.agent=4294967295",
                             "nanovm.agent=99999999999"}) {
        INFO(line);
        BootConfig cfg = parse_boot_config(line);
        CHECK(cfg.errors.size() == 1);
        CHECK(cfg.mode == BootMode::kShell);
    }
}

TEST_CASE("exec and until_ready win over agent, with a warning", "[guest-init][cmdline]") {
    BootConfig exec = parse_boot_config("nanovm.agent nanovm.exec=true");
    CHECK(exec.mode == BootMode::kExec);
    REQUIRE(exec.warnings.size() == 1);
    CHECK(exec.warnings[0].find("nanovm.agent") != std::string::npos);
    CHECK(parse_boot_config("nanovm.agent nanovm.until_ready").mode == BootMode::kUntilReady);
}

TEST_CASE("nanovm.overlay takes tmpfs or a /dev/ path, whatever the mode", "[guest-init][cmdline]") {
    BootConfig disk = parse_boot_config("root=/dev/vda ro nanovm.overlay=/dev/vdb nanovm.agent");
    CHECK(disk.errors.empty());
    CHECK(disk.overlay == "/dev/vdb");
    CHECK(disk.mode == BootMode::kAgent);
    CHECK(parse_boot_config("nanovm.overlay=tmpfs").overlay == "tmpfs");
    CHECK(parse_boot_config("console=ttyS0").overlay.empty());
}

TEST_CASE("nanovm.overlay with anything else is an error", "[guest-init][cmdline]") {
    for (const char* line : {"nanovm.overlay", "nanovm.overlay=", "nanovm.overlay=/dev/", "nanovm.overlay=vdb",
                             "nanovm.overlay=/dev/../etc/x", "nanovm.overlay=/tmp/x", "nanovm.overlay=\"/dev/vd b\"",
                             "nanovm.overlay=/dev/vdb;rm"}) {
        INFO(line);
        BootConfig cfg = parse_boot_config(line);
        CHECK(cfg.errors.size() == 1);
        CHECK(cfg.overlay.empty());
    }
}
