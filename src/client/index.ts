/**
 * `taskledger/client`: what a producer imports (package.json "exports").
 * `TaskLedgerClient` creates over REST, retrying a lost answer by external
 * ID; `AdmissionProducer` enqueues onto the admission queue and awaits the
 * outcome. Both throw `TaskLedgerApiError` with the API's stable codes.
 * See docs/producers.md and examples/producer.ts.
 */
export { TaskLedgerClient, type TaskLedgerClientOptions } from './rest-client';
export { AdmissionProducer, type AdmissionProducerOptions } from './admission-producer';
export { TaskLedgerApiError, type CreateTaskAnswer, type CreateTaskRequest } from './types';
