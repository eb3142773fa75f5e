#!/usr/bin/env python3
"""nanovmd's templates without a guest (docs/api.md "Templates"): POST /v1/templates
validation, 404 template_not_found for get, delete and a create with an unknown
template, 409 template_exists; the first create of an (image, shape) answers 503
template_building with Retry-After and the template is listed (implicit); it ends
ready or failed with its reason, never 503 for ever (on this machine's /dev/kvm the
guest cannot boot: failed, and the next create answers 502 vm_error with that reason);
a create over --max-memory is refused before any build; --implicit-templates 0 boots
cold (no template). Images pinned by templates: over a cache of its own (NANOVM_CACHE,
a small file as the default image and no kernel) a template build pins the image
(its image_digest is the file's SHA-256, <state>/images/<digest> has its bytes)
before its boot fails, keeps it when the cache's name is repointed, and the pin goes
with the template's delete. TAP.
Usage: template_test.py NANOVM"""

import hashlib
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from daemon_harness import Daemon, Tap, main_guard  # noqa: E402

UUID = "00000000-0000-4000-8000-000000000000"


def wait_built(d, name, deadline_s=240):
    end = time.time() + deadline_s
    while True:
        g = d.get(f"/v1/templates/{name}")
        if g.status != 200 or g.json()["state"] != "building" or time.time() >= end:
            return g
        time.sleep(0.5)


