// TypeScript usage of the `ferrolock` package (checked by `tsc --strict --noEmit` in
// ci/test-node.sh; run it compiled against a server on REDIS_URL).
import { Client, ErrorCode, type FerrolockError, type Held } from 'ferrolock';

// The protected resource must check the fence: reject anything older than the highest seen.
let highestFence = 0;
function fencedWrite(fence: number, value: string): void {
  if (fence < highestFence) throw new Error(`stale fence ${fence} < ${highestFence}`);
  highestFence = fence;
  console.log(`write ${value} under fence ${fence}`);
}

async function step(signal: AbortSignal, i: number): Promise<void> {
  // Long work checks the loss signal between steps (or passes it on: fetch, timers, streams).
  signal.throwIfAborted();
  await new Promise((resolve) => setTimeout(resolve, 10 * i));
}

export async function main(url = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379'): Promise<void> {
  const client = await Client.connect(url, { responseTimeout: 1000 });
  try {
    // 1. Explicit acquire with a bounded wait and caller cancellation; `await using` releases.
    const lock = client.lock('orders:42', { ttl: 10_000 });
    const cancel = AbortSignal.timeout(5_000);
    {
      await using held: Held = await lock.acquire({ wait: 2_000, signal: cancel });
      held.ensure(100); // at least 100 ms of validity left, or throws LOST
      fencedWrite(held.fence, 'first');
      const again = await lock.acquire(); // re-entry through the same handle
      console.log(`depth ${again.count}, same fence: ${again.fence === held.fence}`);
      await again.release();
      held.onLost((err) => console.error(`lost: ${err.code}`));
      await held.extend(5_000);
      console.log(`${held.state}, ${Math.round(held.remaining())} ms left`);
    }

    // 2. A watchdog-renewed lock around a callback; the signal aborts if the lock is lost.
    const total = await client.withLock('reports:daily', async (signal, held) => {
      let sum = 0;
      for (let i = 1; i <= 3; i++) {
        await step(signal, i);
        fencedWrite(held.fence, `part ${i}`);
        sum += i;
      }
      return sum;
    }, { wait: 1_000 });
    console.log(`total ${total}`);

    // 3. Non-blocking attempt and stable error codes.
    const maybe = await client.lock('orders:42').tryAcquire();
    if (maybe !== null) await maybe.release();
    try {
      await client.lock('orders:42', { ttl: -1 }).acquire();
    } catch (e) {
      const err = e as FerrolockError;
      if (err.code === ErrorCode.INVALID_DURATION) console.log('negative TTLs are refused');
      else throw err;
    }
  } finally {
    client.close();
  }
}

if (require.main === module) {
  main().catch((e: unknown) => {
    console.error(e);
    process.exitCode = 1;
  });
}
