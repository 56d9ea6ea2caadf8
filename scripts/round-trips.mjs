/**
 * Counts the PostgreSQL (or MySQL/MariaDB) round trips of a process by statement, for finding
 * where a creation's writes go (docs/benchmarks.md, "Round trips"):
 *
 *   TASKLEDGER_ROUND_TRIPS_DIR=/tmp/rt TASKLEDGER_BENCH_NODE_ARGS="--import ./scripts/round-trips.mjs" \
 *     taskledger bench --dialect postgres --shapes db --tasks 300 --warmup 0 --no-ceiling --no-peer --serial 0
 *   node scripts/round-trips.mjs /tmp/rt 320     # creations made (tasks + paced), prints per-process tables
 *
 * Preloaded (`--import`), it wraps `net.Socket#_writeGeneric`: every write
 * to port 5432 is one round trip's request (pg corks a parameterized query's
 * messages, and a batch's pipeline, into one write; a simple query is one write), and so is
 * every packet to port 3306 (mysql2 writes a query, batch or not, as one). It keys
 * each by its statements' first characters — an `EXECUTE` by the statement
 * its `PREPARE` named, so a round trip's key says what it carried — and
 * writes `<dir>/<pid>.json` every second and at exit. Diagnostic only:
 * nothing in taskledger loads it.
 */
import { Buffer } from 'node:buffer';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { setInterval } from 'node:timers';
import { pathToFileURL } from 'node:url';

const prepared = new Map(); // statement name -> its text (names are per process)
const short = (sql) => sql.replace(/\s+/g, ' ').trim().slice(0, 48);

// One label per statement of a simple-protocol message: an EXECUTE is named
// by the statement it runs, so one round trip's key says what it carried.
function labelsOf(text) {
  return text
    .split(/;\s*(?=START|COMMIT|ROLLBACK|PREPARE|EXECUTE|SELECT|INSERT|UPDATE|DELETE|WITH|SAVEPOINT|RELEASE)/)
    .map((statement) => {
      // PostgreSQL: PREPARE name AS text; MariaDB: PREPARE name FROM 'text' (the driver's escaped literal).
      const prepare =
        /^\s*PREPARE (\w+) AS ([\s\S]*)$/.exec(statement) ?? /^\s*PREPARE (\w+) FROM '([\s\S]*)'$/.exec(statement);
      if (prepare) {
        const text = prepare[2].replace(/\\(.)/g, '$1');
        prepared.set(prepare[1], short(text));
        return `P ${short(text)}`;
      }
      const execute = /^\s*EXECUTE (\w+)/.exec(statement);
      if (execute) return prepared.get(execute[1]) ?? execute[1];
      return short(statement);
    })
    .join(' | ');
}

/** A NUL-terminated string at `at`: its text and the offset after it. */
function cstring(buf, at, end) {
  const stop = buf.indexOf(0, at);
  const to = stop < 0 || stop > end ? end : stop;
  return [buf.toString('utf8', at, to), to + 1];
}

/**
 * One write's PostgreSQL messages, labelled: a simple query (`Q`) by its statements; an extended-protocol
 * pipeline (src/db/pg-pipeline.ts) by each statement it runs — a `Parse` of an unnamed statement by its text,
 * a named one as `P <text>` (and remembered), a `Bind` of a named one by the text its `Parse` carried.
 */
function statementOf(buf) {
  if (!Buffer.isBuffer(buf) || buf.length < 6) return '?';
  const labels = [];
  let kind = '';
  for (let at = 0; at + 5 <= buf.length;) {
    const type = String.fromCharCode(buf[at]);
    const end = Math.min(buf.length, at + 1 + buf.readInt32BE(at + 1));
    if (type === 'Q') {
      kind = 'Q';
      labels.push(labelsOf(cstring(buf, at + 5, end)[0]));
    } else if (type === 'P') {
      kind ||= 'X';
      const [name, next] = cstring(buf, at + 5, end);
      const text = short(cstring(buf, next, end)[0]);
      if (name) prepared.set(name, text);
      labels.push(name ? `P ${text}` : text);
    } else if (type === 'B') {
      kind ||= 'X';
      const [, next] = cstring(buf, at + 5, end);
      const name = cstring(buf, next, end)[0];
      if (name) labels.push(prepared.get(name) ?? name);
    }
    at = end;
  }
  if (labels.length) return `${kind} ${labels.join(' | ')}`;
  // A message without a statement (a password, a termination), or the startup message, which has no type byte.
  const type = String.fromCharCode(buf[0]);
  return /[A-Za-z]/.test(type) ? type : 'startup';
}

/** A MySQL/MariaDB client packet: 4 header bytes, then the command (0x03: a query, its text after it). */
function mysqlStatementOf(buf) {
  if (!Buffer.isBuffer(buf) || buf.length < 5) return '?';
  if (buf[4] !== 0x03) return `cmd ${buf[4]}`;
  return `Q ${labelsOf(buf.toString('utf8', 5))}`;
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const [dir, creations] = process.argv.slice(2);
  const n = Number(creations) || 1;
  for (const file of fs.readdirSync(dir).filter((f) => f.endsWith('.json'))) {
    const counts = JSON.parse(fs.readFileSync(path.join(dir, file), 'utf8'));
    const rows = Object.entries(counts).sort((a, b) => b[1] - a[1]);
    const total = rows.reduce((s, [, c]) => s + c, 0);
    console.log(`== pid ${file.replace('.json', '')}: ${total} round trips, ${(total / n).toFixed(1)} per creation`);
    for (const [k, c] of rows.slice(0, 40))
      console.log(`${String(c).padStart(7)} ${(c / n).toFixed(2).padStart(6)}  ${k.slice(0, 400)}`);
  }
} else {
  const dir = process.env.TASKLEDGER_ROUND_TRIPS_DIR;
  if (dir) {
    const counts = {};
    const original = net.Socket.prototype._writeGeneric;
    net.Socket.prototype._writeGeneric = function (writev, data, encoding, cb) {
      if (this.remotePort === 3306) {
        const key = mysqlStatementOf(writev ? data[0]?.chunk : data);
        counts[key] = (counts[key] || 0) + 1;
      } else if (this.remotePort === 5432) {
        // pg corks a pipeline's messages into one write of many chunks: read them as one buffer.
        const first = writev ? Buffer.concat(data.map((d) => d.chunk).filter((c) => Buffer.isBuffer(c))) : data;
        const key = statementOf(first);
        counts[key] = (counts[key] || 0) + 1;
      }
      return original.call(this, writev, data, encoding, cb);
    };
    fs.mkdirSync(dir, { recursive: true });
    const dump = () => fs.writeFileSync(path.join(dir, `${process.pid}.json`), JSON.stringify(counts));
    setInterval(dump, 1000).unref();
    process.on('exit', dump);
  }
}
