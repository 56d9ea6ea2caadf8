/**
 * A stored step's request is parsed and validated once per step while its bytes are unchanged (`parsedStepRequest`,
 * store/step-rows.ts, behind `stepRequestOf` and the derivation `verifyStepRequest` memoises; ADR 0050): a batch,
 * both phases of Complete and the launch read one step's request about ten times per creation, and each read
 * re-parsed, re-canonicalized and re-validated the same text. A hit needs the identical kind and text; changed bytes
 * are validated from scratch, and rejected when they are not a valid request. A stored text `parseCanonical`
 * accepted is hashed as it is (`canonicalTextHash`), the same hash as its document's. Pure: no database is
 * involved, so there is no dialect to run it on.
 */
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { canonicalJson } from '../../src/canonical/canonical-json';
import {
  canonicalTextHash,
  domainHash,
  PLAN_DOMAIN,
  STEP_REQUEST_DOMAIN,
  stepRequestHash,
} from '../../src/canonical/hash';
import type { StepRequest } from '../../src/canonical/types';
import { stepRequestOf } from '../../src/store/effects/recording';
import type { StepRow } from '../../src/store/types';

function launchStep(overrides: Record<string, unknown> = {}): StepRow {
  const request = {
    task_id: randomUUID(),
    workspace_id: randomUUID(),
    session_id: randomUUID(),
    agent_profile_id: randomUUID(),
    executor_id: randomUUID(),
    executor_profile_id: randomUUID(),
    launch_config_sha256: 'a'.repeat(64),
    ...overrides,
  };
  return { id: randomUUID(), kind: 'launch_intent', request_json: canonicalJson(request) } as unknown as StepRow;
}

describe('a step request read from its stored bytes', () => {
  it('is validated once while the bytes are unchanged: every read answers the same frozen request', () => {
    const step = launchStep();
    const first = stepRequestOf(step, 'launch_intent');
    expect(first).toEqual(JSON.parse(step.request_json));
    // The same step read again (a new row object with the same bytes, as each transaction reads it).
    expect(stepRequestOf({ ...step }, 'launch_intent')).toBe(first);
    expect(Object.isFrozen(first)).toBe(true);
  });

  it('is validated again from changed bytes, and rejected when they are not a valid request', () => {
    const step = launchStep();
    const first = stepRequestOf(step, 'launch_intent');
    const changed = { ...step, request_json: canonicalJson({ ...first, session_id: randomUUID() }) };
    const second = stepRequestOf(changed, 'launch_intent');
    expect(second).not.toBe(first);
    expect(second.session_id).toBe(JSON.parse(changed.request_json).session_id);
    const invalid = { ...step, request_json: canonicalJson({ ...first, extra: 1 }) };
    expect(() => stepRequestOf(invalid, 'launch_intent')).toThrow();
    // Not canonical text (the keys out of order) is rejected too, however equal its value.
    const reordered = { ...step, request_json: JSON.stringify(Object.fromEntries(Object.entries(first).reverse())) };
    expect(() => stepRequestOf(reordered, 'launch_intent')).toThrow();
  });

  it('is read only as the kind the step row names', () => {
    expect(() => stepRequestOf(launchStep(), 'session_prepare')).toThrow(/expected a session_prepare step/);
  });
});

describe('a stored document hashed from its stored text', () => {
  it('is the hash of the document itself, once the text is its RFC 8785 form', () => {
    const request = JSON.parse(launchStep().request_json) as StepRequest;
    const text = canonicalJson(request);
    expect(canonicalTextHash(STEP_REQUEST_DOMAIN, text)).toBe(stepRequestHash(request));
    const doc = { b: [1, 'x', null, { d: true, c: 2.5 }], a: 'é\u2028' };
    expect(canonicalTextHash(PLAN_DOMAIN, canonicalJson(doc))).toBe(domainHash(PLAN_DOMAIN, canonicalJson(doc)));
    // Text that is not the canonical form hashes differently: callers hash only text parseCanonical accepted.
    expect(canonicalTextHash(STEP_REQUEST_DOMAIN, JSON.stringify(request, null, 1))).not.toBe(stepRequestHash(request));
  });
});
