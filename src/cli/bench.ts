/**
 * `taskledger bench [...]`: creates N tasks end to end through the REST API
 * with M worker processes, for two shapes (DB effects only; with a real Git
 * worktree), on PostgreSQL and/or MySQL/MariaDB, and reports creations/s,
 * request-to-`task.created` latency (p50/p95/p99), a paced run's latency,
 * worker resident memory and the raw-SQL ceiling measured on the same
 * database (src/bench/, docs/benchmarks.md). Progress goes to stderr, the
 * report to stdout (and to `--json FILE`).
 *
 * Exit codes: 0 the bench ran and every creation completed (missed targets
 * are reported, not failures); 1 the bench could not run or a creation
 * failed; 2 bad options.
 */
import { writeFile } from 'node:fs/promises';
import { BENCH_USAGE, BenchUsageError, parseBenchArgs, type BenchOptions } from '../bench/options';
import { stopAllChildren } from '../bench/processes';
import { createProgress } from '../bench/progress';
import { renderReport } from '../bench/report';
import { runBench } from '../bench/run';
import { scrubPassword } from './redact';
import { EXIT } from './usage';

export async function benchCommand(args: string[]): Promise<number> {
  let options: BenchOptions;
  try {
    const parsed = parseBenchArgs(args);
    if ('help' in parsed) {
      console.log(BENCH_USAGE);
      return EXIT.OK;
    }
    options = parsed;
  } catch (err) {
    if (err instanceof BenchUsageError) {
      console.error(`taskledger bench: ${err.message}\n${BENCH_USAGE}`);
      return EXIT.USAGE;
    }
    throw err;
  }
  const progress = createProgress(process.stderr);
  // Interrupted: stop the API and worker processes this run started, then leave (nothing else is worth finishing).
  const interrupted = (signal: NodeJS.Signals) => {
    progress.note(`taskledger bench: ${signal}, stopping the fleet processes`);
    void stopAllChildren().finally(() => process.exit(signal === 'SIGINT' ? 130 : 143));
  };
  process.once('SIGINT', interrupted);
  process.once('SIGTERM', interrupted);
  try {
    const report = await runBench(options, progress);
    console.log(renderReport(report));
    if (options.json !== null) await writeFile(options.json, `${JSON.stringify(report, null, 2)}\n`);
    const failed = report.dialects.some((d) => d.shapes.some((s) => s.failed > 0 || (s.paced?.failed ?? 0) > 0));
    return failed ? EXIT.FAILED : EXIT.OK;
  } catch (err) {
    progress.done();
    let message = err instanceof Error ? err.message || String(err) : String(err);
    for (const url of [options.pgUrl, options.mysqlUrl, options.redisUrl]) message = scrubPassword(message, url);
    console.error(`taskledger bench: ${message}`);
    return EXIT.FAILED;
  } finally {
    process.off('SIGINT', interrupted);
    process.off('SIGTERM', interrupted);
  }
}
