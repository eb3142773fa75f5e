// The `nanovm` command line (CLI11): one subcommand per file (*_command.cpp).
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <exception>
#include <string>
#include <string_view>
#include <vector>

#include "api/cli/boot_command.hpp"
#include "api/daemon/daemon.hpp"
#include "api/daemon/daemon_options.hpp"
#include "api/cli/doctor_command.hpp"
#include "api/cli/exec_stream.hpp"
#include "api/cli/exit_status.hpp"
#include "api/cli/run_command.hpp"
#include "api/cli/sandbox_command.hpp"
#include "api/cli/snapshot_command.hpp"
#include "api/cli/template_command.hpp"
#include "api/cli/vm_command.hpp"
#include "api/version/version.hpp"
#include "vmm/error.hpp"
#include "vmm/log.hpp"

int main(int argc, char** argv) {
    using namespace nanovm;
    // build/nanovmd (a link to this binary) is `nanovm daemon`.
    std::vector<char*> daemon_argv;
    if (argc > 0 && (std::string_view(argv[0]) == "nanovmd" || std::string_view(argv[0]).ends_with("/nanovmd"))) {
        static char daemon_word[] = "daemon";
        daemon_argv.assign(argv, argv + argc);
        daemon_argv.insert(daemon_argv.begin() + 1, daemon_word);
        argc = static_cast<int>(daemon_argv.size());
        daemon_argv.push_back(nullptr);
        argv = daemon_argv.data();
    }
    try {
        CLI::App app{"nanovm: a VMM and sandbox service on /dev/kvm"};
        app.require_subcommand(1);
        // `nanovm --version`; `nanovmd --version` is `nanovm daemon --version` (below).
        app.set_version_flag("--version", version_text(), "Print the version (and the git description of the build) and exit");

        BootOptions boot_options;
        CLI::App* boot = app.add_subcommand("boot", "Boot a Linux guest with its serial console on this terminal");
        boot->add_option("--kernel", boot_options.kernel,
                         "Guest kernel (bzImage or ELF vmlinux) [default: ${NANOVM_CACHE:-${XDG_CACHE_HOME:-"
                         "$HOME/.cache}/nanovm}/kernel/current/bzImage]")
            ->type_name("FILE");
        boot->add_option("--initrd", boot_options.initrd,
                         "Initramfs [default: guest-init/initramfs.cpio.lz4 next to the nanovm binary]")
            ->type_name("FILE");
        boot->add_option("--cmdline", boot_options.cmdline,
                         std::string("Kernel command line, replacing the default \"") + kDefaultCmdline + "\"");
        boot->add_option("--append", boot_options.append, "Add to the kernel command line (repeatable)")
            ->type_name("TEXT");
        boot->add_option("--cpus", boot_options.cpus, "vCPUs (1 to 4)")
            ->type_name("N")
            ->check(CLI::Range(kMinCpus, kMaxCpus).description(""))
            ->capture_default_str();
        boot->add_option("--memory", boot_options.memory_mib, "Guest RAM in MiB (128 to 8192)")
            ->type_name("MiB")
            ->check(CLI::Range(kMinMemoryMib, kMaxMemoryMib).description(""))
            ->capture_default_str();
        boot->add_option("--console", boot_options.console, "Write the guest console to FILE instead of stdout")
            ->type_name("FILE");
        boot->add_flag("--until-ready", boot_options.until_ready,
                       std::string("Power off once guest-init is ready (adds ") + kUntilReadyParam + ")");
        std::vector<std::string> disk_specs;
        std::string root_spec, net_spec, vsock_spec;
        boot->add_option("--root", root_spec,
                         "Boot from an ext4 root disk (tools/rootfs/build --print-path default|tiny): "
                         "PATH[,ro][,serial=ID]; it becomes /dev/vda, the kernel runs /sbin/nanovm-init from it, "
                         "no initramfs unless --initrd. Read-write unless ro: the guest changes the image")
            ->type_name("SPEC");
        bool no_rng = false;
        boot->add_option("--disk", disk_specs,
                         "A raw disk image as virtio-blk: PATH[,ro][,serial=ID] (repeatable; /dev/vda, vdb, ... "
                         "in order, after the --root disk if any)")
            ->type_name("SPEC");
        boot->add_option("--scratch", boot_options.scratch,
                         "A 16 GiB sparse writable scratch disk at FILE (created if missing), after the --disk ones")
            ->type_name("FILE");
        boot->add_option("--net", net_spec, "virtio-net on a tap device: TAP[,mac=52:54:00:12:34:56]")
            ->type_name("SPEC");
        boot->add_option("--vsock", vsock_spec,
                         "virtio-vsock with its host side on a Unix socket: PATH[,cid=N] (default cid 3); host "
                         "programs connect to PATH and send \"CONNECT <port>\\n\"; guest connections to host port P "
                         "reach PATH_P")
            ->type_name("SPEC");
        boot->add_flag("--no-rng", no_rng, "No virtio-rng device");
        boot->add_option("--stats", boot_options.stats, "At exit, write device counters as JSON to FILE")
            ->type_name("FILE");
        boot->footer(std::string("Console: guest serial output goes to stdout (or --console FILE); stdin goes to the "
                                 "guest.\nOn a terminal, stdin is in raw mode: Ctrl-C goes to the guest, Ctrl-A x "
                                 "quits nanovm, Ctrl-A Ctrl-A sends Ctrl-A.\n\n") +
                     exit_status::kHelpText);

        bool doctor_json = false;
        CLI::App* doctor = app.add_subcommand("doctor", "Report what this host offers nanovm and what is built");
        doctor->add_flag("--json", doctor_json, "One JSON object instead of a table");

        // A VMM process (`boot`, `_vmm`, `_standby`: one per VM) builds only the commands
        // it can be, not the daemon's, run, sandbox, snapshot and template ones: their
        // CLI11 objects stayed in every VMM's heap and their setup code in its RSS (the
        // parse before run_boot took 1.0 MiB of RSS natively, 2026-12-02).
        const std::string_view first_word = argc > 1 ? std::string_view(argv[1]) : std::string_view();
        const bool vmm_process = first_word == "boot" || first_word == "_vmm" || first_word == "_standby";

        daemon::DaemonOptions daemon_options;
        CLI::App* daemon_cmd = vmm_process ? nullptr : daemon::add_daemon_command(app, daemon_options);
        if (daemon_cmd) daemon_cmd->set_version_flag("--version", version_text(), "Print the version and exit");

        RunOptions run_options;
        CLI::App* run = vmm_process ? nullptr : add_run_command(app, run_options);
        VmCommandOptions vm_options;
        const VmCommands vm_commands = add_vm_commands(app, vm_options);
        cli::SandboxOptions sandbox_options;
        cli::SnapshotOptions snapshot_options;
        cli::TemplateOptions template_options;
        cli::SandboxCommands sandbox_commands;
        cli::SnapshotCommands snapshot_commands;
        cli::TemplateCommands template_commands;
        if (!vmm_process) {
            sandbox_commands = cli::add_sandbox_commands(app, sandbox_options);
            snapshot_commands = cli::add_snapshot_commands(app, snapshot_options);
            template_commands = cli::add_template_commands(app, template_options);
        }

        // CLI11 answers an unknown command word (or an option where one belongs) with
        // "A subcommand is required": say what was wrong instead, for `nanovm WORD`
        // and `nanovm vm WORD`.
        const auto unknown_word = [](const CLI::App& parent, std::string_view word, std::string_view prefix) {
            if (word == "-h" || word == "--help" || word == "--version") return false;
            const std::string w(word);
            if (!parent.get_subcommands([&](const CLI::App* s) { return s->check_name(w); }).empty()) return false;
            std::string names;
            for (const CLI::App* sub : parent.get_subcommands([](const CLI::App* s) { return !s->get_group().empty(); }))
                names += (names.empty() ? "" : ", ") + sub->get_name();
            log_line(fmt::format("{} '{}'; the {}commands are {} (nanovm {}--help)",
                                 word.starts_with('-') ? "unknown option" : "unknown command", word, prefix, names,
                                 prefix));
            return true;
        };
        if (argc > 1 && unknown_word(app, argv[1], "")) return exit_status::kUsage;
        if (argc > 2 && std::string_view(argv[1]) == "vm" && unknown_word(*vm_commands.vm, argv[2], "vm "))
            return exit_status::kUsage;
        if (argc > 2 && std::string_view(argv[1]) == "sandbox" && !std::string_view(argv[2]).starts_with("-") &&
            unknown_word(*sandbox_commands.group, argv[2], "sandbox "))
            return exit_status::kUsage;
        if (argc > 2 && std::string_view(argv[1]) == "snapshot" && !std::string_view(argv[2]).starts_with("-") &&
            unknown_word(*snapshot_commands.group, argv[2], "snapshot "))
            return exit_status::kUsage;
        if (argc > 2 && std::string_view(argv[1]) == "template" && !std::string_view(argv[2]).starts_with("-") &&
            unknown_word(*template_commands.group, argv[2], "template "))
            return exit_status::kUsage;
        try {
            app.parse(argc, argv);
        } catch (const CLI::ParseError& e) {
            const int code = app.exit(e);  // prints help or the error
            if (code == 0) return 0;
            // `run` and `vm exec` keep 0-124 for the command's own statuses
            // (api/cli/exec_stream.hpp): their usage errors are 125, not 2.
            const auto arg = [&](int i) { return argc > i ? std::string_view(argv[i]) : std::string_view(); };
            const bool exec_like =
                arg(1) == "run" || ((arg(1) == "vm" || arg(1) == "sandbox") && arg(2) == "exec");
            return exec_like ? kExecNanovmError : exit_status::kUsage;
        }
        if (!vmm_process) {
            if (*run) return run_run(run_options);
            if (*daemon_cmd) return daemon::run_daemon(daemon_options);
            if (*sandbox_commands.group) return cli::run_sandbox_command(sandbox_commands, sandbox_options);
            if (*snapshot_commands.group) return cli::run_snapshot_command(snapshot_commands, snapshot_options);
            if (*template_commands.group) return cli::run_template_command(template_commands, template_options);
        }
        if (*vm_commands.vm || *vm_commands.vmm || *vm_commands.standby) return run_vm_command(vm_commands, vm_options);
        if (*boot) {
            try {
                if (!root_spec.empty()) {
                    boot_options.disks.push_back(parse_disk_option(root_spec));
                    boot_options.root_disk = true;
                }
                for (const std::string& spec : disk_specs) boot_options.disks.push_back(parse_disk_option(spec));
                if (!net_spec.empty()) boot_options.net = parse_net_option(net_spec);
                if (!vsock_spec.empty()) boot_options.vsock = parse_vsock_option(vsock_spec);
                boot_options.rng = !no_rng;
            } catch (const Error& e) {
                log_line(e.what());
                return exit_status::kUsage;
            }
            return run_boot(boot_options);
        }
        if (*doctor) return run_doctor(doctor_json);
        return exit_status::kUsage;
    } catch (const std::exception& e) {
        log_line(e.what());
    } catch (...) {
        log_line("unknown error");
    }
    return exit_status::kError;
}
