import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import {
  actorBindingHash,
  advisoryLockId,
  cleanupProofHash,
  compensationProofHash,
  createRequestHash,
  domainHash,
  evidenceHash,
  hashedDocument,
  idempotencyKey,
  lockKeyDigest,
  manifestHash,
  payloadHash,
  rowHash,
  stepRequestHash,
  ACTOR_DOMAIN,
  CLEANUP_PROOF_DOMAIN,
  COMPENSATION_DOMAIN,
  CREATE_REQUEST_DOMAIN,
  IDEMPOTENCY_DOMAIN,
  OUTBOX_PAYLOAD_DOMAIN,
  PLAN_DOMAIN,
  ROW_DOMAIN,
  STEP_EVIDENCE_DOMAIN,
  STEP_REQUEST_DOMAIN,
} from '../../src/canonical/hash';
import { canonicalJson } from '../../src/canonical/canonical-json';
import { expectInvalid } from './expect-invalid';
import * as F from './fixtures';

/** Independent reference: SHA-256 over a hand-built byte string. */
function sha256Hex(...chunks: Buffer[]): string {
  return createHash('sha256').update(Buffer.concat(chunks)).digest('hex');
}
const NUL = Buffer.from([0x00]);
const ascii = (s: string): Buffer => Buffer.from(s, 'ascii');
const utf8 = (s: string): Buffer => Buffer.from(s, 'utf8');

describe('domain constants', () => {
  it('are the protocol strings', () => {
    expect([
      PLAN_DOMAIN,
      ACTOR_DOMAIN,
      STEP_REQUEST_DOMAIN,
      STEP_EVIDENCE_DOMAIN,
      CREATE_REQUEST_DOMAIN,
      ROW_DOMAIN,
      IDEMPOTENCY_DOMAIN,
      COMPENSATION_DOMAIN,
      CLEANUP_PROOF_DOMAIN,
      OUTBOX_PAYLOAD_DOMAIN,
    ]).toEqual([
      'kandev/task-creation-plan/v1',
      'kandev/task-creation-actor/v1',
      'kandev/task-creation-step-request/v1',
      'kandev/task-creation-step-evidence/v1',
      'kandev/task-creation-request/v1',
      'kandev/task-creation-row/v1',
      'kandev/task-creation-step-idempotency/v1',
      'kandev/task-creation-compensation/v1',
      'kandev/task-resource-cleanup-proof/v1',
      'kandev/task-event-payload/v1',
    ]);
  });
});

describe('domainHash', () => {
  it('is SHA-256(ASCII(domain) || 0x00 || bytes) in lowercase hex', () => {
    expect(domainHash('d', Buffer.from('x'))).toBe(sha256Hex(ascii('d'), NUL, ascii('x')));
    // Pinned: sha256("d\0x").
    expect(domainHash('d', 'x')).toBe('ba91ca008f20fde6bcabba8b62f7ec58c203a74cd23f489919f2176b9d4eda92');
    expect(domainHash('d', '')).toBe(sha256Hex(ascii('d'), NUL));
  });

  it('hashes a string as its UTF-8 bytes, the same as the Buffer of them', () => {
    for (const text of ['é', '漢字 ✓ 😀', '{"k":"\u0000"}', 'a\u0000b']) {
      const bytes = Buffer.from(text, 'utf8');
      expect(domainHash(ROW_DOMAIN, text)).toBe(sha256Hex(ascii(ROW_DOMAIN), NUL, bytes));
      expect(domainHash(ROW_DOMAIN, bytes)).toBe(domainHash(ROW_DOMAIN, text));
    }
  });

  it('separates domains: the same bytes under another domain hash differently', () => {
    expect(domainHash(PLAN_DOMAIN, '{}')).not.toBe(domainHash(ACTOR_DOMAIN, '{}'));
    expect(domainHash('ab', 'c')).not.toBe(domainHash('a', 'bc'));
  });

  it('rejects a domain that is empty, non-ASCII or contains NUL', () => {
    expectInvalid(() => domainHash('', 'x'), 'domain');
    expectInvalid(() => domainHash('é', 'x'), 'domain');
    expectInvalid(() => domainHash('a\u0000b', 'x'), 'domain');
    // Checked on every call, not only a domain's first.
    expectInvalid(() => domainHash('é', 'x'), 'domain');
  });
});

