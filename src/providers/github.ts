/**
 * GitHub pull requests through Octokit (`@octokit/rest`): `pulls.get` for the
 * authenticated read, `issues.listComments` (every page) / `createComment` /
 * `deleteComment` for the marker comment (a PR is an issue, so its
 * conversation comments are issue comments).
 *
 * Contract:
 * - `ref.baseUrl` is the API root (`https://api.github.com`, a GitHub
 *   Enterprise `/api/v3` root, or the fake server), `ref.token` goes in the
 *   Authorization header, `ref.remoteSlug` is `owner/repo`, and the
 *   contribution ID is the PR number.
 * - Every HTTP request (each page too) is aborted after `timeoutMs`.
 *   Octokit adds no retries of its own, so one call is one request and the
 *   failure classes of `http-failure.ts` apply to exactly that request.
 * - `ensureLinkComment` lists first and creates only when no comment carries
 *   the marker: a retry after an ambiguous create finds the first comment.
 */
import { Octokit } from '@octokit/rest';
import { assertCarriesMarker, commentDigest, findMarked, positiveInt, responseDigest } from './digest';
import { invalidReference, toProviderError, type CallKind } from './http-failure';
import type { ContributionInfo, ContributionProvider, ContributionRef, LinkHandle } from './types';

export interface GithubProviderOptions {
  timeoutMs: number;
}

interface Target {
  owner: string;
  repo: string;
  number: number;
}

/** Why 100: GitHub's largest page, so a busy PR's comments take the fewest requests. */
const PAGE_SIZE = 100;

function target(ref: ContributionRef, what: string): Target {
  const parts = ref.remoteSlug.split('/');
  if (parts.length !== 2 || parts.some((p) => p.length === 0)) {
    throw invalidReference(what, `GitHub slug "${ref.remoteSlug}" is not owner/repo`);
  }
  const number = positiveInt(ref.contributionId);
  if (number === null) throw invalidReference(what, `"${ref.contributionId}" is not a pull request number`);
  return { owner: parts[0]!, repo: parts[1]!, number };
}

/** An Octokit RequestError that carries a provider response (not a transport failure Octokit wrapped as 500). */
function httpStatusOf(err: unknown): { status: number; detail: string } | null {
  const e = err as { status?: unknown; response?: { data?: unknown } };
  if (typeof e?.status !== 'number' || e.response === undefined) return null;
  const data = e.response.data as { message?: unknown } | undefined;
  return { status: e.status, detail: typeof data?.message === 'string' ? data.message : '' };
}

function client(ref: ContributionRef, timeoutMs: number): Octokit {
  return new Octokit({
    auth: ref.token,
    baseUrl: ref.baseUrl.replace(/\/+$/, ''),
    userAgent: 'taskledger',
    request: {
      fetch: (url: string | URL, init?: RequestInit) => {
        const timeout = AbortSignal.timeout(timeoutMs);
        return fetch(url, { ...init, signal: init?.signal ? AbortSignal.any([init.signal, timeout]) : timeout });
      },
    },
    log: { debug: () => undefined, info: () => undefined, warn: () => undefined, error: () => undefined },
  });
}

export function createGithubProvider(options: GithubProviderOptions): ContributionProvider {
  async function run<T>(call: CallKind, what: string, fn: () => Promise<T>): Promise<T> {
    try {
      return await fn();
    } catch (err) {
      throw toProviderError(err, call, `GitHub ${what}`, httpStatusOf);
    }
  }

  async function findLinkComment(ref: ContributionRef, marker: string): Promise<LinkHandle | null> {
    const what = 'list comments';
    const t = target(ref, `GitHub ${what}`);
    const gh = client(ref, options.timeoutMs);
    const comments = await run('read', what, () =>
      gh.paginate(gh.rest.issues.listComments, {
        owner: t.owner,
        repo: t.repo,
        issue_number: t.number,
        per_page: PAGE_SIZE,
      }),
    );
    const found = findMarked(
      comments.map((c) => ({ id: String(c.id), body: c.body ?? '' })),
      marker,
    );
    return found ? { handle: found.id, created: false, responseSha256: commentDigest(ref, found) } : null;
  }

  return {
    async getContribution(ref: ContributionRef): Promise<ContributionInfo> {
      const what = 'get pull request';
      const t = target(ref, `GitHub ${what}`);
      const gh = client(ref, options.timeoutMs);
      const { data } = await run('read', what, () =>
        gh.rest.pulls.get({ owner: t.owner, repo: t.repo, pull_number: t.number }),
      );
      const state = data.merged ? 'merged' : data.state;
      const info = { id: String(data.number), state, url: data.html_url };
      return {
        ...info,
        responseSha256: responseDigest({
          provider: 'github',
          remote_slug: ref.remoteSlug,
          contribution_kind: ref.contributionKind,
          ...info,
        }),
      };
    },

    findLinkComment,

    async ensureLinkComment(ref: ContributionRef, marker: string, body: string): Promise<LinkHandle> {
      assertCarriesMarker(marker, body);
      const found = await findLinkComment(ref, marker);
      if (found) return found;
      const what = 'create comment';
      const t = target(ref, `GitHub ${what}`);
      const gh = client(ref, options.timeoutMs);
      const { data } = await run('write', what, () =>
        gh.rest.issues.createComment({ owner: t.owner, repo: t.repo, issue_number: t.number, body }),
      );
      const created = { id: String(data.id), body: data.body ?? '' };
      return { handle: created.id, created: true, responseSha256: commentDigest(ref, created) };
    },

    async deleteLinkComment(ref: ContributionRef, handle: string): Promise<void> {
      const what = 'delete comment';
      const t = target(ref, `GitHub ${what}`);
      const commentId = positiveInt(handle);
      if (commentId === null) throw invalidReference(`GitHub ${what}`, `"${handle}" is not a comment ID`);
      const gh = client(ref, options.timeoutMs);
      await run('write', what, () =>
        gh.rest.issues.deleteComment({ owner: t.owner, repo: t.repo, comment_id: commentId }),
      );
    },
  };
}
