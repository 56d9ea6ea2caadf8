/**
 * Canonical list order, asserted after schema validation.
 *
 * Contract: every list in a canonical document is strictly increasing by its
 * canonical key (a tuple of strings compared element by element, each by
 * UTF-16 code units — the order RFC 8785 uses for object keys), so it is
 * sorted and free of duplicates. A violation throws
 * `ValidationError(<pointer of the offending element>, ..., 'invalid_document')`.
 * Builders should sort with `compareCanonicalKeys` / `sortCanonical` so they
 * agree with the validator byte for byte.
 */
import { ValidationError } from '../domain/errors';
import type { EvidenceEffect, StepKind } from '../domain/vocab';
import { jsonPointer } from './canonical-json';

export type CanonicalKey = readonly string[];

/** Orders two canonical keys (UTF-16 code-unit order per element, shorter prefix first). */
export function compareCanonicalKeys(a: CanonicalKey, b: CanonicalKey): number {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) {
    const x = a[i] as string;
    const y = b[i] as string;
    if (x !== y) return x < y ? -1 : 1;
  }
  return a.length - b.length;
}

/** A sorted copy of `items` in canonical order of `keyOf`. */
export function sortCanonical<T>(items: readonly T[], keyOf: (item: T) => CanonicalKey): T[] {
  return [...items].sort((a, b) => compareCanonicalKeys(keyOf(a), keyOf(b)));
}

/** Throws unless `items` is strictly increasing by `keyOf` (sorted, no duplicates). */
export function assertSortedUnique<T>(
  items: readonly T[],
  keyOf: (item: T) => CanonicalKey,
  field: string,
  keyName: string,
): void {
  for (let i = 1; i < items.length; i++) {
    const prev = keyOf(items[i - 1] as T);
    const cur = keyOf(items[i] as T);
    const order = compareCanonicalKeys(prev, cur);
    if (order === 0) {
      throw new ValidationError(
        jsonPointer(field, i),
        `duplicate entry: ${keyName} ${JSON.stringify(cur.join(', '))} already appears at index ${i - 1}`,
        'invalid_document',
      );
    }
    if (order > 0) {
      throw new ValidationError(
        jsonPointer(field, i),
        `list must be sorted by ${keyName}: ${JSON.stringify(cur.join(', '))} comes after ${JSON.stringify(prev.join(', '))}`,
        'invalid_document',
      );
    }
  }
}

type Doc = Record<string, unknown>;
const self = (v: unknown): CanonicalKey => [v as string];
const by =
  (...props: string[]) =>
  (v: unknown): CanonicalKey =>
    props.map((p) => (v as Doc)[p] as string);

function check(doc: Doc, prop: string, keyOf: (v: unknown) => CanonicalKey, base: string, keyName: string): void {
  assertSortedUnique(doc[prop] as unknown[], keyOf, jsonPointer(base, prop), keyName);
}

/** Sorted-unique lists of one (schema-valid) step request. */
export function checkStepRequestLists(kind: StepKind, request: unknown, base = ''): void {
  const doc = request as Doc;
  switch (kind) {
    case 'workspace_attachment':
      check(doc, 'member_ids', self, base, 'member ID');
      check(doc, 'blocker_ids', self, base, 'blocker ID');
      check(doc, 'repository_ids', self, base, 'repository ID');
      return;
    case 'attachment_claim':
      check(doc, 'attachments', by('attachment_id'), base, 'attachment_id');
      return;
    case 'session_prepare':
      check(doc, 'resource_keys', self, base, 'resource key');
      return;
    case 'fresh_branch_prepare':
    case 'remote_contribution_associate':
    case 'launch_intent':
      return;
  }
}

/** Sorted-unique rows of the shared row-set observation. */
export function checkRowSetLists(observation: unknown, base = ''): void {
  check(observation as Doc, 'rows', by('table', 'key'), base, '(table, key)');
}

/** Sorted-unique lists of one (schema-valid) evidence observation. */
export function checkObservationLists(kind: StepKind, effect: EvidenceEffect, observation: unknown, base = ''): void {
  if (effect !== 'present_exact') return checkRowSetLists(observation, base);
  const doc = observation as Doc;
  switch (kind) {
    case 'workspace_attachment':
      check(doc, 'group_member_rows', by('group_id', 'task_id'), base, '(group_id, task_id)');
      check(doc, 'blocker_rows', by('task_id', 'blocker_task_id'), base, '(task_id, blocker_task_id)');
      check(doc, 'environment_repo_rows', by('id'), base, 'id');
      return;
    case 'attachment_claim':
      check(doc, 'attachments', by('attachment_id'), base, 'attachment_id');
      return;
    case 'session_prepare':
      check(doc, 'resource_markers', by('resource_key'), base, 'resource_key');
      return;
    case 'fresh_branch_prepare':
    case 'remote_contribution_associate':
    case 'launch_intent':
      return;
  }
}

/** Sorted-unique `database_rows` and `steps` of a plan, and every step request's lists. */
export function checkPlanLists(plan: unknown): void {
  const doc = plan as Doc;
  check(doc, 'database_rows', by('table', 'key'), '', '(table, key)');
  check(doc, 'steps', by('kind', 'step_key'), '', '(kind, step_key)');
  (doc.steps as Doc[]).forEach((step, i) => {
    checkStepRequestLists(step.kind as StepKind, step.request, `/steps/${i}/request`);
  });
}
