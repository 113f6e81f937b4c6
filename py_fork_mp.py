"""multiprocessing with the fork start method (the gunicorn --preload pattern): a module-level
client created in the parent, used in the workers."""
import os, sys, multiprocessing as mp, ferrolock
URL = sys.argv[1]
CLIENT = ferrolock.Client.connect(URL)
HELD = CLIENT.lock("mp-parent").acquire()
def work(i):
    try:
        with CLIENT.lock(f"mp-{i}"):
            return (i, "used parent client OK")
    except ferrolock.ClosedError as e:
        c = ferrolock.Client.connect(URL)
        with c.lock(f"mp-{i}") as h:
            return (i, f"ClosedError then own client fence={h.fence}")
if __name__ == "__main__":
    ctx = mp.get_context("fork")
    with ctx.Pool(4) as p:
        for r in p.map(work, range(8)): print(r)
    print("parent hold state:", HELD.state, CLIENT.inspect("mp-parent"))
    HELD.release()
