/**
 * `settledValue`: for work issued together (one round trip, or reads run
 * concurrently) whose results must still be checked one after another: the
 * value of a `Promise.allSettled` result, or its error thrown, so that the
 * caller fails exactly where a sequential run would have.
 */
export function settledValue<T>(r: PromiseSettledResult<T>): T {
  if (r.status === 'rejected') throw r.reason;
  return r.value;
}