def run():
    nanovm = sys.argv[1]
    tap = Tap()
    d = Daemon(nanovm).start()
    try:
        def expect(name, answer, status, code):
            tap.ok(answer.status == status and answer.code() == code, f"{name}: {status} {code}", answer)

        post = d.post
        expect("a template without a name", post("/v1/templates", {"image": "default"}), 400, "invalid_field")
        expect("a template name with a slash", post("/v1/templates", {"name": "a/b"}), 422, "invalid_value")
        expect("a template name with upper case", post("/v1/templates", {"name": "Py"}), 422, "invalid_value")
        expect("a template name of 64 bytes", post("/v1/templates", {"name": "a" * 64}), 422, "invalid_value")
        expect("an unknown template field", post("/v1/templates", {"name": "a", "gpu": 1}), 400, "unknown_field")
        expect("setup as a string", post("/v1/templates", {"name": "a", "setup": "pip install x"}), 400, "invalid_field")
        expect("setup with a number", post("/v1/templates", {"name": "a", "setup": [1]}), 400, "invalid_field")
        expect("cpus 9", post("/v1/templates", {"name": "a", "cpus": 9}), 422, "out_of_range")
        expect("an image as a host path", post("/v1/templates", {"name": "a", "image": "/etc/passwd"}), 422,
               "invalid_value")
        expect("a template from an unknown snapshot", post("/v1/templates", {"name": "a", "snapshot_id": UUID}), 404,
               "snapshot_not_found")
        expect("a snapshot_id with setup lines", post("/v1/templates", {"name": "a", "snapshot_id": UUID,
                                                                        "setup": ["true"]}), 400, "invalid_field")
        expect("get an unknown template", d.get("/v1/templates/nope"), 404, "template_not_found")
        expect("delete an unknown template", d.request("DELETE", "/v1/templates/nope"), 404, "template_not_found")
        expect("a create from an unknown template", post("/v1/sandboxes", {"template": "nope"}), 404,
               "template_not_found")
        expect("a create with template and image", post("/v1/sandboxes", {"template": "a", "image": "default"}), 400,
               "invalid_field")
        tap.ok(d.get("/v1/templates").json() == {"templates": []}, "no template at first")

        # A named template with a setup line: 202 building, then ready or failed (here:
        # the guest cannot boot), with its fields.
        t = post("/v1/templates", {"name": "py-1.0", "cpus": 1, "memory_mb": 256, "setup": ["echo hi > /baked"]})
        tap.ok(t.status == 202 and t.json()["state"] in ("building", "failed") and t.json()["setup"] == ["echo hi > /baked"]
               and t.json()["implicit"] is False and t.json()["image"] == "default" and t.json()["image_digest"] is None,
               "POST /v1/templates: 202 with the template", t)
        expect("the same name again", post("/v1/templates", {"name": "py-1.0"}), 409, "template_exists")
        g = wait_built(d, "py-1.0")
        state = g.json()["state"]
        tap.ok(state == "ready" or (state == "failed" and g.json()["error"]), f"the named template ends {state}", g)
        if state == "failed":
            expect("a create from a failed template", post("/v1/sandboxes", {"template": "py-1.0"}), 409, "wrong_state")
        dl = d.request("DELETE", "/v1/templates/py-1.0")
        tap.ok(dl.status == 204 and d.get("/v1/templates/py-1.0").status == 404, "delete a template without sandboxes", dl)

        # The first create of an (image, shape): 503 template_building with Retry-After.
        c = post("/v1/sandboxes", {"cpus": 1, "memory_mb": 256})
        retry = c.headers.get("Retry-After", "")
        tap.ok(c.status == 503 and c.code() == "template_building" and retry.isdigit() and 1 <= int(retry) <= 5,
               f"the first create of an image and shape: 503 template_building, Retry-After {retry}", c)
        ls = d.get("/v1/templates").json()["templates"]
        tap.ok([x["name"] for x in ls] == ["auto:default:1x256"] and ls[0]["implicit"] and ls[0]["cpus"] == 1,
               "its implicit template is listed", ls)
        t0 = time.time()
        c, building = d.create({"cpus": 1, "memory_mb": 256}, deadline_s=240)
        tap.ok(c.status in (201, 502), f"then not 503 for ever: {c.status} after {building} more 503s "
                                       f"({time.time() - t0:.1f} s)", c)
        if c.status == 502:
            g = d.get("/v1/templates/auto:default:1x256").json()
            tap.ok(c.code() == "vm_error" and g["state"] == "failed" and g["error"] and g["error"] in c.body,
                   "a failed build: 502 vm_error with the template's reason", c)
        else:
            d.request("DELETE", f"/v1/sandboxes/{c.json()['id']}", timeout=120)
            tap.ok(c.json()["state"] == "running", "a ready template: 201 running")
        tap.ok(d.get("/v1/sandboxes").json()["sandboxes"] == [], "no sandbox record left behind")
    finally:
        code = d.stop()
        tap.ok(code == 0, f"SIGTERM: exit 0 ({code})", d.stderr()[-2000:])
        d.cleanup()

    capped = Daemon(nanovm, args=["--max-memory", "300", "--warm", "1", "--standbys", "2"]).start()
    try:
        a = capped.post("/v1/sandboxes", {"memory_mb": 512})
        tap.ok(a.status == 503 and a.code() == "over_capacity" and capped.get("/v1/templates").json()["templates"] == [],
               "a create over --max-memory: 503 over_capacity, no template build started", a)
    finally:
        capped.cleanup()

    # A cache of its own: rootfs/default -> default-1/disk.ext4, 1 MiB; no kernel (the boot fails after the pin).
    cache = tempfile.mkdtemp(prefix="nanovm-cache-")
    os.makedirs(os.path.join(cache, "rootfs", "default-1"))
    image = os.urandom(1 << 20)
    with open(os.path.join(cache, "rootfs", "default-1", "disk.ext4"), "wb") as f:
        f.write(image)
    os.symlink("default-1", os.path.join(cache, "rootfs", "default"))
    digest = hashlib.sha256(image).hexdigest()
    pinned = Daemon(nanovm, env={"NANOVM_CACHE": cache}).start()
    try:
        pin = os.path.join(pinned.state_dir, "images", digest)
        t = pinned.post("/v1/templates", {"name": "pinned", "cpus": 1, "memory_mb": 256})
        g = wait_built(pinned, "pinned")
        j = g.json() if g.status == 200 else {}
        tap.ok(j.get("state") == "failed" and "pinning" not in (j.get("error") or ""),
               "a template over the fake image: pinned, then its boot failed", (t, g))
        tap.ok(j.get("image_digest") == digest, "the template records the image's SHA-256", j)
        with open(pin, "rb") as f:
            tap.ok(f.read() == image, "<state>/images/<digest> holds the image's bytes")
        # tools/rootfs/build repoints default: the template still names its pin.
        os.makedirs(os.path.join(cache, "rootfs", "default-2"))
        with open(os.path.join(cache, "rootfs", "default-2", "disk.ext4"), "wb") as f:
            f.write(b"another image")
        os.unlink(os.path.join(cache, "rootfs", "default"))
        os.symlink("default-2", os.path.join(cache, "rootfs", "default"))
        tap.ok(pinned.get("/v1/templates/pinned").json().get("image_digest") == digest and os.path.exists(pin),
               "after the cache's default is repointed: the same digest, the pin kept")
        dl = pinned.request("DELETE", "/v1/templates/pinned")
        tap.ok(dl.status == 204 and not os.path.exists(pin),
               "the template deleted: its pin, named by nothing else, is removed", os.listdir(os.path.dirname(pin)))
    finally:
        pinned.cleanup()
        shutil.rmtree(cache, ignore_errors=True)

    cold = Daemon(nanovm, args=["--implicit-templates", "0"]).start()
    try:
        a = cold.post("/v1/sandboxes", {"cpus": 1, "memory_mb": 256}, timeout=300)
        tap.ok(a.status in (201, 502) and cold.get("/v1/templates").json()["templates"] == [],
               f"--implicit-templates 0: the create boots ({a.status}), no template", a)
        if a.status == 201:
            cold.request("DELETE", f"/v1/sandboxes/{a.json()['id']}", timeout=120)
    finally:
        cold.cleanup()
    return tap.done()


if __name__ == "__main__":
    main_guard(run)