describe('document hashes', () => {
  it('hash the hand-written RFC 8785 bytes of a request under the step-request domain', () => {
    const canonical =
      '{"agent_profile_id":"ffffffff-ffff-4fff-bfff-ffffffffffff","executor_id":"local","executor_profile_id":"default",' +
      `"launch_config_sha256":"${'4'.repeat(64)}","session_id":"eeeeeeee-eeee-4eee-8eee-eeeeeeeeeeee",` +
      '"task_id":"11111111-1111-4111-8111-111111111111","workspace_id":"22222222-2222-4222-8222-222222222222"}';
    expect(stepRequestHash(F.request('launch_intent'))).toBe(
      sha256Hex(ascii(STEP_REQUEST_DOMAIN), NUL, utf8(canonical)),
    );
  });

  it('hash a non-ASCII row document over its UTF-8 bytes', () => {
    expect(rowHash({ title: 'Fix ü', b: 1 })).toBe(sha256Hex(ascii(ROW_DOMAIN), NUL, utf8('{"b":1,"title":"Fix ü"}')));
  });

  it('are independent of key order and of -0 vs 0', () => {
    const p = F.plan();
    const reordered = Object.fromEntries(Object.entries(p).reverse());
    expect(manifestHash(reordered as typeof p)).toBe(manifestHash(p));
    expect(payloadHash({ n: -0 })).toBe(payloadHash({ n: 0 }));
  });

  it('match pinned vectors (any change to canonicalization or domains fails here)', () => {
    expect(manifestHash(F.plan())).toBe('6e6bf1c5e856458443811b07253ac18334a5e9f22e9a5f888b7649d49cf8844a');
    expect(actorBindingHash(F.actor())).toBe('8206b87738089ccddc11d15477007e221956b9bf0df5cf5ef457bf83bafdea0f');
    expect(stepRequestHash(F.request('fresh_branch_prepare'))).toBe(
      'd0b1544915722182ceb75b0c29f9cb0e84ff1fd3560a4eee6e6abd7c74740c78',
    );
    expect(evidenceHash(F.evidence('launch_intent'))).toBe(
      '935efc79fc806c0f4a62ee0822704fe2213703e50d0dba5b57d2ca689a70a783',
    );
    expect(compensationProofHash(F.compensation())).toBe(
      'cb055ef6363418c0fe294b6136147c7d2c4acbbd22889038a8cd1fc7e235a6b2',
    );
  });

  it('use one distinct domain per document type', () => {
    const doc = { a: 1 };
    const bytes = '{"a":1}';
    const cases: [string, string][] = [
      [createRequestHash(doc), CREATE_REQUEST_DOMAIN],
      [rowHash(doc), ROW_DOMAIN],
      [cleanupProofHash(doc), CLEANUP_PROOF_DOMAIN],
      [payloadHash(doc), OUTBOX_PAYLOAD_DOMAIN],
      [manifestHash(doc as never), PLAN_DOMAIN],
      [actorBindingHash(doc as never), ACTOR_DOMAIN],
      [stepRequestHash(doc as never), STEP_REQUEST_DOMAIN],
      [evidenceHash(doc as never), STEP_EVIDENCE_DOMAIN],
      [compensationProofHash(doc as never), COMPENSATION_DOMAIN],
    ];
    for (const [hash, domain] of cases) expect(hash).toBe(sha256Hex(ascii(domain), NUL, utf8(bytes)));
    expect(new Set(cases.map(([hash]) => hash)).size).toBe(cases.length);
  });

  it("hashedDocument answers the canonical text with the document's own hash, from one canonicalization", () => {
    const plan = F.plan();
    const reordered = Object.fromEntries(Object.entries(plan).reverse());
    const doc = hashedDocument(PLAN_DOMAIN, reordered);
    expect(doc.text).toBe(canonicalJson(plan));
    expect(doc.sha256).toBe(manifestHash(plan));
    expect(hashedDocument(ACTOR_DOMAIN, F.actor()).sha256).toBe(actorBindingHash(F.actor()));
    const request = F.request('fresh_branch_prepare');
    expect(hashedDocument(STEP_REQUEST_DOMAIN, request)).toEqual({
      text: canonicalJson(request),
      sha256: stepRequestHash(request),
    });
    expectInvalid(() => hashedDocument(PLAN_DOMAIN, { at: new Date(0) }), '/at');
  });

  it('refuse documents that are not plain JSON', () => {
    expectInvalid(() => rowHash({ created_at: new Date(0) }), '/created_at');
    expectInvalid(() => payloadHash({ seq: 1n }), '/seq');
  });
});

