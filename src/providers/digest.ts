/**
 * Digests of provider responses, and the marker search both clients share.
 *
 * Contract:
 * - `responseDigest(doc)` = domainHash(`kandev/provider-response/v1`,
 *   RFC 8785(doc)). Each client hashes only a small, stable subset of the
 *   response (identity, state, URL; for a comment its ID and body), so the
 *   digest of a comment read back later equals the digest of its creation.
 * - `findMarked(comments, marker)`: the comment with the lowest numeric ID
 *   whose body contains the marker, or null.
 */
import { canonicalJson } from '../canonical/canonical-json';
import { domainHash } from '../canonical/hash';
import type { ContributionRef } from './types';

export const PROVIDER_RESPONSE_DOMAIN = 'kandev/provider-response/v1';

export function responseDigest(doc: Record<string, string | number | boolean | null>): string {
  return domainHash(PROVIDER_RESPONSE_DOMAIN, canonicalJson(doc));
}

export interface PlainComment {
  id: string;
  body: string;
}

export function commentDigest(ref: ContributionRef, comment: PlainComment): string {
  return responseDigest({
    provider: ref.provider,
    remote_slug: ref.remoteSlug,
    contribution_id: ref.contributionId,
    comment_id: comment.id,
    body: comment.body,
  });
}

export function findMarked(comments: readonly PlainComment[], marker: string): PlainComment | null {
  let best: PlainComment | null = null;
  for (const c of comments) {
    if (!c.body.includes(marker)) continue;
    if (best === null || Number(c.id) < Number(best.id)) best = c;
  }
  return best;
}

/** A positive decimal integer (PR number, MR IID), or null. */
export function positiveInt(raw: string): number | null {
  if (!/^[1-9][0-9]{0,15}$/.test(raw)) return null;
  const n = Number(raw);
  return Number.isSafeInteger(n) ? n : null;
}

/** Marker bodies must carry the marker, or a retry could never find them. */
export function assertCarriesMarker(marker: string, body: string): void {
  if (marker.length === 0 || !body.includes(marker)) {
    throw new Error('ensureLinkComment: the comment body must contain the marker');
  }
}
