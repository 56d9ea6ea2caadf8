/**
 * Writes a timeline of every write a process sends to PostgreSQL, MySQL or
 * Redis — time (ms since the epoch), pid, port, the statement's first
 * characters — for following one creation across the API and worker
 * processes (docs/benchmarks.md, "Night session"):
 *
 *   TL_TIMELINE_DIR=/tmp/tl TASKLEDGER_BENCH_NODE_ARGS="--import $PWD/scripts/timeline.mjs" \
 *     taskledger bench --dialect postgres --shapes db --tasks 5 --warmup 5 --serial 30 --no-peer --no-ceiling
 *   cat /tmp/tl/*.log | sort -n      # then read one creation from its Begin to its answer
 *
 * Preloaded (`--import`), it wraps `net.Socket#_writeGeneric` and appends
 * `<dir>/<pid>.log` every half second and at exit. Diagnostic only: nothing
 * in taskledger loads it.
 */
import { Buffer } from 'node:buffer';
import fs from 'node:fs';
import net from 'node:net';
import { performance } from 'node:perf_hooks';
import { setInterval } from 'node:timers';

const dir = process.env.TL_TIMELINE_DIR;
const PORTS = new Set([5432, 3306, 6379]);

if (dir) {
  fs.mkdirSync(dir, { recursive: true });
  const lines = [];
  const original = net.Socket.prototype._writeGeneric;
  net.Socket.prototype._writeGeneric = function (writev, data, encoding, cb) {
    if (PORTS.has(this.remotePort)) {
      const chunks = writev ? data.map((d) => d.chunk) : [data];
      const first = chunks.find((c) => Buffer.isBuffer(c) && (c[0] === 0x50 || c[0] === 0x51)) ?? chunks[0];
      const text = Buffer.isBuffer(first)
        ? first.toString('utf8', 0, Math.min(first.length, Number(process.env.TL_WIDTH ?? 160)))
        : String(first);
      const at = (performance.timeOrigin + performance.now()).toFixed(2);
      lines.push(`${at} ${process.pid} ${this.remotePort} ${text.replace(/[^\x20-\x7e]+/g, ' ').replace(/\s+/g, ' ')}`);
    }
    return original.call(this, writev, data, encoding, cb);
  };
  const flush = () => {
    if (lines.length > 0) fs.appendFileSync(`${dir}/${process.pid}.log`, `${lines.splice(0).join('\n')}\n`);
  };
  setInterval(flush, 500).unref();
  process.on('exit', flush);
}