describe('idempotencyKey', () => {
  const args = [F.ID.operation, 'fresh_branch_prepare', F.ID.envRepo, F.h('9')] as const;

  it('hashes the NUL-joined UTF-8 parts under the idempotency domain', () => {
    const body = Buffer.concat([utf8(args[0]), NUL, utf8(args[1]), NUL, utf8(args[2]), NUL, utf8(args[3])]);
    expect(idempotencyKey(...args)).toBe(sha256Hex(ascii(IDEMPOTENCY_DOMAIN), NUL, body));
    // Pinned (also reproducible with printf '<domain>\\0<op>\\0<kind>\\0<key>\\0<hash>' | sha256sum).
    expect(idempotencyKey(...args)).toBe('fd21ba661de570ad8f9260695de84c9c4035ec9ce662505cf1ad69a898a99084');
  });

  it('changes when any single input changes', () => {
    const base = idempotencyKey(...args);
    const variants = [
      idempotencyKey(F.ID.stepId, args[1], args[2], args[3]),
      idempotencyKey(args[0], 'session_prepare', args[2], args[3]),
      idempotencyKey(args[0], args[1], F.ID.session, args[3]),
      idempotencyKey(args[0], args[1], args[2], F.h('8')),
    ];
    for (const v of variants) expect(v).not.toBe(base);
    expect(new Set(variants).size).toBe(4);
  });

  it('is unambiguous about part boundaries and rejects NUL inside a part', () => {
    expect(idempotencyKey('ab', 'launch_intent', 'c', F.h('1'))).not.toBe(
      idempotencyKey('a', 'launch_intent', 'bc', F.h('1')),
    );
    expectInvalid(() => idempotencyKey('a\u0000', 'launch_intent', 'c', F.h('1')), 'idempotency_key/0');
  });
});

describe('lock keys', () => {
  it('lockKeyDigest is raw SHA-256(ASCII(domain) || 0x00 || parts joined by 0x00)', () => {
    const ws = lockKeyDigest('workspace-identity/v1', [F.ID.workspace]);
    expect(Buffer.isBuffer(ws)).toBe(true);
    expect(ws.length).toBe(32);
    expect(ws.toString('hex')).toBe(sha256Hex(ascii('workspace-identity/v1'), NUL, utf8(F.ID.workspace)));
    const ext = lockKeyDigest('task-external-id/v1', [F.ID.workspace, 'JIRA-1 ü']);
    expect(ext.toString('hex')).toBe(
      sha256Hex(ascii('task-external-id/v1'), NUL, utf8(F.ID.workspace), NUL, utf8('JIRA-1 ü')),
    );
    expect(lockKeyDigest('task-id/v1', [F.ID.task]).equals(lockKeyDigest('workspace-identity/v1', [F.ID.task]))).toBe(
      false,
    );
  });

  it('rejects unknown domains, no parts, and NUL in a part', () => {
    expectInvalid(() => lockKeyDigest('task/v1' as never, ['x']), 'domain');
    expectInvalid(() => lockKeyDigest('task-id/v1', []), 'parts');
    expectInvalid(() => lockKeyDigest('task-external-id/v1', [F.ID.workspace, 'a\u0000b']), 'parts/1');
  });

  it('advisoryLockId reads the first 8 bytes as a signed big-endian int64', () => {
    const positive = Buffer.alloc(32);
    positive.write('0102030405060708', 'hex');
    expect(advisoryLockId(positive)).toBe(0x0102030405060708n);
    const negative = Buffer.alloc(32, 0xff);
    expect(advisoryLockId(negative)).toBe(-1n);
    const min = Buffer.alloc(32);
    min[0] = 0x80;
    expect(advisoryLockId(min)).toBe(-(2n ** 63n));
    expect(advisoryLockId(min).toString()).toBe('-9223372036854775808');
    const digest = lockKeyDigest('task-id/v1', [F.ID.task]);
    expect(advisoryLockId(digest)).toBe(BigInt.asIntN(64, BigInt(`0x${digest.subarray(0, 8).toString('hex')}`)));
  });

  it('advisoryLockId refuses anything but a 32-byte digest', () => {
    expectInvalid(() => advisoryLockId(Buffer.alloc(8)), 'digest');
  });
});
