/**
 * Traces every socket write and read of a process with its time, for following one creation across the fleet's
 * processes (docs/benchmarks.md, "Where one creation at a time spends its time"):
 *
 *   TRACE_DIR=/tmp/trace TASKLEDGER_BENCH_NODE_ARGS="--import $PWD/scripts/trace-sockets.mjs" \
 *     taskledger bench --dialect postgres --shapes db --tasks 20 --warmup 0 --no-ceiling --no-peer --serial 20 \
 *       --paced-seconds 1 --rate 5
 *   grep -a <operation id> /tmp/trace/*.log   # then read every process's lines around those times
 *
 * Preloaded (`--import`), it wraps `net.Socket#_writeGeneric` (a request: PostgreSQL 5432, Redis 6379, MySQL 3306,
 * HTTP) and `net.Socket#push` (an answer arriving) and appends `<epoch ms> <port or R<port>> <first bytes>` lines to
 * `<TRACE_DIR>/<pid>.log` every half second and at exit. Diagnostic only: nothing in taskledger loads it.
 */
import { Buffer } from 'node:buffer';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import process from 'node:process';
import { setInterval } from 'node:timers';

const file = path.join(process.env.TRACE_DIR ?? '/tmp', `${process.pid}.log`);
const lines = [];
const now = () => (performance.timeOrigin + performance.now()).toFixed(3);
const printable = (text) => text.replace(/[^\x20-\x7e]+/g, ' ');

const write = net.Socket.prototype._writeGeneric;
net.Socket.prototype._writeGeneric = function (writev, data, encoding, cb) {
  const chunks = writev ? data.map((d) => d.chunk ?? d) : [data];
  const text = chunks.map((c) => (Buffer.isBuffer(c) ? c.toString('latin1') : String(c))).join('');
  lines.push(`${now()} ${this.remotePort} ${printable(text.slice(0, 600))}`);
  return write.call(this, writev, data, encoding, cb);
};

const push = net.Socket.prototype.push;
net.Socket.prototype.push = function (chunk, encoding) {
  if (Buffer.isBuffer(chunk)) {
    lines.push(`${now()} R${this.remotePort} len=${chunk.length} ${printable(chunk.toString('latin1', 0, 60))}`);
  }
  return push.call(this, chunk, encoding);
};

const flush = () => {
  if (lines.length > 0) fs.appendFileSync(file, `${lines.splice(0).join('\n')}\n`);
};
setInterval(flush, 500).unref();
process.on('exit', flush);
