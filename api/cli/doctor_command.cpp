#include "api/cli/doctor_command.hpp"

#include <linux/kvm.h>
#include <sys/stat.h>

#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "api/cli/daemon_client.hpp"
#include "api/client/api_client.hpp"
#include "api/vm/paths.hpp"
#include "vmm/error.hpp"
#include "vmm/host_thp.hpp"
#include "vmm/kvm.hpp"
#include "vmm/kvm_flavour.hpp"
#include "vmm/log.hpp"

namespace nanovm {

namespace {

struct Capability {
    const char* name;  // KVM_CAP_ without the prefix
    long id;
    const char* use;   // what nanovm uses it for
};

// The capabilities nanovm uses or will use, in the order the report shows them.
constexpr Capability kCapabilities[] = {
    {"USER_MEMORY", KVM_CAP_USER_MEMORY, "guest RAM memslots"},
    {"SET_TSS_ADDR", KVM_CAP_SET_TSS_ADDR, "Intel real-mode TSS"},
    {"SET_IDENTITY_MAP_ADDR", KVM_CAP_SET_IDENTITY_MAP_ADDR, "Intel EPT identity map"},
    {"EXT_CPUID", KVM_CAP_EXT_CPUID, "KVM_GET_SUPPORTED_CPUID / KVM_SET_CPUID2"},
    {"IRQCHIP", KVM_CAP_IRQCHIP, "in-kernel PIC, IOAPIC, LAPIC"},
    {"PIT2", KVM_CAP_PIT2, "in-kernel PIT"},
    {"IRQFD", KVM_CAP_IRQFD, "device interrupts without a VMM exit"},
    {"IOEVENTFD", KVM_CAP_IOEVENTFD, "device kicks without a VMM exit"},
    {"MP_STATE", KVM_CAP_MP_STATE, "APs waiting for INIT/SIPI; snapshot"},
    {"IMMEDIATE_EXIT", KVM_CAP_IMMEDIATE_EXIT, "stopping and pausing vCPUs"},
    {"KVMCLOCK_CTRL", KVM_CAP_KVMCLOCK_CTRL, "telling the guest it was paused"},
    {"ADJUST_CLOCK", KVM_CAP_ADJUST_CLOCK, "kvmclock save/restore"},
    {"VCPU_EVENTS", KVM_CAP_VCPU_EVENTS, "snapshot of pending events"},
    {"XSAVE", KVM_CAP_XSAVE, "snapshot of FPU/SSE/AVX state"},
    {"XSAVE2", KVM_CAP_XSAVE2, "snapshot of large XSAVE state"},
    {"XCRS", KVM_CAP_XCRS, "snapshot of XCR0"},
    {"X2APIC_API", KVM_CAP_X2APIC_API, "x2APIC ids"},
    {"TSC_DEADLINE_TIMER", KVM_CAP_TSC_DEADLINE_TIMER, "guest timer"},
    {"READONLY_MEM", KVM_CAP_READONLY_MEM, "read-only memslots"},
    {"DIRTY_LOG_RING", KVM_CAP_DIRTY_LOG_RING, "dirty ring (bytes)"},
    {"MANUAL_DIRTY_LOG_PROTECT2", KVM_CAP_MANUAL_DIRTY_LOG_PROTECT2, "cheap dirty-log clear"},
    {"NR_VCPUS", KVM_CAP_NR_VCPUS, "recommended vCPUs per VM"},
    {"MAX_VCPUS", KVM_CAP_MAX_VCPUS, "maximum vCPUs per VM"},
    {"NR_MEMSLOTS", KVM_CAP_NR_MEMSLOTS, "memslots per VM"},
    {"USER_MEMORY2", kvm_cap::kUserMemory2, "newer than Linux 6.1"},
    {"GUEST_MEMFD", kvm_cap::kGuestMemfd, "newer than Linux 6.1"},
};

struct FileStatus {
    std::string path;
    bool found = false;
    uint64_t bytes = 0;
};

FileStatus file_status(const std::string& path) {
    FileStatus status{path};
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
        status.found = true;
        status.bytes = static_cast<uint64_t>(st.st_size);
    }
    return status;
}

// Where the CLI looks for nanovmd (api/cli/daemon_client.hpp) and whether it answers.
struct DaemonStatus {
    std::string endpoint;  // "unix socket PATH" or the URL
    bool answers = false;
    std::string detail;    // its version and sandboxes, or why not
};

DaemonStatus daemon_status() {
    DaemonStatus d;
    try {
        client::ApiClient api(cli::find_daemon(cli::ClientOptions{}));
        d.endpoint = api.http().endpoint().describe();
        const nlohmann::json health = api.get("/v1/health");
        d.answers = true;
        d.detail = fmt::format("answers (version {}, {} sandboxes)", cli::cell(health.value("version", nlohmann::json())),
                               cli::cell(health.value("sandboxes", nlohmann::json())));
    } catch (const client::Unreachable& e) {
        d.detail = fmt::format("not running ({}); start it: nanovm daemon", e.what());
    } catch (const std::exception& e) {
        d.detail = fmt::format("does not answer: {}", e.what());
    }
    return d;
}

struct Report {
    KvmHostInfo host;
    std::optional<std::string> shmem_enabled;  // read_shmem_enabled()
    std::optional<std::string> open_error;  // why /dev/kvm did not open
    int api_version = 0;
    std::vector<std::pair<const Capability*, int>> capabilities;
    FileStatus kernel;
    FileStatus initrd;
    DaemonStatus daemon;
};

Report gather() {
    Report report;
    report.host = detect_kvm_host();
    report.shmem_enabled = read_shmem_enabled();
    if (report.host.dev_kvm_exists) {
        try {
            const Kvm kvm = Kvm::open();
            report.api_version = kvm.api_version();
            for (const Capability& cap : kCapabilities) report.capabilities.emplace_back(&cap, kvm.check_extension(cap.id));
        } catch (const Error& e) {
            report.open_error = e.what();
        }
    } else {
        report.open_error = "/dev/kvm does not exist";
    }
    report.kernel = file_status(default_kernel_path());
    report.initrd = file_status(default_initrd_path());
    report.daemon = daemon_status();
    return report;
}

std::string stock_linux_verdict(const Report& r) {
    if (!r.host.dev_kvm_exists) return "no: no /dev/kvm here; use tools/testhost/run -- build/nanovm boot ...";
    if (r.host.flavour == KvmFlavour::pvm)
        return "no: this /dev/kvm is PVM (runs only PVM guest kernels); use tools/testhost/run -- build/nanovm boot ...";
    if (r.open_error) return "no: " + *r.open_error;
    return "yes";
}

std::string flavour_detail(const KvmHostInfo& host) {
    std::vector<std::string> modules;
    if (host.module_kvm_intel) modules.emplace_back("kvm_intel");
    if (host.module_kvm_amd) modules.emplace_back("kvm_amd");
    if (host.module_kvm_pvm) modules.emplace_back("kvm_pvm");
    std::string cpu = host.cpu_vmx ? "vmx" : host.cpu_svm ? "svm" : "no vmx/svm flag";
    return fmt::format("modules: {}; cpu: {}", modules.empty() ? "none" : fmt::format("{}", fmt::join(modules, ", ")),
                       cpu);
}

std::string file_line(const FileStatus& file, const char* build_command) {
    if (file.found) return fmt::format("{} ({:.1f} MiB)", file.path, static_cast<double>(file.bytes) / (1024.0 * 1024.0));
    return fmt::format("not built yet: {} missing; build it with: {}", file.path, build_command);
}

void print_text(const Report& r) {
    fmt::print("KVM\n");
    fmt::print("  {:<28} {}\n", "flavour", to_string(r.host.flavour));
    fmt::print("  {:<28} {}\n", "detected from", flavour_detail(r.host));
    fmt::print("  {:<28} {}\n", "/dev/kvm", r.open_error ? *r.open_error : std::string("opened"));
    if (!r.open_error) fmt::print("  {:<28} {}\n", "API version", r.api_version);
    fmt::print("  {:<28} {}\n", "stock Linux guests boot", stock_linux_verdict(r));
    if (!r.capabilities.empty()) {
        fmt::print("Capabilities\n");
        for (const auto& [cap, value] : r.capabilities) {
            const std::string answer = value <= 0 ? "no" : value == 1 ? "yes" : fmt::format("yes ({})", value);
            fmt::print("  {:<28} {:<14} {}\n", cap->name, answer, cap->use);
        }
    } else {
        fmt::print("Capabilities\n  (not known: /dev/kvm could not be opened)\n");
    }
    fmt::print("Host\n");
    if (shmem_gives_huge_pages(r.shmem_enabled))
        fmt::print("  {:<28} yes (shmem_enabled: {})\n", "guest RAM huge pages", *r.shmem_enabled);
    else
        fmt::print("  {:<28} no (shmem_enabled: {})\n", "guest RAM huge pages", r.shmem_enabled.value_or("unknown"));
    if (const std::string advice = shmem_advice(r.shmem_enabled); !advice.empty())
        fmt::print("  {:<28} {}\n", "recommended", advice);
    fmt::print("Guest\n");
    fmt::print("  {:<28} {}\n", "kernel", file_line(r.kernel, kBuildKernelCommand));
    fmt::print("  {:<28} {}\n", "initramfs", file_line(r.initrd, kBuildInitrdCommand));
    fmt::print("Daemon (nanovmd)\n");
    fmt::print("  {:<28} {}\n", "endpoint", r.daemon.endpoint.empty() ? "-" : r.daemon.endpoint);
    fmt::print("  {:<28} {}\n", "status", r.daemon.detail);
}

void print_json(const Report& r) {
    nlohmann::ordered_json j;
    j["kvm"]["flavour"] = std::string(to_string(r.host.flavour));
    j["kvm"]["dev_kvm"] = r.host.dev_kvm_exists;
    j["kvm"]["modules"] = {{"kvm_intel", r.host.module_kvm_intel},
                           {"kvm_amd", r.host.module_kvm_amd},
                           {"kvm_pvm", r.host.module_kvm_pvm}};
    j["kvm"]["cpu_flags"] = {{"vmx", r.host.cpu_vmx}, {"svm", r.host.cpu_svm}};
    j["kvm"]["open_error"] = r.open_error ? nlohmann::ordered_json(*r.open_error) : nlohmann::ordered_json(nullptr);
    j["kvm"]["api_version"] = r.open_error ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(r.api_version);
    nlohmann::ordered_json caps = nlohmann::ordered_json::object();
    for (const auto& [cap, value] : r.capabilities) caps[cap->name] = value;
    j["capabilities"] = caps;
    const std::string verdict = stock_linux_verdict(r);
    const bool stock = verdict == "yes";
    j["stock_linux_guests"] = stock;
    if (!stock) j["stock_linux_why_not"] = verdict.substr(verdict.find(':') + 2);
    const auto file = [](const FileStatus& f, const char* build) {
        nlohmann::ordered_json o;
        o["path"] = f.path;
        o["built"] = f.found;
        if (f.found)
            o["bytes"] = f.bytes;
        else
            o["build_command"] = build;
        return o;
    };
    j["host"]["shmem_enabled"] =
        r.shmem_enabled ? nlohmann::ordered_json(*r.shmem_enabled) : nlohmann::ordered_json(nullptr);
    j["host"]["guest_ram_huge_pages"] = shmem_gives_huge_pages(r.shmem_enabled);
    const std::string advice = shmem_advice(r.shmem_enabled);
    j["host"]["recommendation"] = advice.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(advice);
    j["guest"]["kernel"] = file(r.kernel, kBuildKernelCommand);
    j["guest"]["initramfs"] = file(r.initrd, kBuildInitrdCommand);
    j["daemon"] = {{"endpoint", r.daemon.endpoint}, {"answers", r.daemon.answers}, {"detail", r.daemon.detail}};
    fmt::print("{}\n", j.dump(2));
}

}  // namespace

int run_doctor(bool json) {
    try {
        const Report report = gather();
        if (json)
            print_json(report);
        else
            print_text(report);
        return 0;
    } catch (const std::exception& e) {
        log_line(fmt::format("doctor: {}", e.what()));
        return 1;
    }
}

}  // namespace nanovm
