"""`nanovm --version` (and nanovmd's), then `nanovm sandbox|snapshot|doctor` against a
real nanovmd (no guest needed): the
documented exit statuses and messages (api/cli/daemon_client.hpp) when the daemon is
not running, for unknown ids, bad shapes, wrong use, over TCP with its token, and a
create that fails on this host with the daemon's own reason. Then the rest-state
commands (archive, unarchive, update, logs, metrics) on sandboxes seeded into a
daemon's store: one in `error` (no VM), one `archived` whose unarchive fails. TAP.
Usage: daemon_cli_test.py NANOVM"""
import json
import os
import re
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "daemon"))
from daemon_harness import Daemon, Tap  # noqa: E402

nanovm = sys.argv[1]
tap = Tap()


def run(*args, env=None, stdin=None, timeout=120):
    e = dict(os.environ)
    e.pop("NANOVM_URL", None)
    e.pop("NANOVM_TOKEN", None)
    e.update(env or {})
    p = subprocess.run([nanovm, *args], capture_output=True, text=True, env=e, input=stdin, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def expect(name, want, pattern, *args, env=None, stream="stderr"):
    code, out, err = run(*args, env=env)
    text = err if stream == "stderr" else out
    ok = code == want and pattern in text
    tap.ok(ok, f"{name} (exit {code}: {text.strip().splitlines()[0] if text.strip() else ''})",
           f"want exit {want} and {pattern!r}; got {code}\nstdout: {out}\nstderr: {err}")
    return code, out, err


scratch = tempfile.mkdtemp(prefix="nanovm-cli-test-", dir=os.environ.get("TMPDIR", "/tmp"))
missing = os.path.join(scratch, "nodaemon")
os.makedirs(missing)

# --version: the meson project version, and the git description the build recorded
# (a commit of this checkout); exit 0, on stdout. nanovmd (the link) says the same.
source_root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
with open(os.path.join(source_root, "meson.build")) as f:
    project_version = re.search(r"version : '([^']+)'", f.read()).group(1)
code, out, err = run("--version")
m = re.fullmatch(r"nanovm (\S+)(?: \(git (\S+)\))?\n", out)
tap.ok(code == 0 and m and m.group(1) == project_version,
       f"nanovm --version: exit 0, nanovm {project_version} ({out.strip()})", f"exit {code}\nstdout: {out}\nstderr: {err}")
head = subprocess.run(["git", "-C", source_root, "rev-parse", "HEAD"], capture_output=True, text=True)
if m and head.returncode == 0:
    described = re.sub(r"-dirty$", "", m.group(2) or "")
    commit = re.sub(r"^.*-g(?=[0-9a-f]+$)", "", described)  # TAG-N-gHASH, or HASH alone
    tap.ok(len(commit) >= 7 and head.stdout.strip().startswith(commit),
           f"... its git description names this checkout's commit ({m.group(2)})", head.stdout)
nanovmd = os.path.join(os.path.dirname(nanovm), "nanovmd")
if os.path.exists(nanovmd):
    p = subprocess.run([nanovmd, "--version"], capture_output=True, text=True, timeout=30)
    tap.ok(p.returncode == 0 and p.stdout == out, f"nanovmd --version: the same ({p.stdout.strip()})",
           f"exit {p.returncode}\nstdout: {p.stdout}\nstderr: {p.stderr}")
code, dout, err = run("daemon", "--version")
tap.ok(code == 0 and dout == out, "nanovm daemon --version: the same", f"exit {code}\nstdout: {dout}\nstderr: {err}")

# No daemon: 3, with how to start it (exec: 125, it keeps 0-124 for the command).
expect("sandbox ls without a daemon: 3, names the socket and how to start it", 3,
       f"nothing answers at unix socket {missing}/nanovmd.sock", "sandbox", "ls", "--state-dir", missing)
expect("... and says how to start it", 3, "Start it with: nanovm daemon --state-dir", "sandbox", "ls",
       "--state-dir", missing)
expect("$NANOVM_STATE_DIR is where the CLI looks", 3, f"{missing}/nanovmd.sock", "snapshot", "ls",
       env={"NANOVM_STATE_DIR": missing})
expect("sandbox exec without a daemon: 125", 125, "is the daemon running", "sandbox", "exec", "--state-dir", missing,
       str(uuid.uuid4()), "--", "true")
code, out, _ = run("doctor", "--json", env={"NANOVM_STATE_DIR": missing})
d = json.loads(out)["daemon"] if code == 0 else {}
tap.ok(d.get("endpoint") == f"unix socket {missing}/nanovmd.sock" and d.get("answers") is False,
       "doctor --json: the daemon's socket path, not answering", out)

daemon = Daemon(nanovm, listen=True).start()
state = daemon.state_dir
try:
    code, out, err = run("doctor", env={"NANOVM_STATE_DIR": state})
    tap.ok(code == 0 and f"unix socket {state}/nanovmd.sock" in out and "answers (version" in out,
           "doctor: the daemon's socket and that it answers", out + err)
    expect("sandbox ls: a table with its header", 0, "ID  STATE", "sandbox", "ls", "--state-dir", state,
           stream="stdout")
    code, out, err = run("sandbox", "ls", "--json", "--state-dir", state)
    tap.ok(code == 0 and json.loads(out) == [], "sandbox ls --json: []", out + err)
    code, out, err = run("snapshot", "ls", "--json", env={"NANOVM_STATE_DIR": state})
    tap.ok(code == 0 and json.loads(out) == [], "snapshot ls --json: []", out + err)

    nobody = str(uuid.uuid4())
    for args in (["sandbox", "get", nobody], ["sandbox", "pause", nobody], ["sandbox", "resume", nobody],
                 ["sandbox", "sleep", nobody], ["sandbox", "reboot", nobody],
                 ["sandbox", "snapshot", nobody], ["sandbox", "fork", nobody], ["sandbox", "rm", nobody],
                 ["snapshot", "get", nobody], ["snapshot", "wait", nobody], ["snapshot", "restore", nobody],
                 ["snapshot", "rm", nobody]):
        want = "sandbox_not_found" if args[0] == "sandbox" else "snapshot_not_found"
        expect(f"{' '.join(args[:2])} of an unknown id: 4, {want}", 4, want, *args, "--state-dir", state)
    expect("an id prefix nothing has: 4", 4, "no sandbox has an id starting with abc", "sandbox", "get", "abc",
           "--state-dir", state)
    expect("sandbox exec of an unknown id: 125 with the daemon's message", 125, "sandbox_not_found", "sandbox", "exec",
           nobody, "--state-dir", state, "--", "true")
    expect("sandbox cp from an unknown sandbox: 4", 4, "sandbox_not_found", "sandbox", "cp", f"{nobody}:/etc/hostname",
           os.path.join(scratch, "x"), "--state-dir", state)

    expect("create --cpus 9: 2 (the daemon's 422 out_of_range)", 2, "out_of_range", "sandbox", "create", "--cpus", "9",
           "--state-dir", state)
    expect("create --memory 1: 2, names memory_mb", 2, "memory_mb", "sandbox", "create", "--memory", "1",
           "--state-dir", state)
    expect("create --image of a host path: 2 (invalid_value)", 2, "invalid_value", "sandbox", "create", "--image",
           "/etc/passwd", "--state-dir", state)
    expect("create --label without '=': 2", 2, "--label x: want KEY=VALUE", "sandbox", "create", "--label", "x",
           "--state-dir", state)
    expect("an unknown sandbox command: 2, with the list", 2, "the sandbox commands are create, ls", "sandbox", "frob")
    expect("an unknown snapshot command: 2, with the list", 2, "the snapshot commands are ls, get", "snapshot", "frob")
    expect("sandbox exec without a command: 125 (a usage error of an exec)", 125, "command", "sandbox", "exec", nobody)
    expect("sandbox exec --session and --background together: 125", 125, "one or the other", "sandbox", "exec",
           nobody, "--session", "x", "--background", "--state-dir", state, "--", "true")
    expect("sandbox exec --session with --cwd: 125", 125, "no --cwd", "sandbox", "exec", nobody, "--session", "x",
           "--cwd", "/tmp", "--state-dir", state, "--", "true")
    expect("sandbox exec --background in an unknown sandbox: 125", 125, "sandbox_not_found", "sandbox", "exec", nobody,
           "--background", "--state-dir", state, "--", "true")
    # stdin travels as a JSON string: bytes that are not UTF-8 are refused by name,
    # before the sandbox is looked up, with where binary input goes instead.
    p = subprocess.run([nanovm, "sandbox", "exec", nobody, "-i", "--state-dir", state, "--", "cat"],
                       input=b"ok\xff\xfe", capture_output=True, timeout=60)
    tap.ok(p.returncode == 125 and b"not UTF-8 text (byte 2 of 4)" in p.stderr and b"sandbox cp" in p.stderr,
           f"sandbox exec -i with binary stdin: 125, says it is not UTF-8 (exit {p.returncode})", p.stderr.decode(errors="replace"))
    p = subprocess.run([nanovm, "sandbox", "exec", nobody, "-i", "--state-dir", state, "--", "cat"],
                       input="h\u00e9llo \u2603\n".encode(), capture_output=True, timeout=60)
    tap.ok(p.returncode == 125 and b"sandbox_not_found" in p.stderr,
           f"sandbox exec -i with UTF-8 stdin: sent (the unknown sandbox's 404; exit {p.returncode})",
           p.stderr.decode(errors="replace"))
    expect("sandbox exec -e with a 4 KiB value: sent (the unknown sandbox's 404)", 125, "sandbox_not_found", "sandbox",
           "exec", nobody, "-e", "TOKEN=" + "t" * 4096, "--state-dir", state, "--", "env")
    for args in (["session", "create", nobody], ["session", "ls", nobody], ["session", "rm", nobody, nobody],
                 ["command", "ls", nobody], ["command", "get", nobody, "1"], ["command", "kill", nobody, "1"],
                 ["command", "stdin", nobody, "1", "--eof"]):
        expect(f"sandbox {' '.join(args[:2])} of an unknown sandbox: 4", 4, "sandbox_not_found", "sandbox", *args,
               "--state-dir", state)
    for args in (["command", "logs", nobody, "1", "-f"], ["command", "wait", nobody, "1"]):
        expect(f"sandbox {' '.join(args[:2])} of an unknown sandbox: 125 (it exits as exec)", 125, "sandbox_not_found",
               "sandbox", *args, "--state-dir", state)
    expect("sandbox command kill --signal 99: 2 (the daemon's 422)", 2, "out_of_range", "sandbox", "command", "kill",
           nobody, "1", "--signal", "99", "--state-dir", state)
    for args in (["archive", nobody], ["unarchive", nobody], ["archive", nobody, "--no-wait"],
                 ["update", nobody, "--timeout", "5"], ["logs", nobody], ["logs", nobody, "--vmm"],
                 ["metrics", nobody]):
        expect(f"sandbox {' '.join(args[:1] + args[2:])} of an unknown sandbox: 4", 4, "sandbox_not_found",
               "sandbox", *args, "--state-dir", state)
    expect("sandbox cp between two host paths: 2", 2, "one sandbox", "sandbox", "cp", "/a", "/b", "--state-dir", state)
    expect("sandbox --help lists the exit statuses", 0, "3  the daemon is not running", "sandbox", "--help",
           stream="stdout")

    # Over loopback TCP: $NANOVM_URL, the token from <state>/token or $NANOVM_TOKEN.
    url = f"http://127.0.0.1:{daemon.tcp_port}"
    code, out, err = run("sandbox", "ls", "--json", "--state-dir", state, env={"NANOVM_URL": url})
    tap.ok(code == 0 and json.loads(out) == [], "NANOVM_URL: sandbox ls over TCP with the state dir's token", out + err)
    code, out, err = run("sandbox", "ls", "--json", "--state-dir", state,
                         env={"NANOVM_URL": f"http://localhost:{daemon.tcp_port}/"})
    tap.ok(code == 0 and json.loads(out) == [], "NANOVM_URL=http://localhost:PORT/: sandbox ls over TCP", out + err)
    expect("NANOVM_URL with a wrong NANOVM_TOKEN: 7, unauthorized", 7, "unauthorized", "sandbox", "ls",
           env={"NANOVM_URL": url, "NANOVM_TOKEN": "0" * 64})
    with tempfile.TemporaryDirectory() as tokenless:  # a state directory without a token file
        expect("NANOVM_URL without a token: 7, names NANOVM_TOKEN and the token file", 7,
               f"no token: set NANOVM_TOKEN or make {tokenless}/token readable", "sandbox", "ls",
               "--state-dir", tokenless, env={"NANOVM_URL": url, "NANOVM_TOKEN": ""})
        expect("snapshot ls: the same", 7, "no token", "snapshot", "ls", "--state-dir", tokenless,
               env={"NANOVM_URL": url, "NANOVM_TOKEN": ""})
    expect("NANOVM_URL that is not loopback: 2", 2, "only a loopback address", "sandbox", "ls",
           env={"NANOVM_URL": "http://10.0.0.1:80", "NANOVM_TOKEN": "x"})

    # A create: on a host whose /dev/kvm cannot boot the guest, the daemon's reason, exit 1.
    code, out, err = run("sandbox", "create", "--cpus", "1", "--memory", "256", "--state-dir", state, timeout=300)
    if code == 0:
        sid = out.strip()
        tap.ok(run("sandbox", "rm", sid, "--state-dir", state)[0] == 0, "a create where KVM boots the guest: made, removed")
    else:
        tap.ok(code == 1 and "vm_error" in err and "did not start" in err,
               f"a create where the guest cannot boot: exit 1 with the daemon's reason ({err.strip()[:150]})", err)
    # --autosleep and --on-timeout reach the daemon (accepted: a refused field is 400).
    code, out, err = run("sandbox", "create", "--cpus", "1", "--memory", "256", "--timeout", "600", "--autosleep",
                         "30", "--on-timeout", "archive", "--state-dir", state, timeout=300)
    if code == 0:
        code2, out2, _ = run("sandbox", "get", out.strip(), "--json", "--state-dir", state)
        made = json.loads(out2) if code2 == 0 else {}
        tap.ok((made.get("autosleep_s"), made.get("on_timeout"), made.get("timeout_s")) == (30, "archive", 600),
               "create --autosleep 30 --on-timeout archive --timeout 600: recorded", out2)
        run("sandbox", "rm", out.strip(), "--state-dir", state)
    else:
        tap.ok(code == 1 and "vm_error" in err,
               f"create --autosleep 30 --on-timeout archive: accepted, then the same vm_error ({err.strip()[:100]})",
               err)
    code, out, err = run("sandbox", "ls", "--json", "--state-dir", state)
    tap.ok(code == 0 and all(s["state"] != "creating" for s in json.loads(out)), "no sandbox is left creating", out)

    # Templates (that create went through the implicit template auto:default:1x256).
    code, out, err = run("template", "list", "--json", "--state-dir", state)
    tap.ok(code == 0 and [t["name"] for t in json.loads(out)] == ["auto:default:1x256"],
           "template list --json: the create's implicit template", out + err)
    code, out, err = run("template", "get", "auto:default:1x256", "--json", "--state-dir", state)
    tap.ok(code == 0 and json.loads(out)["name"] == "auto:default:1x256",
           "template get of the implicit template's name (its ':' percent-encoded in the URL)", out + err)
    expect("snapshot get of an id with ../: 4, snapshot_not_found (never another route)", 4, "snapshot_not_found",
           "snapshot", "get", "../../v1/health", "--state-dir", state)
    expect("template get of an unknown name: 4, template_not_found", 4, "template_not_found", "template", "get", "nope",
           "--state-dir", state)
    expect("template delete of an unknown name: 4", 4, "template_not_found", "template", "delete", "nope",
           "--state-dir", state)
    expect("sandbox create --template of an unknown name: 4", 4, "template_not_found", "sandbox", "create",
           "--template", "nope", "--state-dir", state)
    expect("template create with a bad name: 2 (invalid_value)", 2, "invalid_value", "template", "create", "Bad/Name",
           "--state-dir", state)
    expect("an unknown template command: 2, with the list", 2, "the template commands are create, list", "template",
           "frob")
    code, out, err = run("template", "create", "t1", "--cpus", "1", "--memory", "256", "--setup", "touch /baked",
                         "--state-dir", state, timeout=600)
    if code == 0:
        tap.ok(out.strip() == "t1", "template create: ready, its name printed", out + err)
    else:
        tap.ok(code == 1 and "template t1 failed" in err and out.strip() == "",
               f"template create where the guest cannot boot: exit 1 with the reason, no name on stdout "
               f"({err.strip()[:150]})", out + err)
    expect("template create of a name that exists: 5 (template_exists)", 5, "template_exists", "template", "create",
           "t1", "--state-dir", state)
    code, out, err = run("template", "get", "t1", "--json", "--state-dir", state)
    tap.ok(code == 0 and json.loads(out)["setup"] == ["touch /baked"], "template get --json: its setup line", out + err)
    tap.ok(run("template", "rm", "t1", "--state-dir", state)[0] == 0 and
           run("template", "get", "t1", "--state-dir", state)[0] == 4, "template rm, then get: 4")
finally:
    daemon.stop()

# The rest-state commands on sandboxes seeded into a stopped daemon's store (as
# tests/daemon/patch_test.py does): ERR in `error` without a VM (a crashed one whose
# VMM is gone: the daemon leaves it so at a start), ARC `archived` with an archive
# record and a blob file whose root image is pinned nowhere (its unarchive fails in
# the background: archived again, the reason in `error`).
ERR = "e1e1e1e1-0000-4000-8000-000000000001"
ARC = "e1e1a2a2-0000-4000-8000-000000000002"  # e1e1: a prefix of both
rest = Daemon(nanovm).start()  # makes the store's schema
rest.stop()
db = sqlite3.connect(os.path.join(rest.state_dir, "store.db"))
now = int(time.time() * 1000)
for sid, st, vm_id in ((ERR, "error", "0123456789ab"), (ARC, "archived", "")):
    db.execute("INSERT INTO sandboxes (id, state, error, cpus, memory_mb, labels, vm_id, created_ms, updated_ms) "
               "VALUES (?, ?, ?, 1, 256, ?, ?, ?, ?)",
               (sid, st, "seeded" if st == "error" else "", json.dumps({"k": "v"}), vm_id, now, now))
db.execute("INSERT INTO archives (sandbox_id, blob, state, created_ms) VALUES (?, ?, 'ready', ?)",
           (ARC, f"{ARC}-1.nva", now))
db.commit()
db.close()
# ERR's VM directory: what its VMM left (a console with a byte that is not UTF-8).
CONSOLE = b"[    0.000000] Linux version 6.1\nlogin: \xff\n"
VMM_LOG = b"nanovm: restored in 12 ms\nnanovm: the guest crashed\n"
os.makedirs(os.path.join(rest.state_dir, "vms", "0123456789ab"))
with open(os.path.join(rest.state_dir, "vms", "0123456789ab", "console.log"), "wb") as f:
    f.write(CONSOLE)
with open(os.path.join(rest.state_dir, "vms", "0123456789ab", "vmm.log"), "wb") as f:
    f.write(VMM_LOG)
os.makedirs(os.path.join(rest.state_dir, "archives"), exist_ok=True)
with open(os.path.join(rest.state_dir, "archives", f"{ARC}-1.nva"), "wb") as f:
    f.write(b"not an archive")
rest.start()
for _ in range(200):
    try:
        if rest.get("/v1/health").status == 200:
            break
    except OSError:
        pass
    time.sleep(0.05)
rs = rest.state_dir
try:
    def sandbox_json(*args):
        code, out, err = run("sandbox", *args, "--json", "--state-dir", rs)
        try:
            return code, json.loads(out), err
        except ValueError:
            return code, {}, err + out

    code, j, err = sandbox_json("update", "e1e1e", "--timeout", "60", "--autosleep", "30", "-l", "team=a", "-l", "n=1")
    tap.ok(code == 0 and (j.get("state"), j.get("timeout_s"), j.get("autosleep_s"), j.get("metadata")) ==
           ("error", 60, 30, {"team": "a", "n": "1"}) and j.get("end_at"),
           "update (a prefix) --timeout 60 --autosleep 30 -l team=a -l n=1 --json: the PATCHed sandbox", (code, j, err))
    code, j, err = sandbox_json("get", ERR)
    tap.ok((j.get("timeout_s"), j.get("autosleep_s"), j.get("metadata")) == (60, 30, {"team": "a", "n": "1"}),
           "... get: the same values, stored", j)
    code, j, err = sandbox_json("update", ERR, "--no-timeout", "--clear-labels")
    tap.ok(code == 0 and (j.get("timeout_s"), j.get("end_at"), j.get("metadata"), j.get("autosleep_s")) ==
           (None, None, {}, 30), "update --no-timeout --clear-labels: no timeout, no labels, autosleep kept",
           (code, j, err))
    code, out, err = run("sandbox", "update", ERR, "--autosleep", "0", "--state-dir", rs)
    tap.ok(code == 0 and out == "" and sandbox_json("get", ERR)[1].get("autosleep_s") == 0,
           "update --autosleep 0: exit 0, nothing on stdout (as pause and sleep), stored", (code, out, err))
    code, out, err = run("sandbox", "update", ERR, "--timeout", "604800", "--state-dir", rs)
    tap.ok(code == 0 and sandbox_json("get", ERR)[1].get("timeout_s") == 604800, "update --timeout 604800 (the most)",
           err)
    expect("update -l with a bad key: 2, the daemon's reason", 2, 'label key "bad key!": 1 to 63 of', "sandbox", "update", ERR, "-l",
           "bad key!=v", "--state-dir", rs)
    expect("update -l with a 256-byte value: 2, the daemon's reason", 2, 'label "k": at most 255 bytes', "sandbox", "update", ERR, "-l",
           "k=" + "v" * 256, "--state-dir", rs)
    expect("update of an ambiguous prefix: 2", 2, "give more of it", "sandbox", "update", "e1e1", "--timeout", "5",
           "--state-dir", rs)
    expect("archive of a sandbox in error: 5 (409 wrong_state)", 5, "wrong_state", "sandbox", "archive", ERR,
           "--state-dir", rs)
    expect("archive --no-wait of a sandbox in error: 5", 5, "wrong_state", "sandbox", "archive", ERR, "--no-wait",
           "--state-dir", rs)
    expect("unarchive of a sandbox in error: 5", 5, "wrong_state", "sandbox", "unarchive", ERR, "--state-dir", rs)
    code, m, err = sandbox_json("metrics", ERR)
    tap.ok(code == 0 and m.get("state") == "error" and m.get("vmm_running") is False,
           f"metrics --json of a sandbox without a VM: error, no VMM ({m})", (code, m, err))
    code, out, err = run("sandbox", "metrics", ERR, "--state-dir", rs)
    rows = [line.split() for line in out.splitlines()]
    tap.ok(code == 0 and len(rows) == 2 and rows[0] == ["STATE", "CPU_TIME", "VMM_RSS", "DISK", "VMM"] and
           rows[1][0] == "error" and rows[1][-1] == "stopped", f"metrics: a table ({' / '.join(out.splitlines())})",
           out + err)
    for args, want in ((["logs", ERR], CONSOLE), (["logs", ERR, "--vmm"], VMM_LOG),
                       (["logs", ERR, "--tail-bytes", "5"], CONSOLE[-5:]),
                       (["logs", ERR, "--vmm", "--tail-bytes", "26"], VMM_LOG[-26:]), (["logs", ARC], b"")):
        p = subprocess.run([nanovm, "sandbox", *args, "--state-dir", rs], capture_output=True, timeout=60)
        tap.ok(p.returncode == 0 and p.stdout == want,
               f"sandbox {' '.join(args[:1] + args[2:])}: exit 0, {want!r} byte for byte", (p.returncode, p.stdout, p.stderr))

    # ARC: archive of an archived sandbox is a no-op; its unarchive fails (no pinned image).
    code, j, err = sandbox_json("archive", ARC)
    tap.ok(code == 0 and j.get("state") == "archived", "archive of an archived sandbox: exit 0 at once (a no-op)",
           (code, j, err))
    code, out, err = run("sandbox", "unarchive", ARC, "--state-dir", rs)
    tap.ok(code == 1 and out == "" and f"sandbox {ARC}: the unarchive failed: it is archived now (unarchive failed: "
           in err and "not pinned" in err, f"unarchive that fails: exit 1 with the reason ({err.strip().splitlines()[-1][:160] if err.strip() else ''})",
           (code, out, err))
    code, j, err = sandbox_json("get", ARC)
    tap.ok(j.get("state") == "archived" and (j.get("error") or "").startswith("unarchive failed"),
           "... it is archived, the reason in error", j)
    code, out, err = run("sandbox", "unarchive", ARC, "--no-wait", "--state-dir", rs)
    # The 202's state: unarchiving, or archived again when the failing job was quicker
    # than the answer.
    tap.ok(code == 0 and out in ("unarchiving\n", "archived\n"),
           f"unarchive --no-wait: exit 0 at once, prints the state answered ({out.strip()})", (code, out, err))
    for _ in range(100):
        if sandbox_json("get", ARC)[1].get("state") != "unarchiving":
            break
        time.sleep(0.05)
    code, j, err = sandbox_json("unarchive", ARC)
    tap.ok(code == 1 and j.get("state") == "archived" and "unarchive failed" in err,
           "unarchive --json that fails: exit 1, prints the sandbox (archived)", (code, j, err))
    code, j, err = sandbox_json("update", ARC, "--timeout", "100")
    tap.ok(code == 0 and j.get("state") == "archived" and j.get("timeout_s") == 100,
           "update of an archived sandbox: its timeout_s, still archived", (code, j, err))
    expect("unarchive --no-wait of a sandbox in error: 5", 5, "wrong_state", "sandbox", "unarchive", ERR, "--no-wait",
           "--state-dir", rs)
finally:
    rest.stop()
sys.exit(tap.done())
