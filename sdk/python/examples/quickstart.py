"""The README's quick start: a sandbox, a command, a file, a durable snapshot, a fork
and a restore through nanovmd, then everything deleted.

    tools/testhost/run --with-daemon -- python3 sdk/python/examples/quickstart.py
    PYTHONPATH=sdk/python python3 sdk/python/examples/quickstart.py   # with nanovmd running
"""
from lithosbox import LithosBox

with LithosBox() as box:                          # finds nanovmd like the nanovm CLI does
    sandbox = box.sandboxes.create(cpus=1, memory_mb=256)
    print("sandbox", sandbox.id, sandbox.state)
    print(sandbox.run("uname -sr").check().stdout, end="")

    sandbox.files.write("/work/result.txt", "first result\n")
    snapshot = sandbox.snapshot(wait_durable=True)
    print("snapshot", snapshot.id, "durable:", snapshot.durable)

    child = sandbox.fork()
    child.run("echo other > /work/result.txt").check()
    restored = box.snapshots.restore(snapshot.id)
    print("parent:", sandbox.files.read("/work/result.txt"), end="")
    print("child:", child.files.read("/work/result.txt"), end="")
    print("restored:", restored.files.read("/work/result.txt"), end="")

    for s in (sandbox, child, restored):
        s.delete()
    box.snapshots.delete(snapshot.id)
