/**
 * One pass per key at a time in this process, with one trailing pass: a call
 * while a pass runs joins the pass that starts after it (so every caller
 * awaits a pass that began after its call, and gets that pass's error), and
 * any number of calls during one pass share that single trailing pass.
 *
 * Why: each in-place outbox delivery reads every undelivered event of the
 * workspace. Sixteen creations completing together in one workspace would
 * otherwise run sixteen passes over the same events, each repeating the
 * others' deliveries (harmless, as deliveries are idempotent, but each one a
 * wasted transaction and launch attempt).
 */
export function singleFlight<T>(pass: (key: string) => Promise<T>): (key: string) => Promise<T> {
  const running = new Map<string, Promise<T>>();
  const trailing = new Map<string, Promise<T>>();
  const start = (key: string): Promise<T> => {
    const p = pass(key).finally(() => {
      if (running.get(key) === p) running.delete(key);
    });
    running.set(key, p);
    return p;
  };
  return (key) => {
    // The trailing pass first: between the end of a pass and the start of its trailing one, nothing is running.
    const queued = trailing.get(key);
    if (queued) return queued;
    const current = running.get(key);
    if (!current) return start(key);
    const next = current
      .catch(() => undefined)
      .then(() => {
        trailing.delete(key);
        return start(key);
      });
    trailing.set(key, next);
    return next;
  };
}
