/**
 * One interface over GitHub pull requests and GitLab merge requests. The
 * `remote_contribution_associate` step uses it to prove a contribution exists
 * (authenticated read) and to link it to the task idempotently: a comment/note
 * carrying the step's ownership marker is found or created, never duplicated.
 */
import type { ContributionKind, Provider } from '../domain/vocab';

export interface ContributionRef {
  provider: Provider;
  /** API root, e.g. https://api.github.com or https://gitlab.example.com/api/v4 (tests: a local server). */
  baseUrl: string;
  token: string;
  /** `owner/repo` on GitHub, the project path or numeric ID on GitLab. */
  remoteSlug: string;
  contributionKind: ContributionKind;
  contributionId: string;
}

export interface ContributionInfo {
  id: string;
  state: string;
  url: string;
  /** SHA-256 of the canonical subset of the provider response the evidence binds. */
  responseSha256: string;
}

export interface LinkHandle {
  /** Provider ID of the comment/note that carries the marker. */
  handle: string;
  created: boolean;
  responseSha256: string;
}

/**
 * Failure classes follow the ledger: `permanent` (the provider said no and
 * nothing was created: 404, 401/403, 422), `transient` (nothing was created
 * and a retry may work: connection refused before sending, 429, 503 with no
 * side effect), `ambiguous` (the request may have been applied: timeout after
 * sending, 5xx on a write).
 */
export class ProviderError extends Error {
  constructor(
    message: string,
    readonly failureClass: 'permanent' | 'transient' | 'ambiguous',
    readonly status: number | null,
  ) {
    super(message);
    this.name = 'ProviderError';
  }
}

export interface ContributionProvider {
  getContribution(ref: ContributionRef): Promise<ContributionInfo>;
  /** Finds the comment whose body contains `marker`, or creates it with `body` (which must contain `marker`). */
  ensureLinkComment(ref: ContributionRef, marker: string, body: string): Promise<LinkHandle>;
  findLinkComment(ref: ContributionRef, marker: string): Promise<LinkHandle | null>;
  deleteLinkComment(ref: ContributionRef, handle: string): Promise<void>;
}

export type ProviderRegistry = Record<Provider, ContributionProvider>;
