#!/usr/bin/env python3
"""nanovmd's templates with real guests, run INSIDE the test host
(tests/testhost/daemon_checks.sh), 256 MiB 1-vCPU sandboxes: the first create of an
(image, shape) answers 503 template_building with Retry-After, then the template is
ready and the next create is a restore (its vmm.log says so) with its own hostname;
a later one restores into the daemon's pre-made VMM; a named template with setup
lines whose file every sandbox made from it has; delete with dependants 409, forced
204 with the sandbox running on; a template from a snapshot that outlives the
snapshot; --warm (default 1): the next create takes the VM restored ahead; at
--max-memory warm VMs and standbys yield to sandboxes; everything deleted leaves no
template or VM directory. TAP (numbered from
1; the wrapper renumbers).
Usage: testhost_templates.py NANOVM"""

import json
import os
import re
import socket
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from daemon_harness import Daemon, Tap, main_guard  # noqa: E402

SHAPE = {"cpus": 1, "memory_mb": 256}
IMPLICIT = "auto:default:1x256"


def run():
    nanovm = sys.argv[1]
    tap = Tap()
    state = tempfile.mkdtemp(prefix="nvt.", dir="/tmp")  # short: the sockets' sun_path
    # --warm 0 first: the restore paths (a new VMM, the pre-made one) are checked
    # before the warm VMs the default keeps.
    d = Daemon(nanovm, state_dir=state, args=["--warm", "0"]).start()
    ok = tap.ok

    def sh(sid, line):
        a = d.post(f"/v1/sandboxes/{sid}/exec", {"cmd": line}, timeout=120)
        return a.json().get("stdout", "") if a.status == 200 else f"<{a}>"

    def vmm_log(sid):
        return d.get(f"/v1/sandboxes/{sid}/logs/vmm?tail_bytes=8192").body

    def wait_template(name, deadline_s=300):
        end = time.time() + deadline_s
        while True:
            g = d.get(f"/v1/templates/{name}")
            if g.status != 200 or g.json()["state"] != "building" or time.time() >= end:
                return g
            time.sleep(1)

    try:
        t0 = time.time()
        first = d.post("/v1/sandboxes", SHAPE)
        retry = first.headers.get("Retry-After", "")
        ok(first.status == 503 and first.code() == "template_building" and retry.isdigit(),
           f"the first create of (default, 1x256): 503 template_building, Retry-After {retry}", first)
        c, building = d.create(dict(SHAPE, metadata={"n": "1"}), deadline_s=300)
        g = d.get(f"/v1/templates/{IMPLICIT}").json()
        ok(c.status == 201 and g["state"] == "ready" and g["implicit"] and g["uses"] == 1,
           f"then ready: the create retried {building} more times, 201 after {time.time() - t0:.1f} s", c)
        if c.status != 201:
            print("# template: " + str(g))
            return tap.done()
        a = c.json()["id"]
        log_a = vmm_log(a)
        ok("restored" in log_a, "its vmm.log says the VM was restored, not booted", log_a[-1500:])
        ok(c.json().get("template") == IMPLICIT and d.get(f"/v1/sandboxes/{a}").json().get("template") == IMPLICIT,
           f"its Sandbox says template {IMPLICIT} (create and get)", c.json())
        t0 = time.time()
        c2, _ = d.create(SHAPE, deadline_s=60)
        ms = (time.time() - t0) * 1000
        b = c2.json()["id"] if c2.status == 201 else None
        ok(c2.status == 201 and "restored" in vmm_log(b), f"the next create: 201 at once, a restore ({ms:.0f} ms)", c2)
        ha, hb = sh(a, "hostname").strip(), sh(b, "hostname").strip() if b else ""
        ok(ha and hb and ha != hb and "<" not in ha + hb, f"each sandbox has its own hostname ({ha}, {hb})")
        # The pool: a standby of this shape is made after the first use; the next
        # create restores into it.
        sockets = os.path.join(state, "standbys", "1x256")
        end = time.time() + 60
        while time.time() < end and not any(n.endswith(".sock") for n in os.listdir(sockets) if os.path.isdir(sockets)):
            time.sleep(0.5)
        time.sleep(0.5)
        c3, _ = d.create(SHAPE, deadline_s=60)
        s3 = c3.json()["id"] if c3.status == 201 else None
        log3 = vmm_log(s3) if s3 else ""
        ok(c3.status == 201 and "standby made ahead" in log3 and sh(s3, "echo up") == "up\n",
           "a create restores into the daemon's pre-made VMM (its vmm.log says so) and answers", log3[-1500:])

        # A named template with setup lines: baked into every sandbox made from it.
        t0 = time.time()
        nt = d.post("/v1/templates", dict(SHAPE, name="baked", setup=["echo baked-$((6*7)) > /root/baked.txt", "sync"]))
        ok(nt.status == 202 and nt.json()["state"] == "building", "POST /v1/templates with setup lines: 202 building", nt)
        early = d.post("/v1/sandboxes", {"template": "baked"})
        ok(early.status == 503 and early.code() == "template_building" and early.headers.get("Retry-After"),
           "a create from it while it builds: 503 template_building", early)
        g = wait_template("baked")
        ok(g.status == 200 and g.json()["state"] == "ready", f"the named template is ready ({time.time() - t0:.1f} s)", g)
        kids = []
        for _ in range(2):
            k = d.post("/v1/sandboxes", {"template": "baked", "metadata": {"t": "baked"}}, timeout=120)
            if k.status == 201:
                kids.append(k.json()["id"])
        files = [sh(k, "cat /root/baked.txt") for k in kids]
        ok(len(kids) == 2 and files == ["baked-42\n", "baked-42\n"], f"two sandboxes from it, each with the setup's file "
                                                                    f"({files})")
        sh(kids[0], "echo mine > /root/baked.txt") if kids else None
        ok(kids and sh(kids[1], "cat /root/baked.txt") == "baked-42\n", "one's write does not reach the other")
        dl = d.request("DELETE", "/v1/templates/baked")
        ok(dl.status == 409 and dl.code() == "template_in_use", "delete it while sandboxes use it: 409 template_in_use", dl)
        df = d.request("DELETE", "/v1/templates/baked?force=true")
        ok(df.status == 204 and d.get("/v1/templates/baked").status == 404 and kids and
           sh(kids[1], "cat /root/baked.txt") == "baked-42\n", "force=true: 204, and its sandboxes run on", df)
        ok(kids and d.get(f"/v1/sandboxes/{kids[1]}").json().get("template") == "baked",
           "a sandbox made from it still says template baked after the delete")
        for k in kids:
            d.request("DELETE", f"/v1/sandboxes/{k}", timeout=120)

        # A template from a snapshot outlives the snapshot.
        sh(a, "echo from-a > /root/a.txt; sync")
        sn = d.post(f"/v1/sandboxes/{a}/snapshots", {"wait_durable": True}, timeout=300)
        st = d.post("/v1/templates", {"name": "from-snap", "snapshot_id": sn.json()["id"]}) if sn.status == 201 else sn
        ok(st.status == 202 and st.json()["state"] == "ready", "a template from a durable snapshot: ready at once", st)
        if sn.status == 201:
            d.request("DELETE", f"/v1/snapshots/{sn.json()['id']}")
        fs_ = d.post("/v1/sandboxes", {"template": "from-snap"}, timeout=120)
        ok(fs_.status == 201 and sh(fs_.json()["id"], "cat /root/a.txt") == "from-a\n",
           "after the snapshot is deleted, a sandbox from that template has the snapshot's file", fs_)

        # --warm 1 (the default): a VM restored ahead from the template; the next create
        # takes it (the daemon's log names the warm VM it took) and runs as its own
        # sandbox, with its own id as hostname like every sandbox.
        d.stop()
        d = Daemon(nanovm, state_dir=state).start()
        vms = os.path.join(state, "vms")
        before = set(os.listdir(vms))
        w1, _ = d.create(SHAPE, deadline_s=60)  # a restore; a warm VM is made behind it
        end = time.time() + 90
        while time.time() < end and not re.search(r"warm VM [0-9a-f]+ ready \(paused", d.stderr()):
            time.sleep(0.5)  # restored, its agent answered, paused: the daemon logs it ready
        made = set(os.listdir(vms)) - before
        paused = re.search(r"warm VM ([0-9a-f]+) ready \(paused", d.stderr())
        vm_state = ""
        if paused:
            ctl = os.path.join(vms, paused.group(1), "control.sock")
            try:
                c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                c.settimeout(10)
                c.connect(ctl)
                c.sendall(b'{"command": "status"}\n')
                vm_state = json.loads(c.makefile().readline()).get("state", "")
                c.close()
            except (OSError, ValueError) as e:
                vm_state = f"? ({e})"
        ok(vm_state == "paused", f"--warm 1: the VM restored ahead waits paused (its VMM says {vm_state!r})")
        t0 = time.time()
        w2, _ = d.create(SHAPE, deadline_s=60)
        ms = (time.time() - t0) * 1000
        w2_id = w2.json()["id"] if w2.status == 201 else "?"
        took = re.search(r"sandbox " + re.escape(w2_id) + r": took warm VM ([0-9a-f]+)", d.stderr())
        h1 = sh(w1.json()["id"], "hostname").strip() if w1.status == 201 else ""
        h2 = sh(w2_id, "hostname").strip() if w2.status == 201 else ""
        ok(w2.status == 201 and took is not None and took.group(1) in made and
           h1 == w1.json()["id"] and h2 == w2_id and sh(w2_id, "echo ok") == "ok\n",
           f"--warm 1: the next create takes the VM restored ahead ({took.group(1) if took else None} of "
           f"{sorted(made)}; {ms:.0f} ms), hostnames are the sandboxes' ids ({h1}, {h2})", w2)

        # Warm VMs and standbys yield to sandboxes at --max-memory: 768 MiB holds three
        # 256 MiB sandboxes, whatever the warm VM and the standby held; a fourth is 503.
        for x in d.get("/v1/sandboxes").json()["sandboxes"]:
            d.request("DELETE", f"/v1/sandboxes/{x['id']}", timeout=120)
        d.stop()
        d = Daemon(nanovm, state_dir=state, args=["--max-memory", "768", "--warm", "1", "--standbys", "1"]).start()
        capped = []
        for i in range(3):
            if i == 1:  # the warm VM restored behind the first create is ready: the second takes it
                end = time.time() + 90
                while time.time() < end and not re.search(r"warm VM [0-9a-f]+ ready \(paused", d.stderr()):
                    time.sleep(0.5)
            r, _ = d.create(SHAPE, deadline_s=60)
            capped.append(r)
        ids = [r.json()["id"] for r in capped if r.status == 201]
        took = len(ids) > 1 and re.search(r"sandbox " + re.escape(ids[1]) + r": took warm VM", d.stderr()) is not None
        yielded = re.search(r"templates: (\d+) MiB yielded to a sandbox \(\d+ asked; (\d+) warm restore\(s\) "
                            r"cancelled, (\d+) standby\(s\) ended, (\d+) warm VM\(s\) stopped\)", d.stderr())
        answers = [sh(x, "echo up") for x in ids]
        ok(len(ids) == 3 and took and yielded is not None and int(yielded.group(1)) >= 256 and
           answers == ["up\n"] * 3,
           f"--max-memory 768 with a warm VM and a standby: three 256 MiB sandboxes fit (the second took the warm "
           f"VM: {took}; {yielded.group(0) if yielded else 'nothing yielded'}; answers {answers})",
           next((r for r in capped if r.status != 201), None))
        over = d.post("/v1/sandboxes", SHAPE, timeout=120)
        ok(over.status == 503 and over.code() == "over_capacity",
           "a fourth: 503 over_capacity (the sandboxes alone fill the cap)", over)
        if ids:
            d.request("DELETE", f"/v1/sandboxes/{ids[-1]}", timeout=120)
        again, _ = d.create(SHAPE, deadline_s=60)
        ok(again.status == 201 and sh(again.json()["id"], "echo up") == "up\n",
           "one deleted: the next create fits again", again)
        for x in d.get("/v1/sandboxes").json()["sandboxes"]:
            d.request("DELETE", f"/v1/sandboxes/{x['id']}", timeout=120)
        d.stop()
        d = Daemon(nanovm, state_dir=state).start()
        d.create(SHAPE, deadline_s=60)  # a restore, and a warm VM made behind it (deleted below)

        # Everything deleted: no template, snapshot or VM directory left (once the warm
        # VM made behind the last create is there: deleting its template stops it).
        end = time.time() + 90
        while time.time() < end and len(os.listdir(vms)) < len(d.get("/v1/sandboxes").json()["sandboxes"]) + 1:
            time.sleep(0.5)
        for x in d.get("/v1/sandboxes").json()["sandboxes"]:
            d.request("DELETE", f"/v1/sandboxes/{x['id']}", timeout=120)
        for x in d.get("/v1/templates").json()["templates"]:
            d.request("DELETE", f"/v1/templates/{x['name']}")
        left = {sub: sorted(os.listdir(os.path.join(state, sub))) if os.path.isdir(os.path.join(state, sub)) else []
                for sub in ("vms", "snapshots", "templates")}
        ok(d.get("/v1/templates").json()["templates"] == [] and not any(left.values()),
           f"all deleted: no VM, snapshot or template directory left ({left})")
    finally:
        if d.alive():
            d.stop()
        if tap.failed:
            d.print_stderr_tail()
    return tap.done()


if __name__ == "__main__":
    main_guard(run)
